"""The engine in-process (issue 3): 64 asyncio callers through the dynamic batcher versus direct session.run."""

from __future__ import annotations

import asyncio
import statistics
import time
from pathlib import Path

from bench.direct import cpu_session, time_runs
from bench.models import MODELS, sample_inputs

try:
    import uvloop
except ImportError:  # pragma: no cover - uvloop comes with uvicorn[standard]
    uvloop = None

CALL_TIMEOUT_S = 10.0  # a request that takes longer is a hang, reported instead of waited for


def inference_counts(stats: dict, model: str) -> tuple[int, int]:
    """(inference_count, execution_count) summed over the model's versions in Triton's statistics format."""
    inferences = executions = 0
    for entry in stats.get("model_stats", []):
        if entry.get("name") == model:
            inferences += int(entry.get("inference_count", 0))
            executions += int(entry.get("execution_count", 0))
    return inferences, executions


# the lone-request phase alternates blocks of this many engine requests and as many direct session.run calls of
# batch 1, so that both sides see the same moments of a machine whose speed drifts (mlp_medium's batch of one took
# 60 µs one hour and 200 µs another on the bench machine)
SINGLE_BLOCK = 100


async def _run_engine(repository: Path, model_name: str, seconds: float, concurrency: int) -> dict:
    from engine.serving.server import InferenceServer
    from engine.types import InferenceRequest

    model = MODELS[model_name]
    inputs = sample_inputs(model, 1)
    direct = cpu_session(repository / model_name / "1" / "model.onnx")
    server = InferenceServer(repository)
    await server.start()
    try:

        def request() -> InferenceRequest:
            return InferenceRequest(model_name=model_name, inputs=dict(inputs), batch_size=1)

        for _ in range(50):
            try:
                await asyncio.wait_for(server.infer(request()), CALL_TIMEOUT_S)
            except TimeoutError:
                raise TimeoutError(f"a lone request to {model_name} did not come back in {CALL_TIMEOUT_S} s") from None

        # concurrency 1: the engine's overhead per request over one session.run of batch 1, block by block
        async def sequential(count: int) -> None:
            for _ in range(count):
                await server.infer(request())

        engine_blocks: list[float] = []
        direct_blocks: list[float] = []
        time_runs(direct, inputs, 0.0)  # its warm-up
        start = time.perf_counter()
        while time.perf_counter() - start < seconds / 2:
            began = time.perf_counter()
            # one timeout around a whole block: a wait_for per call would add a task per request to what we measure
            await asyncio.wait_for(sequential(SINGLE_BLOCK), CALL_TIMEOUT_S)
            engine_blocks.append((time.perf_counter() - began) / SINGLE_BLOCK * 1e6)
            began = time.perf_counter()
            for _ in range(SINGLE_BLOCK):
                direct.run(None, inputs)
            direct_blocks.append((time.perf_counter() - began) / SINGLE_BLOCK * 1e6)
        single_us, direct_single_us = statistics.median(engine_blocks), statistics.median(direct_blocks)
        overhead_us = statistics.median(e - d for e, d in zip(engine_blocks, direct_blocks, strict=True))

        before = inference_counts(server.statistics(model_name), model_name)
        done = 0
        deadline = time.perf_counter() + seconds

        async def caller() -> None:
            nonlocal done
            while time.perf_counter() < deadline:
                await server.infer(request())
                done += 1

        start = time.perf_counter()
        await asyncio.wait_for(asyncio.gather(*(caller() for _ in range(concurrency))), seconds + CALL_TIMEOUT_S)
        elapsed = time.perf_counter() - start
        after = inference_counts(server.statistics(model_name), model_name)
    finally:
        await server.stop()
    executions = after[1] - before[1]
    mean_batch = (after[0] - before[0]) / executions if executions else 0.0
    return {
        "single_us": single_us,
        "direct_single_us": direct_single_us,
        "overhead_us": overhead_us,
        "infer_per_s": done / elapsed,
        "mean_batch": mean_batch,
    }


def measure_engine(repository: Path, model_name: str, seconds: float, concurrency: int = 64) -> dict:
    """The engine's figures beside direct session.run on batches of the size its batcher formed."""
    try:
        import engine.serving.server  # noqa: F401
    except Exception as error:  # the engine is written in parallel; any import failure means not yet
        return {"model": model_name, "unavailable": f"engine.serving.server does not import: {error}"}
    runner = asyncio.Runner(loop_factory=uvloop.new_event_loop) if uvloop else asyncio.Runner()
    try:
        with runner:
            engine = runner.run(_run_engine(repository, model_name, seconds, concurrency))
    except Exception as error:
        return {"model": model_name, "unavailable": f"the engine failed: {type(error).__name__}: {error}"}
    model = MODELS[model_name]
    session = cpu_session(repository / model_name / "1" / "model.onnx")
    batch = max(1, min(model.max_batch_size, round(engine["mean_batch"]) or concurrency))
    calls, elapsed = time_runs(session, sample_inputs(model, batch), seconds / 2)
    direct_rate = calls * batch / elapsed
    return {
        "model": model_name,
        "concurrency": concurrency,
        "engine_infer_per_s": engine["infer_per_s"],
        "mean_batch": engine["mean_batch"],
        "direct_batch": batch,
        "direct_infer_per_s": direct_rate,
        "ratio": engine["infer_per_s"] / direct_rate,
        "engine_single_us": engine["single_us"],
        "direct_single_us": engine["direct_single_us"],
        "overhead_us": engine["overhead_us"],  # the median of the blocks' differences
    }
