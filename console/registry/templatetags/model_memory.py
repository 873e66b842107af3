"""`{% model_memory model.name %}`: a model's versions in this process's memory budget, for its page."""

from __future__ import annotations

import datetime
from typing import Any

from django import template

from console.registry.engine_status import EngineStatus

register = template.Library()


@register.inclusion_tag("registry/_memory.html", takes_context=True)
def model_memory(context: dict[str, Any], name: str) -> dict[str, Any]:
    """Each loaded version: resident or parked, footprint, last use, loads and its last cold start."""
    memory = EngineStatus.of(name, {"request": context.get("request")}).memory
    rows = []
    for number, entry in sorted(memory.items()):
        last = entry["last_used"]
        rows.append(
            entry
            | {
                "number": number,
                "host_bytes": entry["footprint_bytes"].get("host"),
                "last_used_at": datetime.datetime.fromtimestamp(last, datetime.UTC) if last else None,
                "cold_start_ms": round(entry["cold_start_seconds"] * 1000) if entry["cold_start_seconds"] else None,
            }
        )
    return {"rows": rows}
