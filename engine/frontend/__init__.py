"""Front ends that serve the engine; `http` is the lean ASGI app for Triton's v2 HTTP protocol."""

from engine.frontend.handlers import Reply
from engine.frontend.http import DEFAULT_MAX_BODY_BYTES, V2App
from engine.frontend.routes import Route

__all__ = ["DEFAULT_MAX_BODY_BYTES", "Reply", "Route", "V2App"]
