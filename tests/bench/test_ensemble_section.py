"""The ensemble section: its repository, its images, its two paths against a fake server, its verdict and report."""

from __future__ import annotations

import asyncio
import sys
import types

import numpy as np
import orjson

from bench.checked_load import Connection, Tally
from bench.ensemble_models import (
    DIGITS,
    PIPELINE,
    POSTPROCESS,
    PREPROCESS,
    STEPS,
    image_request,
    queue_delays,
    read_back_grid,
    write_ensemble_repository,
)
from bench.ensemble_runs import drive_path, label_one
from bench.report import ENSEMBLE_HEADING, write_outputs
from bench.targets import ensemble_verdict
from console.demo.pipeline import PIPELINE_MODELS, PREPROCESS_MODEL_PY, digit_image, png_bytes
from console.demo.repository import digits_split
from engine.config.text_format import parse_config_pbtxt


def test_it_writes_the_demo_pipeline_with_its_digits_on_one_thread(tmp_path):
    write_ensemble_repository(tmp_path, b"trained digits")
    pipeline = parse_config_pbtxt((tmp_path / PIPELINE / "config.pbtxt").read_text())
    assert [step["model_name"] for step in pipeline.ensemble_scheduling["step"]] == list(STEPS)
    digits = parse_config_pbtxt((tmp_path / DIGITS / "config.pbtxt").read_text())
    assert digits.parameters == {"intra_op_thread_count": "1", "inter_op_thread_count": "1"}
    assert (tmp_path / DIGITS / "2" / "model.onnx").read_bytes() == b"trained digits"
    for name, _, filename, contents in PIPELINE_MODELS:
        assert (tmp_path / name / "1" / filename).read_bytes() == contents
    assert queue_delays(tmp_path) == {PREPROCESS: 0, DIGITS: 500, POSTPROCESS: 0}


def test_the_expected_grid_is_the_one_the_preprocess_step_reads(monkeypatch):
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", types.ModuleType("triton_python_backend_utils"))
    step: dict = {}
    exec(compile(PREPROCESS_MODEL_PY, "model.py", "exec"), step)
    _, _, samples, _ = digits_split()
    for sample in samples[:20]:
        grey = digit_image(sample)
        read = step["ink_grid"](step["decode_png"](png_bytes(grey)))
        np.testing.assert_allclose(read_back_grid(grey), read, rtol=0, atol=1e-5)
        np.testing.assert_allclose(read, sample, atol=16 / 255)


def _header(body: bytes, headers: dict[str, str]) -> dict:
    return orjson.loads(body[: int(headers["Inference-Header-Content-Length"])])


def test_an_image_is_one_binary_bytes_element_and_the_first_step_asks_for_binary_pixels():
    image = image_request(b"\x89PNG-ish", "7")
    (entry,) = _header(image.body, image.headers)["inputs"]
    assert entry == {"name": "IMAGE", "shape": [1, 1], "datatype": "BYTES", "parameters": {"binary_data_size": 12}}
    assert image.body.endswith(b"\x08\x00\x00\x00\x89PNG-ish")
    assert "outputs" not in _header(image.body, image.headers)
    step = _header(image.step_body, image.step_headers)
    assert step["inputs"] == [entry]
    assert step["outputs"] == [{"name": "PIXELS", "parameters": {"binary_data": True}}]


class FakePipeline:
    """A v2 server of the four models over raw HTTP/1.1: the label of a PNG of n bytes is n % 10.

    preprocess: PIXELS all n % 10; digits: one-hot at PIXELS[0]; postprocess: LABEL the argmax.
    """

    def __init__(self, failing: str | None = None, json_only: bool = False, mislabel: bool = False) -> None:
        self.failing, self.json_only, self.mislabel = failing, json_only, mislabel
        self.calls = dict.fromkeys((PIPELINE, *STEPS), 0)

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = (await reader.readuntil(b"\r\n\r\n")).decode()
                fields = dict(line.lower().split(": ", 1) for line in head.strip().split("\r\n")[1:])
                body = await reader.readexactly(int(fields["content-length"]))
                model = head.split(" ")[1].split("/")[3]
                self.calls[model] += 1
                status, answer, extra = self.answer(model, body, int(fields["inference-header-content-length"]))
                reason = "OK" if status == 200 else "Bad Request"
                writer.write(
                    f"HTTP/1.1 {status} {reason}\r\n{extra}Content-Length: {len(answer)}\r\n\r\n".encode() + answer
                )
        except asyncio.IncompleteReadError:
            writer.close()

    def answer(self, model: str, body: bytes, length: int) -> tuple[int, bytes, str]:
        if model == self.failing:
            return 400, b'{"error":"broken on purpose"}', ""
        request = orjson.loads(body[:length])
        data = body[length:]
        wanted = [o["name"] for o in request.get("outputs", []) if o["parameters"].get("binary_data")]
        if model in (PIPELINE, PREPROCESS):
            pixels = np.full((1, 64), (len(data) - 4) % 10, dtype=np.float32)
            if model == PREPROCESS:
                return self.tensor("PIXELS", pixels, "PIXELS" in wanted)
            return self.label(self.digits(pixels))
        if model == DIGITS:
            return self.tensor("probabilities", self.digits(np.frombuffer(data, np.float32)), "probabilities" in wanted)
        return self.label(np.frombuffer(data, np.float32).reshape(1, 10))

    @staticmethod
    def digits(pixels: np.ndarray) -> np.ndarray:
        return np.eye(10, dtype=np.float32)[[int(pixels.ravel()[0])]]

    def tensor(self, name: str, array: np.ndarray, binary: bool) -> tuple[int, bytes, str]:
        entry = {"name": name, "datatype": "FP32", "shape": list(array.shape)}
        if not binary or self.json_only:
            return 200, orjson.dumps({"outputs": [entry | {"data": array.ravel().tolist()}]}), ""
        header = orjson.dumps({"outputs": [entry | {"parameters": {"binary_data_size": array.nbytes}}]})
        return 200, header + array.tobytes(), f"Inference-Header-Content-Length: {len(header)}\r\n"

    def label(self, scores: np.ndarray) -> tuple[int, bytes, str]:
        digit = (int(scores.ravel().argmax()) + self.mislabel) % 10
        return 200, orjson.dumps({"outputs": [{"name": "LABEL", "datatype": "BYTES", "data": [str(digit)]}]}), ""


async def _serve(fake: FakePipeline) -> tuple[asyncio.Server, str]:
    server = await asyncio.start_server(fake.serve, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"


def _images() -> list:
    return [image_request(b"p" * size, str(size % 10)) for size in range(40, 50)]


async def test_both_paths_label_every_image_and_the_chain_calls_each_step_once_per_image():
    fake = FakePipeline()
    server, url = await _serve(fake)
    async with server:
        ensemble = await drive_path(url, "ensemble", _images(), concurrency=4, seconds=0.2)
        chained = await drive_path(url, "chained", _images(), concurrency=4, seconds=0.2)
    for run in (ensemble, chained):
        assert (run.errors, run.wrong, run.examples) == (0, 0, [])
        assert run.requests > 0 and run.p99_us >= run.p50_us > 0
    assert fake.calls[PIPELINE] == ensemble.requests
    assert fake.calls[PREPROCESS] == fake.calls[DIGITS] == fake.calls[POSTPROCESS] == chained.requests


async def _label_once(fake: FakePipeline, path: str) -> Tally:
    server, _ = await _serve(fake)
    async with server:
        tally = Tally()
        connection = Connection("127.0.0.1", server.sockets[0].getsockname()[1])
        await label_one(connection, path, image_request(b"p" * 43, "3"), 0, tally)
        connection.close()
    return tally


async def test_it_counts_a_wrong_label_and_quotes_it():
    tally = await _label_once(FakePipeline(mislabel=True), "chained")
    assert (tally.wrong, tally.errors, len(tally.latencies)) == (1, 0, 1)
    assert tally.examples == ["image 0: LABEL '4', expected '3'"]


async def test_a_failing_step_fails_the_image_and_is_named():
    tally = await _label_once(FakePipeline(failing=DIGITS), "chained")
    assert (tally.errors, tally.wrong, tally.latencies) == (1, 0, [])
    assert tally.examples == ['image 0: digits: HTTP 400 {"error":"broken on purpose"}']
    assert (await _label_once(FakePipeline(failing=DIGITS), "ensemble")).errors == 0


async def test_a_step_that_answers_json_instead_of_binary_fails_the_image():
    tally = await _label_once(FakePipeline(json_only=True), "chained")
    assert tally.errors == 1
    assert tally.examples == ["image 0: digits_preprocess: PIXELS came back as JSON, not as the binary data asked for"]


def _row(path: str, concurrency: int, rps: float, wrong: int = 0) -> dict:
    return {
        "path": path,
        "concurrency": concurrency,
        "rps": rps,
        "p50_ms": 2.0 if path == "ensemble" else 3.0,
        "p99_ms": 9.0,
        "errors": 0,
        "wrong": wrong,
        "mean_batch": dict.fromkeys(STEPS, 8.0),
        "examples": ["image 5: LABEL '4', expected '3'"] if wrong else [],
        "runs": [{"rps": rps - 20}, {"rps": rps}],
    }


def _run(ensemble_rps: float, chained_rps: float, wrong: int = 0) -> dict:
    rows = []
    for concurrency in (1, 64):
        rows += [_row("ensemble", concurrency, ensemble_rps, wrong), _row("chained", concurrency, chained_rps)]
    return {
        "rows": rows,
        "paths": {"ensemble": "`digits_pipeline`", "chained": "chained steps"},
        "concurrencies": [1, 64],
        "queue_delay_us": {PREPROCESS: 0, DIGITS: 500, POSTPROCESS: 0},
        "digits_version": 2,
        "scale": 4,
        "margin": 0.01,
        "images": 359,
        "body_bytes": 300,
        "seconds": 5.0,
        "runs": 3,
        "launch": "console",
        "cores": 2,
        "date": "2026-12-01 00:00 UTC",
        "command": "python -m bench --sections ensemble",
    }


def test_it_passes_at_twice_the_chained_throughput_with_every_label_right():
    assert ensemble_verdict(_run(2000, 1000)).status == "PASS"
    assert ensemble_verdict(_run(1999, 1000)).status == "MISS"
    missed = ensemble_verdict(_run(3000, 1000, wrong=1))
    assert (missed.status, missed.measured) == ("MISS", "3.00× (3000 vs 1000 images/s, 1 failed or wrong)")


def test_an_ensemble_only_run_leaves_the_rest_of_the_report(tmp_path):
    out = tmp_path / "benchmarks.md"
    out.write_text("# Benchmarks\n\nGenerated earlier.\n\n## Targets\n\nkept\n\n## GPU path (bench/gpu.sh)\n\ngpu\n")
    run = _run(1500, 1000, wrong=1)
    results = {"date": run["date"], "command": run["command"], "system": {}, "settings": {}, "ensemble": run}
    write_outputs(results, out, tmp_path / "results", ["ensemble"])
    text = out.read_text()
    assert text.startswith("# Benchmarks\n\nGenerated earlier.\n\n## Targets\n\nkept\n\n## " + ENSEMBLE_HEADING)
    assert text.endswith("## GPU path (bench/gpu.sh)\n\ngpu\n")
    assert "| `digits_pipeline` | 64 | 1500 | 2.000 | 9.000 | 1480–1500 | 8.0 / 8.0 / 8.0 | 0 | 1 |" in text
    assert "| 64 | 1.50 | -1.000 | ≥ 2× | MISS |" in text
    assert "ensemble c=64: image 5: LABEL '4', expected '3'" in text
