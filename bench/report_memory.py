"""The memory-budget sections of docs/benchmarks.md (issue 37): load/unload cycles per backend (bench/footprint.py)
and many on-demand models under one budget (bench/multiplex.py), each goal as PASS or MISS."""

from __future__ import annotations

from bench.report_cells import table

FOOTPRINT_HEADING = "Memory: load/unload cycles per backend"
MULTIPLEX_HEADING = "Memory: 50 on-demand models under a 500 MB budget"
RSS_GROWTH_MIB = 50.0  # the goal: RSS growth over the cycles


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def footprint_text(run: dict) -> str:
    rows = []
    for row in run["rows"]:
        if "unavailable" in row:
            rows.append([row["backend"], "", "not available: " + " ".join(row["unavailable"]), "", "", "", ""])
            continue
        start, end = row["start"], row["end"]
        rows.append(
            [
                f"{row['backend']} ({row['model']})",
                str(row["cycles"]),
                f"{start['rss_kb'] / 1024:.0f} → {end['rss_kb'] / 1024:.0f} MiB ({row['rss_growth_mib']:+.1f})",
                f"{start['threads']} → {end['threads']}",
                f"{start['fds']} → {end['fds']}",
                f"{start['children']} → {end['children']}",
                _verdict(row["rss_growth_mib"] <= RSS_GROWTH_MIB and end["children"] <= start["children"]),
            ]
        )
    intro = (
        f"Each backend in a fresh process (`python -m bench.footprint`): one warm cycle, then the cycles counted "
        f"(load from the repository, one request, unload). Goal: RSS growth <= {RSS_GROWTH_MIB:.0f} MiB, no stub "
        f"left. Run `{run.get('command', 'python -m bench --sections footprint')}` on {run.get('date', '?')}."
    )
    headers = ["backend", "cycles", "RSS start → end", "threads", "fds", "child processes", "goal"]
    return intro + "\n\n" + table(headers, rows)


def multiplex_text(run: dict) -> str:
    budget = run["budget_mib"]
    rows = [
        ["models, budget", f"{run['models']} × ~40 MB on demand, {budget} MiB host budget"],
        ["traffic", f"Zipf s={run['zipf_s']}, {run['connections']} callers in process, {run['seconds']:.0f} s"],
        ["registration (load, measure, park each)", f"{run['registered_s']} s"],
        ["requests (failed)", f"{run['requests']} ({run['failed']}) — {_verdict(run['failed'] == 0)}"],
        ["requests/s", str(run["requests_per_s"])],
        ["hit rate (model resident on arrival)", str(run["hit_rate"])],
        ["cold starts, p50 / p99", f"{run['cold_starts']}, {run['cold_start_p50_ms']} / {run['cold_start_p99_ms']} ms"],
        ["request latency p50 / p99", f"{run['latency_p50_ms']} / {run['latency_p99_ms']} ms"],
        ["evictions", str(run["evictions"])],
        ["measured footprint (median)", f"{run['footprint_median_mib']} MiB"],
        [
            "highest charged to the budget (every 100 ms)",
            f"{run['max_charged_mib']} MiB — {_verdict(run['max_charged_mib'] <= budget)}",
        ],
        ["highest RSS over the pre-start baseline", f"{run['max_rss_over_baseline_mib']} MiB"],
    ]
    errors = "".join(f"\n- {text} ({count})" for text, count in run.get("errors", {}).items())
    return (
        f"`{run.get('command', 'python -m bench --sections multiplex')}` on {run.get('date', '?')} "
        f"(bench/multiplex.py).\n\n" + table(["", ""], rows) + (f"\n\nErrors:{errors}" if errors else "")
    )
