"""WebSocket routes, composed into the ASGI app by composition.py (the live metrics consumer lands here)."""

from __future__ import annotations

from django.urls import URLPattern

from console.monitoring.routing import websocket_urlpatterns as monitoring_websockets

websocket_urlpatterns: list[URLPattern] = [*monitoring_websockets]
