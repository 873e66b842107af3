"""URLs of the monitoring app (mounted at /monitoring/)."""

from __future__ import annotations

from django.urls import path

from console.monitoring import views

app_name = "monitoring"

urlpatterns = [
    path("", views.monitoring, name="page"),
]
