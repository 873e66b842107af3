"""The sequences section: its three accumulators, its load generator against a fake server, its report section."""

from __future__ import annotations

import asyncio
import itertools
import json

import numpy as np

from bench.checked_load import Connection
from bench.direct import cpu_session
from bench.report import SEQUENCES_HEADING, write_outputs
from bench.sequence_models import DIRECT, OLDEST, STATELESS, write_sequence_repository
from bench.sequence_runs import SequenceTally, drive_sequences, run_sequence
from engine.config.text_format import parse_config_pbtxt


def test_it_writes_one_graph_under_direct_oldest_and_dynamic_batching(tmp_path):
    write_sequence_repository(tmp_path)
    configs = {name: parse_config_pbtxt((tmp_path / name / "config.pbtxt").read_text()) for name in (DIRECT, OLDEST)}
    graphs = {(tmp_path / name / "1" / "model.onnx").read_bytes() for name in (DIRECT, OLDEST, STATELESS)}
    assert len(graphs) == 1
    assert configs[DIRECT].sequence_batching.strategy == "direct"
    assert configs[OLDEST].sequence_batching.strategy == "oldest"
    assert configs[OLDEST].sequence_batching.max_candidate_sequences == 64
    assert configs[OLDEST].sequence_batching.control_names() == {"START", "READY", "STATE_IN"}
    baseline = parse_config_pbtxt((tmp_path / STATELESS / "config.pbtxt").read_text())
    assert baseline.sequence_batching is None
    assert baseline.dynamic_batching.max_queue_delay_microseconds == 1000
    assert {c.max_batch_size for c in (*configs.values(), baseline)} == {64}
    assert [t.name for t in baseline.input] == ["INPUT", "START", "READY", "STATE_IN"]


def test_the_baseline_graph_sums_what_the_client_carries(tmp_path):
    write_sequence_repository(tmp_path)
    session = cpu_session(tmp_path / STATELESS / "1" / "model.onnx")

    def column(*values: int) -> np.ndarray:
        return np.array(values, dtype=np.int32).reshape(-1, 1)

    inputs = {"INPUT": column(5, 3), "START": column(1, 0), "READY": column(1, 1), "STATE_IN": column(9, 4)}
    (output,) = session.run(["OUTPUT"], inputs)
    assert output.ravel().tolist() == [5, 7]


class FakeAccumulator:
    """A v2 server of the accumulators over raw HTTP/1.1: sums by sequence id, or from the client's STATE_IN."""

    def __init__(self, off_by_one_at_step: int | None = None) -> None:
        self.sums: dict[int, int] = {}
        self.steps: dict[int, int] = {}
        self.open: set[int] = set()
        self.off_at = off_by_one_at_step

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.startswith(b"Content-Length")
                )
                value = self.answer(await reader.readexactly(length))
                answer = json.dumps({"outputs": [{"name": "OUTPUT", "data": [value]}]})
                writer.write(f"HTTP/1.1 200 OK\r\nContent-Length: {len(answer)}\r\n\r\n{answer}".encode())
        except asyncio.IncompleteReadError:
            writer.close()

    def answer(self, body: bytes) -> int:
        request = json.loads(body)
        inputs = {i["name"]: i["data"][0] for i in request["inputs"]}
        if "parameters" not in request:
            return (0 if inputs["START"] else inputs["STATE_IN"]) + inputs["INPUT"]
        sequence = request["parameters"]
        key = sequence["sequence_id"]
        if sequence["sequence_start"]:
            self.sums[key], self.steps[key] = 0, 0
            self.open.add(key)
        self.sums[key] += inputs["INPUT"]
        step = self.steps[key]
        self.steps[key] += 1
        if sequence["sequence_end"]:
            self.open.discard(key)
        return self.sums[key] + (1 if step == self.off_at else 0)


async def _serve(fake: FakeAccumulator) -> tuple[asyncio.Server, str]:
    server = await asyncio.start_server(fake.serve, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"


async def test_it_runs_whole_sequences_and_ends_every_one():
    fake = FakeAccumulator()
    server, url = await _serve(fake)
    async with server:
        run = await drive_sequences(url, OLDEST, concurrency=4, steps=5, seconds=0.3, ids=itertools.count(1))
    assert (run.errors, run.wrong, run.examples) == (0, 0, [])
    assert run.requests > 0 and run.sequences >= 4 and not fake.open
    assert run.p99_us >= run.p50_us > 0


async def test_the_baseline_sends_its_own_state():
    server, url = await _serve(FakeAccumulator())
    async with server:
        run = await drive_sequences(url, STATELESS, concurrency=2, steps=5, seconds=0.1, ids=itertools.count(1))
    assert (run.errors, run.wrong) == (0, 0) and run.requests > 0


async def test_it_counts_every_wrong_sum_and_quotes_it():
    server, _ = await _serve(FakeAccumulator(off_by_one_at_step=2))
    async with server:
        tally = SequenceTally()
        connection = Connection("127.0.0.1", server.sockets[0].getsockname()[1], f"/v2/models/{DIRECT}/infer")
        await run_sequence(connection, DIRECT, 3, 5, float("inf"), tally)
        connection.close()
    assert (tally.wrong, tally.errors, tally.sequences, len(tally.latencies)) == (1, 0, 1, 5)
    # sequence 3 adds 2, 3, 4: after step 2 the sum is 9, the fake says 10
    assert tally.examples == ["sequence 3 step 2: OUTPUT 10, expected 9"]


async def test_a_sequence_past_the_deadline_ends_at_its_next_step():
    fake = FakeAccumulator()
    server, _ = await _serve(fake)
    async with server:
        tally = SequenceTally()
        connection = Connection("127.0.0.1", server.sockets[0].getsockname()[1], f"/v2/models/{DIRECT}/infer")
        await run_sequence(connection, DIRECT, 8, 50, 0.0, tally)
        connection.close()
    assert (len(tally.latencies), tally.sequences, tally.wrong) == (1, 1, 0)
    assert fake.steps == {8: 1} and not fake.open


def _row(model: str, strategy: str, rps: float, wrong: int = 0) -> dict:
    examples = ["sequence 3 step 2: OUTPUT 10, expected 9"] if wrong else []
    figures = {"rps": rps, "p50_ms": 5.0, "p99_ms": 9.0, "mean_batch": 32.0, "errors": 0, "wrong": wrong}
    return {
        "model": model,
        "strategy": strategy,
        "examples": examples,
        "runs": [{"rps": rps - 50}, {"rps": rps}],
    } | figures


def test_a_sequences_only_run_leaves_the_rest_of_the_report(tmp_path):
    out = tmp_path / "benchmarks.md"
    out.write_text("# Benchmarks\n\nGenerated earlier.\n\n## Targets\n\nkept\n\n## GPU path (bench/gpu.sh)\n\ngpu\n")
    run = {
        "rows": [_row(DIRECT, "direct", 1100), _row(OLDEST, "oldest", 900, wrong=1), _row(STATELESS, "none", 1000)],
        "concurrency": 64,
        "steps": 50,
        "preferred_batch_sizes": [16, 32, 64],
        "queue_delay_us": 1000,
        "seconds": 5.0,
        "runs": 3,
        "launch": "console",
        "cores": 2,
        "date": "2026-12-01 00:00 UTC",
        "command": "python -m bench --sections sequences",
    }
    results = {"date": run["date"], "command": run["command"], "system": {}, "settings": {}, "sequences": run}
    write_outputs(results, out, tmp_path / "results", ["sequences"])
    text = out.read_text()
    assert text.startswith("# Benchmarks\n\nGenerated earlier.\n\n## Targets\n\nkept\n\n## " + SEQUENCES_HEADING)
    assert text.endswith("## GPU path (bench/gpu.sh)\n\ngpu\n")
    assert "| direct | `accumulator_direct` | 1100 | 5.000 | 9.000 | 1050–1100 | 1.10 | 32.0 | 0 | 0 |" in text
    assert "| oldest | `accumulator_oldest` | 900 | 5.000 | 9.000 | 850–900 | 0.90 | 32.0 | 0 | 1 |" in text
    assert "oldest: sequence 3 step 2: OUTPUT 10, expected 9" in text
