"""The soak's figures: the headline summary, the table docs/reliability.md carries, and the Plotly page."""

from __future__ import annotations

from bench.soak_report import BEGIN, END, doc_table, summary, write_doc_table, write_html


def sample(t: float, rss_kb: int, threads: int = 30, fds: int = 40) -> dict:
    return {"t": t, "rss_kb": rss_kb, "threads": threads, "fds": fds, "children": 5}


def window(t: float, requests: int = 100, errors: int = 0) -> dict:
    stream = {"requests": requests, "errors": errors, "p99_ms": 5.0}
    return {
        "t": t,
        "seconds": 10.0,
        "requests": requests,
        "errors": errors,
        "p50_ms": 1.0,
        "p99_ms": 5.0,
        "streams": {"simple json": stream},
        "examples": [],
    }


def a_run(errors: int = 0) -> dict:
    phase = {"from_s": 0, "to_s": 300, "requests": 1000, "p50_ms": 1.0, "p99_ms": 5.0}
    return {
        "finished": "2026-01-01T00:00:00+00:00",
        "settings": {
            "minutes": 10,
            "switch_every_s": 30.0,
            "upload_every_s": 60.0,
            "pause_ms": 5.0,
            "window_s": 10.0,
            "streams": {"simple json": 8},
            "cores": 2,
            "load_average_start": "1.00 1.00 1.00",
            "load_average_end": "1.00 1.00 1.00",
        },
        "windows": [window(t, errors=errors if t == 600 else 0) for t in range(10, 610, 10)],
        "phases": {"first": phase, "last": phase | {"from_s": 300, "to_s": 600}},
        "footprint": [sample(0, 100_000), sample(30, 200_000), sample(60, 300_000), sample(600, 310_000, fds=42)],
        "after": sample(601, 310_000),
        "switches": [{"t": 30.0, "seconds": 0.1, "version": 2}, {"t": 60.0, "seconds": 0.4, "error": "refused"}],
        "uploads": [{"t": 60.0, "seconds": 1.5, "version": 2}],
        "dashboards": {"clients": 5, "messages": 3000, "seconds": 600.0},
    }


def test_it_reads_the_start_once_the_traffic_has_run_a_minute_and_counts_every_failure():
    figures = summary(a_run(errors=3))
    assert (figures["start"]["rss_kb"], figures["end"]["rss_kb"], figures["max"]["rss_kb"]) == (
        300_000,
        310_000,
        310_000,
    )
    assert (figures["errors"], figures["switch_failures"], figures["switch_max_s"]) == (3, 1, 0.4)
    assert figures["requests"] == 6000


def test_it_writes_the_table_between_its_markers_and_keeps_the_prose(tmp_path):
    doc = tmp_path / "reliability.md"
    doc.write_text(f"# Reliability\n\nbefore\n\n{BEGIN}\nold\n{END}\n\nafter\n")
    write_doc_table(a_run(), doc)
    text = doc.read_text()
    assert text.startswith("# Reliability\n\nbefore\n\n" + BEGIN) and text.endswith(END + "\n\nafter\n")
    assert "old" not in text and doc_table(a_run()) in text
    assert "| RSS at start / end / max | 293 MiB / 303 MiB / 303 MiB |" in text


def test_it_adds_a_soak_section_to_a_doc_without_markers(tmp_path):
    doc = tmp_path / "reliability.md"
    doc.write_text("# Reliability\n")
    write_doc_table(a_run(), doc)
    assert doc.read_text().startswith(f"# Reliability\n\n## Soak\n\n{BEGIN}\n")


def test_it_writes_a_page_that_carries_plotly_and_every_series(tmp_path):
    write_html(a_run(), tmp_path / "report.html")
    html = (tmp_path / "report.html").read_text()
    assert "<script src=" not in html
    for name in ("p99, all", "p99, simple json", "RSS (MiB)", "open fds", "child processes", "failed or wrong"):
        assert f'"name":"{name}"' in html
