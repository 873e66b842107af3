"""Where a `/v2/models/{m}/infer` request's time goes: cProfile of the event-loop thread serving the v2 ASGI app.

`python -m bench.request_profile [--model simple] [--callers 64] [--seconds 5] [--encoding json]` drives the engine's
own `V2App` in process (no sockets, no uvicorn: what is left is Infera's share of a request), `--callers` closed-loop
callers each sending the bench's body for `--model`, and prints the heaviest frames by own time and by cumulative
time as markdown tables. cProfile sees the loop thread only; the instances' worker threads run beside it.
`--requests N` answers exactly N requests instead of running for `--seconds` (what bench.instructions counts under
callgrind); `--inline always|never` overrides the instances' measured choice of running batches on the loop.
Start-up's objects are frozen out of full garbage collections, as in a serving process.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import pstats
import tempfile
import time
from pathlib import Path

from bench.engine_inproc import inference_counts
from bench.models import MODELS, write_repository
from bench.payloads import make_payload

try:
    import uvloop
except ImportError:  # pragma: no cover - uvloop comes with uvicorn[standard]
    uvloop = None


def _fake_http(body: bytes, headers: dict[str, str], model: str):
    """An ASGI scope, a receive that hands over the body once, and a send that keeps the status."""
    scope = {
        "type": "http",
        "method": "POST",
        "path": f"/v2/models/{model}/infer",
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()]
        + [(b"content-length", str(len(body)).encode())],
    }
    message = {"type": "http.request", "body": body, "more_body": False}

    async def receive() -> dict:
        return message

    return scope, receive


def _force_inline(choice: str) -> None:
    """Make every instance created from now on run its batches on the loop ('always') or its thread ('never')."""
    from engine.serving import instances

    if choice != "measured":
        instances.ModelInstance.__init__.__kwdefaults__["inline_below_ns"] = 2**62 if choice == "always" else 0


async def _drive(
    repository: Path, model: str, encoding: str, callers: int, seconds: float, profile: bool, requests: int = 0
) -> dict:
    from engine.frontend.http import V2App
    from engine.frontend.lifespan import freeze_start_up_objects
    from engine.serving.server import InferenceServer

    payload = make_payload(MODELS[model], repository, encoding)
    server = InferenceServer(repository)
    await server.start()
    freeze_start_up_objects()  # as a serving process does once started (engine.frontend.lifespan)
    app = V2App(server)
    statuses: dict[int, int] = {}
    done = 0

    async def send(message: dict) -> None:
        if message["type"] == "http.response.start":
            statuses[message["status"]] = statuses.get(message["status"], 0) + 1

    async def caller(deadline: float, limit: int) -> None:
        nonlocal done
        scope, receive = _fake_http(payload.body, payload.headers, model)
        while time.perf_counter() < deadline and done < limit:
            done += 1  # counted when sent, so that `limit` requests are sent in all
            await app(dict(scope), receive, send)

    try:
        # warm-up: a second's worth, or (counting) as many requests as callers times ten
        warm_limit = callers * 10 if requests else 2**62
        await asyncio.gather(*(caller(time.perf_counter() + 1.0, warm_limit) for _ in range(callers)))
        done = 0
        statuses.clear()
        profiler = cProfile.Profile() if profile else None
        start, cpu_start = time.perf_counter(), time.process_time()
        if profiler is not None:
            profiler.enable()
        deadline, limit = (float("inf"), requests) if requests else (start + seconds, 2**62)
        before = inference_counts(server.statistics(model), model)
        await asyncio.gather(*(caller(deadline, limit) for _ in range(callers)))
        if profiler is not None:
            profiler.disable()
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
        after = inference_counts(server.statistics(model), model)
        inferences, executions = after[0] - before[0], after[1] - before[1]
    finally:
        await server.stop()
    return {
        "requests": done,
        "seconds": elapsed,
        "cpu_seconds": cpu,
        "statuses": statuses,
        "profiler": profiler,
        "mean_batch": inferences / executions if executions else 0.0,
    }


def _where(func: tuple[str, int, str]) -> str:
    filename, line, name = func
    if filename == "~":
        return name
    path = Path(filename)
    parts = path.parts
    for root in ("engine", "bench", "asyncio", "concurrent"):
        if root in parts:
            return "/".join(parts[parts.index(root) :]) + f":{line} {name}"
    return f"{path.name}:{line} {name}"


def frames_table(profiler: cProfile.Profile, requests: int, sort: str, top: int) -> str:
    """The `top` frames by `sort` ('tottime' or 'cumulative') as a markdown table, in µs per request."""
    stats = pstats.Stats(profiler, stream=io.StringIO())
    rows = sorted(stats.stats.items(), key=lambda item: item[1][2 if sort == "tottime" else 3], reverse=True)
    lines = [
        "| frame | calls per request | own µs per request | cumulative µs per request |",
        "| --- | --- | --- | --- |",
    ]
    for func, (_, calls, own, cumulative, _) in rows[:top]:
        lines.append(
            f"| `{_where(func)}` | {calls / requests:.2f} | {own / requests * 1e6:.1f} | "
            f"{cumulative / requests * 1e6:.1f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.request_profile", description=__doc__)
    parser.add_argument("--model", default="simple", choices=sorted(MODELS))
    parser.add_argument("--encoding", default="json", choices=["json", "binary"])
    parser.add_argument("--callers", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--top", type=int, default=20)
    parser.add_argument("--no-profile", action="store_true", help="measure the rate only, without cProfile's cost")
    parser.add_argument("--requests", type=int, default=0, help="answer exactly this many requests (0: --seconds)")
    parser.add_argument("--inline", choices=["measured", "always", "never"], default="measured")
    args = parser.parse_args(argv)
    _force_inline(args.inline)
    with tempfile.TemporaryDirectory() as folder:
        repository = write_repository(Path(folder), [args.model])
        profile = not args.no_profile
        drive = _drive(repository, args.model, args.encoding, args.callers, args.seconds, profile, args.requests)
        with asyncio.Runner(loop_factory=uvloop.new_event_loop if uvloop else None) as runner:  # as uvicorn runs
            result = runner.run(drive)
    requests = result["requests"]
    print(
        f"{args.model} {args.encoding}, {args.callers} callers: {requests} requests in {result['seconds']:.1f} s, "
        f"{requests / result['seconds']:.0f} req/s, {result['seconds'] / requests * 1e6:.1f} µs a request, "
        f"{result['cpu_seconds'] / requests * 1e6:.1f} µs of the process's CPU time a request, "
        f"mean batch {result['mean_batch']:.1f} (statuses {result['statuses']})"
    )
    if result["profiler"] is not None:
        print("\nby own time\n\n" + frames_table(result["profiler"], requests, "tottime", args.top))
        print("\nby cumulative time\n\n" + frames_table(result["profiler"], requests, "cumulative", args.top))


if __name__ == "__main__":
    main()
