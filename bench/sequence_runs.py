"""The sequences section: concurrent sequences of v2 JSON requests, every answer checked against its running sum.

wrk sends one fixed body; a sequence needs its id, its START and END flags (and, without sequence batching, the
state it carries) in every body, and its answer read back. So each of the 64 workers holds one keep-alive
connection and runs sequences one after another, one step in flight at a time; at the deadline its sequence ends
early with an END step, so none is left holding a slot into the next run. The three models' runs rotate (ABC,
BCA, CAB, ...) so drift in the shared machine's load falls on all of them alike.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit

from bench.checked_load import CheckedRun, Connection, Tally, median_checked_run, run_load, served_counts
from bench.sequence_models import STATELESS, STRATEGIES
from bench.servers import NotAvailable

CONCURRENCY = 64
STEPS = 50
REQUEST_TIMEOUT_S = 30.0
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
class SequenceRun(CheckedRun):
    """One run; a wrong answer is a 200 whose OUTPUT is not the running sum."""

    sequences: int = 0  # sequences run to their END


@dataclass
class SequenceTally(Tally):
    """What the workers of one run saw, and how many sequences they ran to their END."""

    sequences: int = 0


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


def answered_output(body: bytes) -> int | None:
    """OUTPUT's one value in a v2 JSON answer, or None when there is none."""
    try:
        outputs = json.loads(body)["outputs"]
        return next(int(o["data"][0]) for o in outputs if o["name"] == "OUTPUT")
    except (ValueError, KeyError, IndexError, TypeError, StopIteration):
        return None


async def run_sequence(
    connection: Connection, model: str, sequence_id: int, steps: int, deadline: float, tally: SequenceTally
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
    tally = SequenceTally()
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
    return SequenceRun(**tally.figures(time.perf_counter() - started), sequences=tally.sequences)


_IDS = itertools.count(1)  # correlation ids never repeat within one bench process


def run_sequences(
    base_url: str, model: str, seconds: float, concurrency: int = CONCURRENCY, steps: int = STEPS
) -> SequenceRun:
    """`concurrency` workers running sequences of `steps` against `model` for about `seconds`."""
    return run_load(drive_sequences(base_url, model, concurrency, steps, seconds, _IDS))


def median_sequence_run(runs: list[SequenceRun]) -> dict:
    """wrk's median of the runs, with wrong sums and sequences summed and the first examples kept."""
    return median_checked_run(runs) | {"sequences": sum(r.sequences for r in runs)}


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
