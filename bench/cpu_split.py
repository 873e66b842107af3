"""Where the CPU goes under load: CPU per request of wrk, the server's event loop, its instances and the rest.

`python -m bench.cpu_split [--model mlp_large] [--connections 64] [--seconds 8] [--instances N] [--launch MODE]
[--py-spy FILE [--native]]`
serves one bench model under uvicorn, loads it with wrk (one thread) and reads each thread's CPU time from /proc
before and after: the loop (the server's main thread: uvicorn, the v2 app, decoding, encoding, batching), the
instances' worker threads (named after their instance: the backend's compute with onnxruntime's one intra-op
thread), every other thread of the server, and wrk. Next to it: the mean batch the server formed, its own
compute time per inference, and direct `session.run` at that batch and at 64 with the same thread settings, so
the comparison with the direct ceiling says which part of the gap is compute and which is the request path.
CPU time is what each part used, not what it waited for; on 2 shared cores the sum is at most 2 s a second.
`--launch echo` serves the bare ASGI echo instead, `echo-protocol` the echo answered by uvicorn's protocol past
ASGI (bench/echo_protocol.py); `--native` adds C frames to the py-spy tables, the system calls among them.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import tempfile
import time
import urllib.request
from pathlib import Path

from bench.direct import measure_direct
from bench.engine_inproc import inference_counts
from bench.flame import Recording, busiest_thread, markdown, top_frames
from bench.http_runs import checked_load, write_echo_responses
from bench.infera import infera_spec
from bench.models import MODELS, config_pbtxt, write_repository
from bench.servers import ServerProcess, echo_protocol_spec, echo_spec, free_port
from bench.system import load_average
from bench.wrk import WrkScripts, run_wrk

TICK = os.sysconf("SC_CLK_TCK")


def _task_stat(task: Path) -> tuple[str, list[str]]:
    """A thread's OS name and the fields of its /proc stat after the name."""
    stat = (task / "stat").read_text()
    return stat[stat.index("(") + 1 : stat.rindex(")")], stat.rsplit(")", 1)[1].split()


def thread_cpu(pid: int) -> dict[int, tuple[str, float]]:
    """Each thread of `pid`: (its OS name, user + system CPU seconds so far)."""
    threads = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name, fields = _task_stat(task)
        except OSError:
            continue  # ended meanwhile
        threads[int(task.name)] = (name, (int(fields[11]) + int(fields[12])) / TICK)
    return threads


def kernel_seconds(pid: int) -> float:
    """The system CPU seconds of thread `pid` so far: its share spent in system calls (reads, writes, epoll)."""
    return int(_task_stat(Path(f"/proc/{pid}/task/{pid}"))[1][12]) / TICK


def split(before: dict, after: dict, pid: int, instance_prefix: str) -> dict[str, float]:
    """CPU seconds spent between two readings by the loop, the instances and the rest."""
    parts = {"loop": 0.0, "instances": 0.0, "other threads": 0.0}
    for tid, (name, seconds) in after.items():
        used = seconds - before.get(tid, (name, 0.0))[1]
        if tid == pid:
            parts["loop"] += used
        elif name.startswith(instance_prefix):
            parts["instances"] += used
        else:
            parts["other threads"] += used
    return parts


def statistics(base_url: str, model: str) -> dict:
    with urllib.request.urlopen(f"{base_url}/v2/models/{model}/stats", timeout=10) as response:
        return json.loads(response.read())


def batch_compute(stats: dict, model: str) -> tuple[int, int]:
    """(compute_infer ns of its batches, inferences in them), summed over the model's versions and batch sizes.

    The batch statistics count each batch's compute once; the model-level compute_infer counts it once for each
    request in the batch, as Triton does, so it would overstate the time an inference takes."""
    ns = inferences = 0
    for entry in stats.get("model_stats", []):
        if entry.get("name") == model:
            for batch in entry.get("batch_stats", []):
                ns += int(batch["compute_infer"]["ns"])
                inferences += int(batch["batch_size"]) * int(batch["compute_infer"]["count"])
    return ns, inferences


def measure(args: argparse.Namespace, folder: Path) -> dict:
    model = MODELS[args.model]
    repository = write_repository(folder / "repository", [args.model])
    if args.instances:
        config = config_pbtxt(model).replace("{ kind: KIND_CPU }", f"{{ kind: KIND_CPU count: {args.instances} }}")
        (repository / args.model / "config.pbtxt").write_text(config)
    echo = args.launch in ("echo", "echo-protocol")
    if echo:  # the ceiling: the same uvicorn, the bare echo app answering Infera's response (bench/echo_app.py)
        responses = write_echo_responses(folder / "echo", repository, [args.model])
        if args.launch == "echo-protocol":  # uvicorn's protocol answering it itself (bench/echo_protocol.py)
            spec = echo_protocol_spec(free_port(), responses)
        else:
            spec = echo_spec("uvicorn", free_port(), responses)
    else:
        spec = infera_spec("uvicorn", free_port(), repository, folder / "home", mode=args.launch)
    scripts = WrkScripts()
    loads = [load_average()]
    try:
        with ServerProcess(spec, folder / "logs") as server:
            url, script = checked_load(spec.base_url, args.model, repository, scripts, check_values=not echo)
            run_wrk(url, script, args.connections, 2)  # warm-up: batch sizes settle, the first batches run
            pid = server.process.pid  # uvicorn, or manage.py serve running it in process
            stats_before = {} if echo else statistics(spec.base_url, args.model)
            cpu_before, wrk_before = thread_cpu(pid), resource.getrusage(resource.RUSAGE_CHILDREN)
            kernel_before = kernel_seconds(pid)
            recording = Recording(pid, args.seconds, Path(args.py_spy), native=args.native) if args.py_spy else None
            started = time.perf_counter()
            run = run_wrk(url, script, args.connections, args.seconds)
            elapsed = time.perf_counter() - started
            stacks = recording.wait() if recording is not None else None
            cpu_after, wrk_after = thread_cpu(pid), resource.getrusage(resource.RUSAGE_CHILDREN)
            loop_kernel = kernel_seconds(pid) - kernel_before
            stats_after = {} if echo else statistics(spec.base_url, args.model)
            thread_names = sorted({name for name, _ in cpu_after.values()})
    finally:
        scripts.close()
    loads.append(load_average())
    parts = split(cpu_before, cpu_after, pid, args.model[:15])
    parts["wrk"] = (wrk_after.ru_utime + wrk_after.ru_stime) - (wrk_before.ru_utime + wrk_before.ru_stime)
    counted = zip(inference_counts(stats_after, args.model), inference_counts(stats_before, args.model), strict=True)
    inferences, executions = (after - before for after, before in counted)
    mean_batch = inferences / executions if executions else 0.0
    (ns_after, done_after), (ns_before, done_before) = (
        batch_compute(s, args.model) for s in (stats_after, stats_before)
    )
    computed = done_after - done_before
    batches = [] if echo else sorted({64, max(1, round(mean_batch))})
    direct = {row["batch"]: row for row in measure_direct(repository, args.model, batches, args.direct_seconds)}
    return {
        "requests": run.requests,
        "rps": run.rps,
        "errors": run.errors,
        "elapsed": elapsed,
        "parts": parts,
        "loop_kernel": loop_kernel,
        "mean_batch": mean_batch,
        "compute_us_per_inference": (ns_after - ns_before) / computed / 1e3 if computed else 0.0,
        "direct": direct,
        "threads": thread_names,
        "loads": loads,
        "stacks": stacks,
    }


def report(args: argparse.Namespace, result: dict) -> str:
    requests = result["requests"]
    lines = [
        f"{args.model}, {args.connections} connections, {args.seconds:.0f} s, instances "
        f"{args.instances or 'default'}: {result['rps']:.0f} req/s, {result['errors']} errors, mean batch "
        f"{result['mean_batch']:.1f}, load average {result['loads'][0]} -> {result['loads'][1]}",
        "",
        "| part | CPU µs a request | cores busy |",
        "| --- | --- | --- |",
    ]
    total = 0.0
    for part, seconds in result["parts"].items():
        total += seconds
        lines.append(f"| {part} | {seconds / requests * 1e6:.1f} | {seconds / result['elapsed']:.2f} |")
    lines.append(f"| all | {total / requests * 1e6:.1f} | {total / result['elapsed']:.2f} |")
    kernel = result["loop_kernel"]
    lines.append(f"\nof the loop's, in the kernel: {kernel / requests * 1e6:.1f} µs a request")
    lines.append("")
    if result["direct"]:
        lines.append(f"server's compute_infer: {result['compute_us_per_inference']:.1f} µs an inference")
    for batch, row in result["direct"].items():
        lines.append(
            f"direct session.run at batch {batch}: {1e6 / row['infer_per_s']:.1f} µs an inference "
            f"({row['infer_per_s']:.0f} inf/s)"
        )
    lines.append(f"server threads: {', '.join(result['threads'])}")
    if result.get("stacks"):
        loop_us = result["parts"]["loop"] / requests * 1e6
        by_own, by_cumulative = top_frames(result["stacks"], busiest_thread(result["stacks"]), args.top)
        lines += ["", "py-spy, the loop thread, by own time", "", *markdown(by_own, loop_us)]
        lines += ["", "py-spy, the loop thread, by cumulative time", "", *markdown(by_cumulative, loop_us)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.cpu_split", description=__doc__)
    parser.add_argument("--model", default="mlp_large", choices=sorted(MODELS))
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--instances", type=int, default=0, help="instance_group count (0: the config's default)")
    parser.add_argument(
        "--launch", default="standalone", choices=["standalone", "console", "auto", "echo", "echo-protocol"]
    )
    parser.add_argument("--direct-seconds", type=float, default=3.0)
    parser.add_argument("--py-spy", default="", help="record the server with py-spy into this raw file")
    parser.add_argument("--top", type=int, default=25, help="frames in each py-spy table")
    parser.add_argument("--native", action="store_true", help="py-spy records C frames too (system calls)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="infera-cpu-split-") as name:
        result = measure(args, Path(name))
    print(report(args, result))


if __name__ == "__main__":
    main()
