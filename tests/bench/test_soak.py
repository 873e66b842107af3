"""The soak as CI runs it: one minute against a real console process, every answer checked, the report written.

No timing is asserted: the figures are whatever the shared machine gives; what must hold is that nothing failed and
that the report carries every series."""

from __future__ import annotations

import json

import pytest

from bench import soak
from bench.soak_report import BEGIN, END

pytestmark = [pytest.mark.server, pytest.mark.slow]


def test_it_soaks_a_minute_without_a_failure_and_writes_the_report(tmp_path):
    doc = tmp_path / "reliability.md"
    doc.write_text(f"# Reliability\n\nprose kept\n\n{BEGIN}\nold table\n{END}\n\nmore prose\n")

    assert soak.main(["--minutes", "1", "--out", str(tmp_path / "soak"), "--doc", str(doc)]) == 0

    run = json.loads((tmp_path / "soak" / "soak.json").read_text())
    assert soak.failures(run) == 0
    assert sum(window["requests"] for window in run["windows"]) > 0
    assert {stream for window in run["windows"] for stream in window["streams"]} == set(run["settings"]["streams"])
    assert run["switches"] and all("error" not in switch for switch in run["switches"])
    assert run["uploads"] and all("error" not in upload for upload in run["uploads"])
    assert len(run["footprint"]) > 2 and run["dashboards"]["messages"] > 0
    html = (tmp_path / "soak" / "report.html").read_text()
    assert "<script src=" not in html and "Plotly.newPlot" in html  # plotly.js is in the page, not fetched
    for series in ("p99, all", "requests\\u002fs", "RSS (MiB)", "threads", "open fds", "child processes"):
        assert f'"name":"{series}"' in html
    text = doc.read_text()
    assert "prose kept" in text and "more prose" in text and "old table" not in text
    assert "| failed or wrong answers | **0** |" in text
