"""Markdown tables and the cells docs/benchmarks.md's sections share: figures, shortened text, reasons."""

from __future__ import annotations

from collections.abc import Callable


def table(headers: list[str], rows: list[list[str]]) -> str:
    """A markdown table."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(" --- " for _ in headers) + "|"]
    lines += ["| " + " | ".join(cells) + " |" for cells in rows]
    return "\n".join(lines)


def figure_cells(row: dict) -> list[str]:
    """A measured row's req/s, p50 ms, p99 ms and errors as table cells."""
    return [f"{row['rps']:.0f}", f"{row['p50_ms']:.3f}", f"{row['p99_ms']:.3f}", str(row["errors"])]


def short(text: str, limit: int = 140) -> str:
    text = " ".join(str(text).split()).replace("|", "/")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def section_or_reason(run: dict | None, render: Callable[[dict], str]) -> str:
    """A section's text, or why its run is missing."""
    if not run:
        return "Not run."
    if "unavailable" in run:
        return f"Not available: {short(run['unavailable'], 400)}"
    return render(run)


def served_by(run: dict) -> str:
    """What served a measured section's run: the console or the engine-only app."""
    return "the console, `manage.py serve`" if run["launch"] == "console" else "the engine-only app"
