"""`{{ text|shown }}`: text as console users see it, without this server's paths (console/server_paths.py)."""

from __future__ import annotations

from django import template

from console.server_paths import shown as without_server_paths

register = template.Library()


@register.filter
def shown(text: object) -> str:
    return without_server_paths(str(text)) if text else ""
