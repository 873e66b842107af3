"""The python section: add_sub as a python-backend model, isolated (a stub process) against in-process, over HTTP.

Both models live in one server process and get `simple`'s body; their runs alternate ABBA at every concurrency, so
drift in the shared machine's load falls on both sides alike.
"""

from __future__ import annotations

from pathlib import Path

from bench.http_runs import infer_url, probe
from bench.models import PY_ADD_SUB, PY_ADD_SUB_INPROC, SIMPLE
from bench.payloads import make_payload
from bench.servers import NotAvailable, ServerSpec
from bench.wrk import WrkScripts, median_run, run_wrk

MODES = {PY_ADD_SUB.name: "isolated", PY_ADD_SUB_INPROC.name: "in-process"}
CONCURRENCIES = (1, 64)


def measure_python_models(
    spec: ServerSpec,
    repository: Path,
    scripts: WrkScripts,
    encodings: list[str],
    seconds: float,
    runs: int,
) -> list[dict]:
    """Rows of both models for every encoding and concurrency, each the median of `runs` interleaved runs.

    `repository` is the bench's main one: the expected outputs come from `simple`'s ONNX graph.
    """
    rows = []
    for encoding in encodings:
        payload = make_payload(SIMPLE, repository, encoding)
        script = scripts.script(f"{SIMPLE.name}-{encoding}", payload.body, payload.headers)
        urls = {model: infer_url(spec.base_url, model) for model in MODES}
        for model, url in urls.items():
            problem = probe(url, payload, check_values=encoding == "json")
            if problem:
                raise NotAvailable(f"{model} ({encoding}): {problem}")
            run_wrk(url, script, 64, max(1.0, seconds))  # warm-up: stubs, pools and the batcher
        for connections in CONCURRENCIES:
            measured: dict[str, list] = {model: [] for model in urls}
            for i in range(runs):
                order = list(urls) if i % 2 == 0 else list(reversed(urls))
                for model in order:
                    measured[model].append(run_wrk(urls[model], script, connections, seconds))
            for model, model_runs in measured.items():
                row = median_run(model_runs)
                row.update(model=model, mode=MODES[model], encoding=encoding, concurrency=connections)
                rows.append(row)
                print(
                    f"  {MODES[model]:10} {encoding:6} c={connections:<3} {row['rps']:9.0f} req/s  "
                    f"p50 {row['p50_ms']:7.3f} ms  p99 {row['p99_ms']:7.3f} ms  errors {row['errors']}",
                    flush=True,
                )
    return rows
