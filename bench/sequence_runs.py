"""The sequences section: concurrent sequences of v2 JSON requests, every answer checked against its running sum.

wrk sends one fixed body; a sequence needs its id, its START and END flags (and, without sequence batching, the
state it carries) in every body, and its answer read back. So each of the 64 workers holds one keep-alive
connection and runs sequences one after another, one step in flight at a time; at the deadline its sequence ends
early with an END step, so none is left holding a slot into the next run. The three models' runs rotate (ABC,
BCA, CAB, ...) so drift in the shared machine's load falls on all of them alike.
"""

from __future__ import annotations

import asyncio
import importlib.util
import itertools
import json
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import numpy as np

from bench.engine_inproc import inference_counts
from bench.sequence_models import STATELESS, STRATEGIES
from bench.servers import NotAvailable
from bench.wrk import median_run

CONCURRENCY = 64
STEPS = 50
REQUEST_TIMEOUT_S = 30.0
EXAMPLES = 5  # wrong sums and failures quoted in the report, per run
SEQUENCE_BODY = (
    '{{"parameters":{{"sequence_id":{id},"sequence_start":{start},"sequence_end":{end}}},'
    '"inputs":[{{"name":"INPUT","datatype":"INT32","shape":[1,1],"data":[{value}]}}],'
    '"outputs":[{{"name":"OUTPUT"}}]}}'
)
STATELESS_BODY = (
    '{{"inputs":[{{"name":"INPUT","datatype":"INT32","shape":[1,1],"data":[{value}]}},'
    '{{"name":"START","datatype":"INT32","shape":[1,1],"data":[{start_flag}]}},'
    '{{"name":"READY","datatype":"INT32","shape":[1,1],"data":[1]}},'
    '{{"name":"STATE_IN","datatype":"INT32","shape":[1,1],"data":[{state}]}}],'
    '"outputs":[{{"name":"OUTPUT"}}]}}'
)


@dataclass
class SequenceRun:
    """One run: answered requests, latency percentiles (µs), failed requests and answers with a wrong sum."""

    requests: int
    duration_us: int
    p50_us: float
    p99_us: float
    errors: int  # no answer, or not a 200
    wrong: int  # a 200 whose OUTPUT is not the running sum
    sequences: int  # sequences run to their END
    examples: list[str] = field(default_factory=list)

    @property
    def rps(self) -> float:
        return self.requests / (self.duration_us / 1e6) if self.duration_us else 0.0


def step_value(sequence_id: int, step: int) -> int:
    """The INPUT of one step: small, varied, and known to the checker."""
    return (sequence_id * 7 + step) % 10 + 1


def step_body(model: str, sequence_id: int, step: int, end: bool, total: int) -> bytes:
    """The v2 JSON body of one step; `total` is the running sum before it (the baseline sends it as STATE_IN)."""
    value = step_value(sequence_id, step)
    if model == STATELESS:
        return STATELESS_BODY.format(value=value, start_flag=int(step == 0), state=total).encode()
    flag = {True: "true", False: "false"}
    return SEQUENCE_BODY.format(id=sequence_id, start=flag[step == 0], end=flag[end], value=value).encode()


class Connection:
    """One keep-alive HTTP/1.1 connection that POSTs a body and reads the status and body back."""

    def __init__(self, host: str, port: int, path: str) -> None:
        self.host, self.port = host, port
        self.head = f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, body: bytes) -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        self.writer.write(f"{self.head}Content-Length: {len(body)}\r\n\r\n".encode() + body)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                return status, await self.reader.readexactly(int(value))
        raise ConnectionError("an answer without Content-Length")

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


@dataclass
class Tally:
    """What the workers of one run saw."""

    latencies: list[float] = field(default_factory=list)
    errors: int = 0
    wrong: int = 0
    sequences: int = 0
    examples: list[str] = field(default_factory=list)

    def note(self, text: str) -> None:
        if len(self.examples) < EXAMPLES:
            self.examples.append(text)


def answered_output(body: bytes) -> int | None:
    """OUTPUT's one value in a v2 JSON answer, or None when there is none."""
    try:
        outputs = json.loads(body)["outputs"]
        return next(int(o["data"][0]) for o in outputs if o["name"] == "OUTPUT")
    except (ValueError, KeyError, IndexError, TypeError, StopIteration):
        return None


async def run_sequence(
    connection: Connection, model: str, sequence_id: int, steps: int, deadline: float, tally: Tally
) -> None:
    """One sequence, a step at a time; it ends early at the deadline, and is abandoned when a request fails."""
    total = 0
    for step in range(steps):
        end = step == steps - 1 or time.perf_counter() >= deadline
        body = step_body(model, sequence_id, step, end, total)
        started = time.perf_counter()
        try:
            status, answer = await asyncio.wait_for(connection.post(body), REQUEST_TIMEOUT_S)
        except (OSError, asyncio.IncompleteReadError, TimeoutError, ValueError) as error:
            connection.close()
            tally.errors += 1
            tally.note(f"sequence {sequence_id} step {step}: no answer ({type(error).__name__}: {error})")
            return
        tally.latencies.append(time.perf_counter() - started)
        total += step_value(sequence_id, step)
        if status != 200:
            tally.errors += 1
            tally.note(f"sequence {sequence_id} step {step}: HTTP {status} {answer[:200].decode(errors='replace')}")
            return
        got = answered_output(answer)
        if got != total:
            tally.wrong += 1
            tally.note(f"sequence {sequence_id} step {step}: OUTPUT {got}, expected {total}")
        if end:
            tally.sequences += 1
            return


async def drive_sequences(
    base_url: str, model: str, concurrency: int, steps: int, seconds: float, ids: Iterator[int]
) -> SequenceRun:
    """`concurrency` workers running sequences of `steps` (ids drawn from `ids`) until `seconds` have passed."""
    address = urlsplit(base_url)
    tally = Tally()
    started = time.perf_counter()
    deadline = started + seconds

    async def worker() -> None:
        connection = Connection(address.hostname, address.port, f"/v2/models/{model}/infer")
        try:
            while time.perf_counter() < deadline:
                await run_sequence(connection, model, next(ids), steps, deadline, tally)
        finally:
            connection.close()

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - started
    latencies = np.asarray(tally.latencies) * 1e6
    p50, p99 = np.percentile(latencies, [50, 99]) if latencies.size else (0.0, 0.0)
    return SequenceRun(
        requests=len(tally.latencies),
        duration_us=int(elapsed * 1e6),
        p50_us=float(p50),
        p99_us=float(p99),
        errors=tally.errors,
        wrong=tally.wrong,
        sequences=tally.sequences,
        examples=tally.examples,
    )


_IDS = itertools.count(1)  # correlation ids never repeat within one bench process


def run_sequences(
    base_url: str, model: str, seconds: float, concurrency: int = CONCURRENCY, steps: int = STEPS
) -> SequenceRun:
    """`concurrency` workers running sequences of `steps` against `model` for about `seconds`."""
    loop_factory = None
    if importlib.util.find_spec("uvloop"):
        import uvloop

        loop_factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        return runner.run(drive_sequences(base_url, model, concurrency, steps, seconds, _IDS))


def median_sequence_run(runs: list[SequenceRun]) -> dict:
    """wrk's median of the runs, with wrong sums and sequences summed and the first examples kept."""
    return median_run(runs) | {
        "wrong": sum(r.wrong for r in runs),
        "sequences": sum(r.sequences for r in runs),
        "examples": [e for r in runs for e in r.examples][:EXAMPLES],
    }


def served_counts(base_url: str, model: str) -> tuple[int, int]:
    """The model's (inference_count, execution_count) from the server's statistics."""
    with urllib.request.urlopen(f"{base_url}/v2/models/{model}/stats", timeout=30) as response:
        return inference_counts(json.loads(response.read()), model)


def measure_sequence_models(base_url: str, seconds: float, runs: int) -> list[dict]:
    """A row per model, the median of `runs` runs, the models' runs rotating after a warm-up of each.

    Each row's mean batch is the server's count of requests over its count of executions in the measured runs
    (direct's fillers are not requests).
    """
    models = list(STRATEGIES)
    for model in models:
        warm = run_sequences(base_url, model, 1.0)
        if warm.requests == 0 or warm.errors == warm.requests:
            raise NotAvailable(f"{model}: {'; '.join(warm.examples) or 'no answer'}")
    before = {model: served_counts(base_url, model) for model in models}
    measured: dict[str, list[SequenceRun]] = {model: [] for model in models}
    for i in range(runs):
        shift = i % len(models)
        for model in models[shift:] + models[:shift]:
            measured[model].append(run_sequences(base_url, model, seconds))
    rows = []
    for model, model_runs in measured.items():
        inferences, executions = (b - a for a, b in zip(before[model], served_counts(base_url, model), strict=True))
        row = median_sequence_run(model_runs) | {"model": model, "strategy": STRATEGIES[model]}
        row["mean_batch"] = inferences / executions if executions else 0.0
        rows.append(row)
        print(
            f"  {row['strategy']:24} {row['rps']:8.0f} req/s  p50 {row['p50_ms']:7.3f} ms  "
            f"p99 {row['p99_ms']:7.3f} ms  batch {row['mean_batch']:4.1f}  "
            f"errors {row['errors']}  wrong sums {row['wrong']}",
            flush=True,
        )
        for example in row["examples"]:
            print(f"    {example}", flush=True)
    return rows
