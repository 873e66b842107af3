"""The GPU section: bench/gpu_bench.py's ratios and targets, publishing a GPU run, and its CPU check run."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import bench.__main__ as bench_main
from bench.gpu_section import markdown, ratios
from bench.report import GPU_HEADING
from bench.targets import gpu_verdicts
from tests.conftest import REPO_ROOT

TARGETS_TABLE = "| target | goal | measured | result |\n| --- | --- | --- | --- |\n| other | ≥ 1× | 2× | PASS |\n"


def _row(batch: int, images_per_s: float) -> dict:
    return {"batch": batch, "images_per_s": images_per_s, "p50_ms": batch / images_per_s * 1000, "p99_ms": 1.0}


def _gpu_results(engine_64: float, ort: bool = False) -> dict:
    results = {
        "date": "2026-12-04 12:00 UTC",
        "image": 224,
        "seconds": 2.0,
        "queue_delay_us": 500,
        "system": {
            "gpu": "NVIDIA H200",
            "driver": "580",
            "cpu_cores": 16,
            "python": "3.12",
            "torch": "2.11",
            "onnxruntime": "onnxruntime 1.30.0 has no CUDA provider (available: CPUExecutionProvider)",
        },
        "torch": {"plain": [_row(1, 400), _row(64, 4000)], "tuned": [_row(1, 1000), _row(64, 5000)]},
        "engine": {"sequential": {"resnet50": [_row(1, 700), _row(64, engine_64)]}, "concurrent": []},
    }
    if ort:
        results["onnxruntime"] = {"run": [_row(64, 3000)], "io_binding": [_row(64, 3200)]}
        results["engine"]["sequential"]["resnet50_onnx"] = [_row(64, 3100)]
    else:
        results["onnxruntime_error"] = results["system"]["onnxruntime"]
    results["ratios"] = ratios(results)
    results["markdown"] = markdown(results)
    return results


def test_it_holds_the_engine_to_each_ceiling_at_batch_64() -> None:
    verdicts = {v.target: v for v in gpu_verdicts({"gpu": _gpu_results(4400)})}
    plain = verdicts["GPU: engine pytorch vs torch alone (plain), one caller"]
    tuned = verdicts["GPU: engine pytorch vs torch hand-tuned (pinned, CUDA graph)"]
    assert (plain.status, tuned.status) == ("PASS", "MISS")  # 1.10x of 4000, 0.88x of 5000
    assert plain.measured.startswith("1.10× (4400 vs 4000 img/s")
    onnx = verdicts["GPU: engine onnxruntime vs onnxruntime CUDA (IO binding)"]
    assert onnx.status == "N/A" and "no CUDA provider" in onnx.measured


def test_an_onnxruntime_run_is_held_to_its_io_binding() -> None:
    verdicts = {v.target: v for v in gpu_verdicts({"gpu": _gpu_results(4600, ort=True)})}
    onnx = verdicts["GPU: engine onnxruntime vs onnxruntime CUDA (IO binding)"]
    assert onnx.status == "PASS" and onnx.measured.startswith("0.97×")


def test_without_a_gpu_run_every_gpu_target_says_why() -> None:
    assert {(v.status, v.measured[:7]) for v in gpu_verdicts({})} == {("N/A", "not run")}


def test_publishing_a_gpu_run_keeps_it_and_rewrites_only_its_section_and_rows(tmp_path, monkeypatch) -> None:
    kept = tmp_path / "benchmarks-gpu.json"
    monkeypatch.setattr(bench_main, "GPU_RESULTS", kept)
    monkeypatch.setattr(bench_main, "RESULTS", tmp_path / "results")
    out = tmp_path / "benchmarks.md"
    out.write_text(f"# Benchmarks\n\nGenerated earlier.\n\n## Targets\n\n{TARGETS_TABLE}\n## {GPU_HEADING}\n\nold\n")
    source = tmp_path / "gpu_results.json"
    source.write_text(json.dumps(_gpu_results(5000)))
    assert bench_main.publish_gpu(source, out) == 0
    text = out.read_text()
    assert "| other | ≥ 1× | 2× | PASS |" in text  # the rest of the report stays
    assert "| GPU: engine pytorch vs torch alone (plain), one caller | ≥ 0.9× at batch 64 | 1.25×" in text
    assert "old" not in text and "| engine pytorch (graphs) / torch tuned | 5000 | 5000 | 1.00× |" in text
    assert json.loads(kept.read_text())["ratios"] == _gpu_results(5000)["ratios"]


def test_a_file_that_is_not_a_gpu_run_is_refused(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(bench_main, "GPU_RESULTS", tmp_path / "kept.json")
    out = tmp_path / "benchmarks.md"
    out.write_text("# Benchmarks\n")
    for text in ("not json", json.dumps({"rows": []})):
        (tmp_path / "bad.json").write_text(text)
        assert bench_main.publish_gpu(tmp_path / "bad.json", out) == 2
    assert not (tmp_path / "kept.json").exists() and out.read_text() == "# Benchmarks\n"


@pytest.mark.server
def test_the_cpu_check_run_measures_every_part_small(tmp_path) -> None:
    """`--device cpu --quick`: the whole script on a machine without a GPU, as before a GPU session spends time."""
    done = subprocess.run(
        [sys.executable, "-m", "bench.gpu_bench", "--device", "cpu", "--quick", "--out", str(tmp_path)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    results = json.loads((tmp_path / "gpu_results.json").read_text())
    assert not [key for key in results if key.endswith("_error")], results
    assert {r["pair"] for r in results["ratios"]} >= {"engine pytorch (graphs) / torch plain"}
    sequential = results["engine"]["sequential"]
    assert set(sequential) == {"resnet50", "resnet50_eager", "resnet50_onnx"}
    assert {(r["model"], r["callers"]) for r in results["engine"]["concurrent"]} == {
        ("resnet50_b64", 64),
        ("resnet50_b64", 4),
        ("resnet50_b64_x2", 64),
        ("resnet50_b64_x2", 4),
    }
    assert [r["errors"] for r in results["http"]["rows"]] == [0, 0]
    assert (tmp_path / "gpu_results.md").read_text().startswith("Measured ")


def test_a_whole_run_keeps_the_sections_other_tools_wrote(tmp_path, monkeypatch) -> None:
    import bench.report as report

    monkeypatch.setattr(report, "render_markdown", lambda results: "# Benchmarks\n\n## Closing note\n\nnew\n")
    out = tmp_path / "benchmarks.md"
    tail = (
        f"{report.KEPT_FROM}\n\n## Generation (the demo generator, streamed)\n\ntokens\n\n## Several workers\n\nhand\n"
    )
    out.write_text(f"# Benchmarks\n\n## Closing note\n\nold\n\n{tail}")
    report.write_outputs({"date": "2026-12-04"}, out, tmp_path / "results")
    assert out.read_text() == f"# Benchmarks\n\n## Closing note\n\nnew\n\n{tail}"
    out.write_text("# Benchmarks\n\n## Closing note\n\nold\n")  # nothing written by other tools: nothing kept
    report.write_outputs({"date": "2026-12-04"}, out, tmp_path / "results")
    assert out.read_text() == "# Benchmarks\n\n## Closing note\n\nnew\n"
