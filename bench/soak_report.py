"""The soak's report: a self-contained Plotly page (plotly.js embedded from the installed package, no CDN) with p99,
throughput, errors and the server's RSS, threads, fds and child processes over time, and the figures' table that
docs/reliability.md carries between its soak markers."""

from __future__ import annotations

from pathlib import Path

import plotly.graph_objects as go
import plotly.io as pio
from plotly.subplots import make_subplots

BEGIN = "<!-- soak:begin (bench/soak.py rewrites this table) -->"
END = "<!-- soak:end -->"
SETTLED_AFTER_S = 60.0  # the footprint's "start" is read once the traffic has run this long (or half the run)


def summary(run: dict) -> dict:
    """The headline figures: requests, failures, p99 of the first and last phase, footprint at start, end, max."""
    windows, samples = run["windows"], run["footprint"]
    duration = windows[-1]["t"] if windows else 0.0
    settled = min(SETTLED_AFTER_S, duration / 2)
    start = next((s for s in samples if s["t"] >= settled), samples[-1])
    requests = sum(w["requests"] for w in windows)
    return {
        "duration_s": duration,
        "requests": requests,
        "requests_per_s": requests / duration if duration else 0.0,
        "errors": sum(w["errors"] for w in windows),
        "switches": len(run["switches"]),
        "switch_failures": sum(1 for e in run["switches"] if "error" in e),
        "switch_max_s": max((e["seconds"] for e in run["switches"]), default=0.0),
        "uploads": len(run["uploads"]),
        "upload_failures": sum(1 for e in run["uploads"] if "error" in e),
        "upload_max_s": max((e["seconds"] for e in run["uploads"]), default=0.0),
        "first": run["phases"]["first"],
        "last": run["phases"]["last"],
        "start": start,
        "end": samples[-1],
        "max": {key: max(s[key] for s in samples) for key in ("rss_kb", "threads", "fds", "children")},
        "after": run["after"],
    }


def _ms(value: float | None) -> str:
    return f"{value:.1f} ms" if value is not None else "-"


def _mib(kb: int) -> str:
    return f"{kb / 1024:.0f} MiB"


def doc_table(run: dict) -> str:
    """The markdown table of one run's figures."""
    s = summary(run)
    settings = run["settings"]
    first, last = s["first"], s["last"]
    dashboards = run["dashboards"]
    per_client = dashboards["messages"] / dashboards["seconds"] / dashboards["clients"] if dashboards["clients"] else 0
    mix = ", ".join(f"{name} ×{count}" for name, count in settings["streams"].items())
    rows = [
        (
            "run",
            f"{settings['minutes']:g} min, finished {run['finished']}, {settings['cores']} cores shared with other "
            f"work (load average {settings['load_average_start']} at start, {settings['load_average_end']} at end)",
        ),
        ("mix (connections)", f"{mix}; {settings['pause_ms']:g} ms between requests on a connection"),
        ("requests", f"{s['requests']:,} ({s['requests_per_s']:.0f}/s)"),
        ("failed or wrong answers", f"**{s['errors']}**"),
        (
            f"`digits` version switches (every {settings['switch_every_s']:g} s)",
            f"{s['switches']}, {s['switch_failures']} failed, slowest {s['switch_max_s']:.1f} s",
        ),
        (
            f"uploads of a new `simple` version (every {settings['upload_every_s']:g} s)",
            f"{s['uploads']}, {s['upload_failures']} failed, slowest {s['upload_max_s']:.1f} s",
        ),
        (
            "p99 (p50), first vs last phase",
            f"{_ms(first['p99_ms'])} ({_ms(first['p50_ms'])}) in {first['from_s']:g}–{first['to_s']:g} s vs "
            f"{_ms(last['p99_ms'])} ({_ms(last['p50_ms'])}) in {last['from_s']:g}–{last['to_s']:g} s",
        ),
        ("RSS at start / end / max", " / ".join(_mib(v) for v in _footprints(s, "rss_kb"))),
        ("threads at start / end / max", " / ".join(str(v) for v in _footprints(s, "threads"))),
        ("open fds at start / end / max", " / ".join(str(v) for v in _footprints(s, "fds"))),
        ("child processes (python stubs) at start / end / max", " / ".join(str(v) for v in _footprints(s, "children"))),
        (
            "after the traffic stopped",
            f"RSS {_mib(s['after']['rss_kb'])}, {s['after']['threads']} threads, {s['after']['fds']} fds, "
            f"{s['after']['children']} children",
        ),
        ("dashboards", f"{dashboards['clients']} on /ws/metrics/, {per_client:.2f} snapshots per client per second"),
    ]
    lines = ["| | |", "| --- | --- |", *(f"| {name} | {value} |" for name, value in rows)]
    note = (
        f"Start is the sample {s['start']['t']:g} s into the traffic (caches, pools and connections warm), end the "
        "last sample under traffic;\np99 and p50 are over every checked answer of the phase."
    )
    return "\n".join(lines) + "\n\n" + note


def _footprints(s: dict, key: str) -> list[int]:
    return [s["start"][key], s["end"][key], s["max"][key]]


def write_doc_table(run: dict, doc: Path) -> None:
    """Rewrite the table between the soak markers of `doc` (appended, with its heading, when it has none)."""
    block = f"{BEGIN}\n{doc_table(run)}\n{END}"
    text = doc.read_text() if doc.exists() else ""
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        text = head + block + rest.split(END, 1)[1]
    else:
        text = (text.rstrip() + "\n\n" if text.strip() else "") + f"## Soak\n\n{block}\n"
    doc.write_text(text)


def figure(run: dict) -> go.Figure:
    """p99 per stream, throughput and errors, RSS, and threads/fds/children over the run's time."""
    windows, samples = run["windows"], run["footprint"]
    fig = make_subplots(
        rows=4,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.05,
        subplot_titles=(
            "p99 latency per window (ms)",
            "requests/s and failed or wrong answers per window",
            "server RSS (MiB)",
            "server threads, open fds, child processes",
        ),
    )
    times = [w["t"] for w in windows]
    fig.add_trace(go.Scatter(x=times, y=[w["p99_ms"] for w in windows], name="p99, all", line={"width": 3}), 1, 1)
    for stream in run["settings"]["streams"]:
        p99s = [w["streams"].get(stream, {}).get("p99_ms") for w in windows]
        fig.add_trace(go.Scatter(x=times, y=p99s, name=f"p99, {stream}", line={"width": 1}, opacity=0.7), 1, 1)
    rates = [w["requests"] / w["seconds"] if w["seconds"] else 0 for w in windows]
    fig.add_trace(go.Scatter(x=times, y=rates, name="requests/s"), 2, 1)
    fig.add_trace(go.Bar(x=times, y=[w["errors"] for w in windows], name="failed or wrong"), 2, 1)
    sample_times = [s["t"] for s in samples]
    fig.add_trace(go.Scatter(x=sample_times, y=[s["rss_kb"] / 1024 for s in samples], name="RSS (MiB)"), 3, 1)
    for key, label in (("threads", "threads"), ("fds", "open fds"), ("children", "child processes")):
        fig.add_trace(go.Scatter(x=sample_times, y=[s[key] for s in samples], name=label), 4, 1)
    for event, colour in ((run["switches"], "grey"), (run["uploads"], "green")):
        for item in event:
            fig.add_vline(x=item["t"], line={"dash": "dot", "width": 1, "color": colour}, opacity=0.4)
    fig.update_xaxes(title_text="seconds into the soak (dotted: version switches grey, uploads green)", row=4, col=1)
    s = summary(run)
    fig.update_layout(
        title=f"Infera soak: {run['settings']['minutes']:g} min, {s['requests']:,} requests, {s['errors']} failed",
        height=1200,
        template="plotly_white",
    )
    return fig


def write_html(run: dict, path: Path) -> None:
    """The report as one HTML file that opens offline."""
    pio.write_html(figure(run), str(path), include_plotlyjs=True, full_html=True)
