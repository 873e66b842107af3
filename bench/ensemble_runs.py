"""The ensemble section's load: digit images labelled by `digits_pipeline`, or by the client chaining its three steps.

Both paths send each image as the same binary body and count an image as one request once its label is back. The
ensemble path is one infer of `digits_pipeline`; the chained path is three infers in turn on the same keep-alive
connection (preprocess, digits, postprocess), each sending on the tensor the one before answered, asked for and
forwarded as binary data, as tritonclient would. Every label is checked against the one expected. Like the
sequences section's load (`bench/checked_load.py`), each caller holds one connection with one request in flight, and
loops until the deadline; the two paths' runs alternate ABBA, all in one server process.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import orjson

from bench.checked_load import CheckedRun, Connection, Reply, Tally, median_checked_run, run_load, served_counts
from bench.ensemble_models import DIGITS, PIPELINE, POSTPROCESS, PREPROCESS, STEPS, Image, binary_request
from bench.servers import NotAvailable

CONCURRENCIES = (1, 64)
REQUEST_TIMEOUT_S = 30.0
# path -> what the report calls it
PATHS = {"ensemble": f"`{PIPELINE}` (one request per image)", "chained": "the client chaining the 3 steps"}


class StepFailed(Exception):
    """A step's answer the load cannot go on with: not a 200, or without the tensor it needs."""


@dataclass
class EnsembleRun(CheckedRun):
    """One run of one path, a request being one image, a wrong answer a label that is not the expected one."""

    batches: dict[str, list[int]] = field(default_factory=dict)  # step -> [inferences, executions] in the run


def infer_path(model: str) -> str:
    return f"/v2/models/{model}/infer"


def checked(reply: Reply, model: str) -> Reply:
    if reply.status != 200:
        raise StepFailed(f"{model}: HTTP {reply.status} {reply.body[:200].decode(errors='replace')}")
    return reply


def binary_output(reply: Reply, model: str, name: str) -> tuple[list[int], bytes]:
    """The shape and raw bytes of output `name` of a binary answer that carries only it."""
    length = reply.headers.get(b"inference-header-content-length")
    if length is None:
        raise StepFailed(f"{model}: {name} came back as JSON, not as the binary data asked for")
    try:
        (output,) = orjson.loads(reply.body[: int(length)])["outputs"]
        size = output["parameters"]["binary_data_size"]
    except (ValueError, KeyError, TypeError) as error:
        raise StepFailed(f"{model}: no binary {name} in the answer ({type(error).__name__}: {error})") from error
    data = reply.body[int(length) :]
    if output.get("name") != name or len(data) != size:
        raise StepFailed(f"{model}: expected {name}, {size} bytes; got {output.get('name')}, {len(data)} bytes")
    return output["shape"], data


def answered_label(reply: Reply, model: str) -> str:
    """LABEL's one value in a JSON answer."""
    try:
        outputs = orjson.loads(reply.body)["outputs"]
        return str(next(o["data"][0] for o in outputs if o["name"] == "LABEL"))
    except (ValueError, KeyError, IndexError, TypeError, StopIteration) as error:
        raise StepFailed(f"{model}: no LABEL in the answer ({reply.body[:200].decode(errors='replace')})") from error


async def label_by_ensemble(connection: Connection, image: Image) -> str:
    """One infer of the pipeline."""
    reply = await connection.send(infer_path(PIPELINE), image.body, image.headers)
    return answered_label(checked(reply, PIPELINE), PIPELINE)


async def label_by_chaining(connection: Connection, image: Image) -> str:
    """The pipeline's three steps from the client, each fed what the step before answered."""
    reply = await connection.send(infer_path(PREPROCESS), image.step_body, image.step_headers)
    shape, pixels = binary_output(checked(reply, PREPROCESS), PREPROCESS, "PIXELS")
    body, headers = binary_request([("image", "FP32", shape, pixels)], ("probabilities",))
    reply = await connection.send(infer_path(DIGITS), body, headers)
    shape, probabilities = binary_output(checked(reply, DIGITS), DIGITS, "probabilities")
    body, headers = binary_request([("PROBABILITIES", "FP32", shape, probabilities)])
    return answered_label(
        checked(await connection.send(infer_path(POSTPROCESS), body, headers), POSTPROCESS), POSTPROCESS
    )


LABELLERS: dict[str, Callable[[Connection, Image], Awaitable[str]]] = {
    "ensemble": label_by_ensemble,
    "chained": label_by_chaining,
}


async def label_one(connection: Connection, path: str, image: Image, number: int, tally: Tally) -> None:
    """Label one image by `path`, timing it and checking the label."""
    started = time.perf_counter()
    try:
        label = await asyncio.wait_for(LABELLERS[path](connection, image), REQUEST_TIMEOUT_S)
    except StepFailed as failure:
        tally.errors += 1
        tally.note(f"image {number}: {failure}")
        return
    except (OSError, asyncio.IncompleteReadError, TimeoutError, ValueError) as error:
        connection.close()
        tally.errors += 1
        tally.note(f"image {number}: no answer ({type(error).__name__}: {error})")
        return
    tally.latencies.append(time.perf_counter() - started)
    if label != image.label:
        tally.wrong += 1
        tally.note(f"image {number}: LABEL {label!r}, expected {image.label!r}")


async def drive_path(base_url: str, path: str, images: list[Image], concurrency: int, seconds: float) -> EnsembleRun:
    """`concurrency` callers labelling images by `path` one after another until `seconds` have passed."""
    address = urlsplit(base_url)
    tally = Tally()
    started = time.perf_counter()
    deadline = started + seconds

    async def caller(offset: int) -> None:
        connection = Connection(address.hostname, address.port)
        number = offset
        try:
            while time.perf_counter() < deadline:
                await label_one(connection, path, images[number % len(images)], number % len(images), tally)
                number += concurrency
        finally:
            connection.close()

    await asyncio.gather(*(caller(offset) for offset in range(concurrency)))
    return EnsembleRun(**tally.figures(time.perf_counter() - started))


def run_path(base_url: str, path: str, images: list[Image], concurrency: int, seconds: float) -> EnsembleRun:
    """One run of `path`, with each step's requests and executions the server counted meanwhile."""
    before = {step: served_counts(base_url, step) for step in STEPS}
    run = run_load(drive_path(base_url, path, images, concurrency, seconds))
    after = {step: served_counts(base_url, step) for step in STEPS}
    run.batches = {step: [b - a for a, b in zip(before[step], after[step], strict=True)] for step in STEPS}
    return run


def median_ensemble_run(runs: list[EnsembleRun]) -> dict:
    """wrk's median of the runs, wrong labels summed, each step's mean batch over all the runs, first examples kept."""
    mean_batch = {}
    for step in STEPS:
        inferences, executions = (sum(r.batches.get(step, [0, 0])[i] for r in runs) for i in (0, 1))
        mean_batch[step] = inferences / executions if executions else 0.0
    return median_checked_run(runs) | {"mean_batch": mean_batch}


def measure_ensemble(base_url: str, images: list[Image], seconds: float, runs: int) -> list[dict]:
    """A row per path and concurrency, the median of `runs` runs alternating ABBA after a warm-up of each path."""
    for path in PATHS:
        warm = run_path(base_url, path, images, max(CONCURRENCIES), 1.0)
        if warm.requests == 0:
            raise NotAvailable(f"{path}: {'; '.join(warm.examples) or 'no answer'}")
    rows = []
    for concurrency in CONCURRENCIES:
        measured: dict[str, list[EnsembleRun]] = {path: [] for path in PATHS}
        for i in range(runs):
            for path in list(PATHS) if i % 2 == 0 else list(reversed(PATHS)):
                measured[path].append(run_path(base_url, path, images, concurrency, seconds))
        for path, path_runs in measured.items():
            row = median_ensemble_run(path_runs) | {"path": path, "concurrency": concurrency}
            rows.append(row)
            batches = " / ".join(f"{row['mean_batch'][step]:.1f}" for step in STEPS)
            print(
                f"  {path:8} c={concurrency:<3} {row['rps']:8.0f} images/s  p50 {row['p50_ms']:7.3f} ms  "
                f"p99 {row['p99_ms']:7.3f} ms  batches {batches}  errors {row['errors']}  wrong {row['wrong']}",
                flush=True,
            )
            for example in row["examples"]:
                print(f"    {example}", flush=True)
    return rows
