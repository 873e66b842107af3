"""The HTTP matrix: one server at a time, each (model, body, concurrency) measured by wrk, median of three."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench.models import MODELS
from bench.payloads import Payload, make_payload
from bench.servers import NotAvailable, ServerProcess, ServerSpec
from bench.wrk import WrkScripts, median_run, run_wrk


@dataclass(frozen=True)
class Target:
    """A server under test: a label, whether it takes Triton binary bodies, and how to build its spec."""

    label: str
    binary: bool
    spec: Callable[[], ServerSpec]  # may raise NotAvailable


@dataclass
class HttpPlan:
    """What to measure on every target, and how long."""

    models: list[str]
    encodings: list[str]
    concurrencies: list[int]
    seconds: float
    runs: int = 3
    warmup_s: float = 1.0


def infer_url(base_url: str, model: str, version: int | None = None) -> str:
    version_part = f"/versions/{version}" if version else ""
    return f"{base_url}/v2/models/{model}{version_part}/infer"


def probe(url: str, payload: Payload, check_values: bool) -> str | None:
    """Send one request; None when it answered 200 (and, for JSON, the right values), else what went wrong."""
    request = urllib.request.Request(url, data=payload.body, headers=payload.headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            body = response.read()
    except urllib.error.HTTPError as error:
        return f"HTTP {error.code}: {error.read()[:300].decode(errors='replace')}"
    except (urllib.error.URLError, ConnectionError, TimeoutError) as error:
        return f"no answer: {error}"
    if not check_values:
        return None
    expected = {o["name"]: o for o in json.loads(payload.response)["outputs"]}
    try:
        got = {o["name"]: o for o in json.loads(body)["outputs"]}
        for name, output in expected.items():
            if not np.allclose(np.asarray(got[name]["data"]), np.asarray(output["data"]), rtol=1e-4, atol=1e-5):
                return f"output '{name}' differs from onnxruntime's"
    except (ValueError, KeyError, TypeError) as error:
        return f"unexpected response {body[:200]!r}: {error}"
    return None


def checked_load(
    base_url: str, model: str, repository: Path, scripts: WrkScripts, *, check_values: bool = True
) -> tuple[str, Path]:
    """The URL and wrk script of a JSON load on `model`, after one request proved the server answers it (with
    onnxruntime's values unless `check_values` is False: the echo's canned answer)."""
    payload = make_payload(MODELS[model], repository, "json")
    url = infer_url(base_url, model)
    problem = probe(url, payload, check_values=check_values)
    if problem:
        raise NotAvailable(f"probe failed: {problem}")
    return url, scripts.script(f"{model}-json", payload.body, payload.headers)


def measure_target(
    target: Target, repository: Path, plan: HttpPlan, scripts: WrkScripts, log_folder: Path
) -> list[dict]:
    """Every case of the plan on one target; rows carry `unavailable` with a reason instead of figures."""
    encodings = [e for e in plan.encodings if e == "json" or target.binary]
    cases = [(m, e) for m in plan.models for e in encodings]
    try:
        spec = target.spec()
        server = ServerProcess(spec, log_folder).__enter__()
    except NotAvailable as reason:
        print(f"  {target.label:16} not available: {str(reason)[:300]}", flush=True)
        return [_unavailable(target.label, m, e, c, str(reason)) for m, e in cases for c in plan.concurrencies]
    rows = []
    try:
        for model, encoding in cases:
            payload = make_payload(MODELS[model], repository, encoding)
            url = infer_url(spec.base_url, model)
            problem = probe(url, payload, check_values=encoding == "json" and not target.label.startswith("echo"))
            if problem:
                print(f"  {target.label:16} {model:10} {encoding:6} not available: {problem[:300]}", flush=True)
                rows += [
                    _unavailable(target.label, model, encoding, c, f"probe failed: {problem}")
                    for c in plan.concurrencies
                ]
                continue
            script = scripts.script(f"{model}-{encoding}", payload.body, payload.headers)
            # warm caches, pools and the batcher before measuring; a fresh server gets a longer warm-up
            run_wrk(url, script, 64, plan.warmup_s if rows else max(plan.warmup_s, plan.seconds))
            for connections in plan.concurrencies:
                runs = [run_wrk(url, script, connections, plan.seconds) for _ in range(plan.runs)]
                row = median_run(runs)
                row.update(target=target.label, model=model, encoding=encoding, concurrency=connections)
                rows.append(row)
                print(
                    f"  {target.label:16} {model:10} {encoding:6} c={connections:<3} {row['rps']:9.0f} req/s  "
                    f"p50 {row['p50_ms']:7.3f} ms  p99 {row['p99_ms']:7.3f} ms  errors {row['errors']}",
                    flush=True,
                )
    finally:
        server.stop()
    return rows


def _unavailable(label: str, model: str, encoding: str, concurrency: int, reason: str) -> dict:
    return {"target": label, "model": model, "encoding": encoding, "concurrency": concurrency, "unavailable": reason}


def write_echo_responses(folder: Path, repository: Path, models: list[str]) -> Path:
    """The canned responses of the echo app: what Infera answers for the bench's bodies, byte for byte in size."""
    folder.mkdir(parents=True, exist_ok=True)
    for model in models:
        for encoding in ("json", "binary"):
            payload = make_payload(MODELS[model], repository, encoding)
            (folder / f"{model}.{encoding}.response").write_bytes(payload.response)
            (folder / f"{model}.{encoding}.headers").write_text(json.dumps(payload.response_headers))
    return folder
