"""The generation bench's own logic: the goal's verdict and its section of the doc."""

from __future__ import annotations

from bench.generation import MARKERS, GenerationRun, render, verdict, write_section


def runs(single: int, many: int) -> dict:
    made = {}
    for mode in ("continuous", "one at a time"):
        for streams, tokens in ((1, single), (8, single * 4), (32, many)):
            made[(mode, streams)] = GenerationRun(
                mode, streams, 10.0, tokens=tokens, finished=streams, first_token_s=[0.01]
            )
    return made


def test_it_judges_the_goal_from_one_and_32_streams():
    assert verdict(runs(100, 900)) == (9.0, "PASS")
    assert verdict(runs(100, 500))[1] == "MISS"


def test_it_rewrites_only_its_own_section(tmp_path):
    document = tmp_path / "benchmarks.md"
    document.write_text("# Benchmarks\n\nkept\n")
    write_section(document, render(runs(100, 900), 10.0, (0.5, 1.2)))
    first = document.read_text()
    assert "load average 0.5 before, 1.2 after" in first
    assert first.startswith("# Benchmarks\n\nkept\n") and first.count(MARKERS[0]) == 1 and "9.0× — PASS" in first
    write_section(document, render(runs(100, 500), 10.0))
    second = document.read_text()
    assert second.count(MARKERS[0]) == 1 and "5.0× — MISS" in second and "kept" in second
