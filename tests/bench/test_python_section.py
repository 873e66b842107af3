"""The python section: its two add_sub models, its verdict, and a partial run rewriting only its markdown."""

from __future__ import annotations

from bench.models import write_python_repository
from bench.report import PYTHON_HEADING, splice_sections, write_outputs
from bench.targets import python_verdict

IN_PROCESS = 'parameters { key: "EXECUTION_MODE" value: { string_value: "in_process" } }\n'


def _row(mode: str, encoding: str, concurrency: int, rps: float, errors: int = 0) -> dict:
    model = "py_add_sub" if mode == "isolated" else "py_add_sub_inproc"
    return {
        "model": model,
        "mode": mode,
        "encoding": encoding,
        "concurrency": concurrency,
        "rps": rps,
        "p50_ms": 1.0,
        "p99_ms": 2.0,
        "errors": errors,
    }


def _run(isolated_rps: float, in_process_rps: float, errors: int = 0) -> dict:
    rows = []
    for concurrency in (1, 64):
        rows += [
            _row("isolated", "json", concurrency, isolated_rps, errors),
            _row("in-process", "json", concurrency, in_process_rps),
        ]
    return {
        "rows": rows,
        "encodings": ["json"],
        "concurrencies": [1, 64],
        "seconds": 2.0,
        "runs": 3,
        "launch": "console",
        "date": "2026-12-01 00:00 UTC",
        "command": "python -m bench --sections python",
    }


def test_it_writes_two_models_that_differ_only_by_execution_mode(tmp_path):
    write_python_repository(tmp_path)
    isolated = (tmp_path / "py_add_sub" / "config.pbtxt").read_text()
    in_process = (tmp_path / "py_add_sub_inproc" / "config.pbtxt").read_text()
    assert 'backend: "python"' in isolated and "max_batch_size: 8" in isolated
    assert "EXECUTION_MODE" not in isolated
    assert in_process.replace("py_add_sub_inproc", "py_add_sub") == isolated + IN_PROCESS
    model_py = [(tmp_path / name / "1" / "model.py").read_text() for name in ("py_add_sub", "py_add_sub_inproc")]
    assert model_py[0] == model_py[1] and "class TritonPythonModel" in model_py[0]


def test_it_passes_at_seven_tenths_of_in_process_throughput():
    assert python_verdict(_run(700, 1000), "json").status == "PASS"
    assert python_verdict(_run(699, 1000), "json").status == "MISS"
    assert python_verdict(_run(900, 1000, errors=1), "json").status == "MISS"


def test_it_replaces_a_section_and_keeps_the_others_byte_for_byte():
    markdown = "# Title\n\nintro\n\n## A\n\nold a\n\n### sub\n\nrows\n\n## B\n\nb text\n"
    spliced = splice_sections(markdown, {"A": "new a"}, ["A", "B"])
    assert spliced == "# Title\n\nintro\n\n## A\n\nnew a\n\n## B\n\nb text\n"


def test_it_inserts_a_missing_section_where_the_report_puts_it():
    markdown = "# Title\n\n## A\n\na\n\n## C\n\nc\n"
    assert splice_sections(markdown, {"B": "b"}, ["A", "B", "C"]) == "# Title\n\n## A\n\na\n\n## B\n\nb\n\n## C\n\nc\n"
    assert splice_sections(markdown, {"D": "d"}, ["A", "C", "D"]).endswith("## C\n\nc\n\n## D\n\nd\n")


def test_a_python_only_run_leaves_the_rest_of_the_report(tmp_path):
    out = tmp_path / "benchmarks.md"
    earlier = "# Benchmarks\n\nGenerated earlier.\n\n## Targets\n\nkept\n\n## GPU path (bench/gpu.sh)\n\ngpu\n"
    out.write_text(earlier)
    results = {
        "date": "2026-12-01 00:00 UTC",
        "command": "python -m bench --sections python",
        "system": {"cores": 2},
        "settings": {"models": [], "concurrencies": [1, 64], "cores": 2, "seconds": 2.0, "runs": 3},
        "python": _run(800, 1000),
    }
    write_outputs(results, out, tmp_path / "results", ["python"])
    text = out.read_text()
    assert text.startswith("# Benchmarks\n\nGenerated earlier.\n\n## Targets\n\nkept\n\n## " + PYTHON_HEADING)
    assert text.endswith("## GPU path (bench/gpu.sh)\n\ngpu\n")
    assert "| json | 64 | 0.80 | +0.000 | ≥ 0.7× | PASS |" in text
    assert not (tmp_path / "results" / "published.json").exists()
