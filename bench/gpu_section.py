"""The GPU section of docs/benchmarks.md from one run's results, and the engine-over-direct ratios its targets
are decided on."""

from __future__ import annotations

from bench.gpu_models import MODEL, TARGET_BATCH


def row_at(rows: list[dict], batch: int) -> dict | None:
    return next((r for r in rows if r["batch"] == batch), None)


def ratios(results: dict) -> list[dict]:
    """The engine over each direct ceiling at TARGET_BATCH (or the largest batch measured)."""
    out = []
    sequential = results.get("engine", {}).get("sequential", {})
    direct = results.get("torch", {})
    batch = (
        TARGET_BATCH
        if row_at(direct.get("plain", []), TARGET_BATCH)
        else max((r["batch"] for r in direct.get("plain", [])), default=TARGET_BATCH)
    )
    pairs = [
        ("engine pytorch (graphs) / torch plain", sequential.get("resnet50"), direct.get("plain")),
        ("engine pytorch (graphs) / torch tuned", sequential.get("resnet50"), direct.get("tuned")),
        ("engine pytorch (no graphs) / torch plain", sequential.get("resnet50_eager"), direct.get("plain")),
    ]
    ort = results.get("onnxruntime", {})
    pairs += [
        ("engine onnxruntime / onnxruntime run", sequential.get("resnet50_onnx"), ort.get("run")),
        ("engine onnxruntime / onnxruntime io binding", sequential.get("resnet50_onnx"), ort.get("io_binding")),
    ]
    for label, engine_rows, direct_rows in pairs:
        e, d = row_at(engine_rows or [], batch), row_at(direct_rows or [], batch)
        if e and d:
            out.append(
                {
                    "pair": label,
                    "batch": batch,
                    "engine": e["images_per_s"],
                    "direct": d["images_per_s"],
                    "ratio": e["images_per_s"] / d["images_per_s"],
                }
            )
    return out


def markdown(results: dict) -> str:
    """The GPU section of docs/benchmarks.md."""

    def table(headers, rows):
        lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(" --- " for _ in headers) + "|"]
        return "\n".join(lines + ["| " + " | ".join(map(str, r)) + " |" for r in rows])

    def rate(row):
        return f"{row['images_per_s']:.0f} ({row['p50_ms']:.2f} ms)" if row else "-"

    s = results["system"]
    parts = [
        f"Measured {results['date']} on {s['gpu']} (driver {s['driver']}, {s['cpu_cores']} CPU cores), "
        f"Python {s['python']}, torch {s['torch']}, {s.get('onnxruntime', 'no onnxruntime')}; "
        f"{MODEL} (25.6 M parameters) FP32 at {results['image']}×{results['image']}, torch's default "
        f"math (cuDNN convolutions in TF32); engine models on GPU 0 with dynamic batching: one caller's batches "
        f"with no queue delay (torch alone waits for no one), concurrent callers and HTTP with "
        f"{results['queue_delay_us']} µs. Each figure: a closed loop of {results['seconds']:g} s after 3 warm-up "
        "calls; images/s with the p50 of one call in brackets. `python -m bench.gpu_bench`, run by `bench/gpu.sh`."
    ]
    if results.get("ratios"):
        parts.append(
            "Engine over direct, one caller, batch "
            f"{results['ratios'][0]['batch']} (issue 23's goal: ≥ 0.9×):\n\n"
            + table(
                ["pair", "engine img/s", "direct img/s", "ratio"],
                [
                    [r["pair"], f"{r['engine']:.0f}", f"{r['direct']:.0f}", f"{r['ratio']:.2f}×"]
                    for r in results["ratios"]
                ],
            )
        )
    torch_rows = results.get("torch", {})
    sequential = results.get("engine", {}).get("sequential", {})
    ort = results.get("onnxruntime", {})
    batches = [r["batch"] for r in torch_rows.get("plain", [])]
    columns = [
        ("torch plain", torch_rows.get("plain", [])),
        ("torch tuned", torch_rows.get("tuned", [])),
        ("engine pytorch", sequential.get("resnet50", [])),
        ("engine pytorch, no graphs", sequential.get("resnet50_eager", [])),
        ("onnxruntime run", ort.get("run", [])),
        ("onnxruntime io binding", ort.get("io_binding", [])),
        ("engine onnxruntime", sequential.get("resnet50_onnx", [])),
    ]
    columns = [(label, rows) for label, rows in columns if rows]
    parts.append(
        "One caller, one batch at a time (images/s, p50 ms):\n\n"
        + table(
            ["batch", *[c[0] for c in columns]], [[b, *[rate(row_at(rows, b)) for _, rows in columns]] for b in batches]
        )
    )
    if "onnxruntime_error" in results:
        parts.append(f"onnxruntime on CUDA: not measured: {results['onnxruntime_error']}")
    if results.get("transfers"):
        parts.append(
            "One batch up to the GPU (median ms of 20; pinned: page-locked memory, then one DMA):\n\n"
            + table(
                ["batch", "MB", "pageable .to()", "memcpy, 1 thread + DMA", "engine's HostCopier + DMA"],
                [
                    [
                        r["batch"],
                        f"{r['mbytes']:.1f}",
                        f"{r['pageable']:.2f}",
                        f"{r['pinned_one_thread']:.2f}",
                        f"{r['pinned_threads']:.2f}",
                    ]
                    for r in results["transfers"]
                ],
            )
        )
    concurrent = results.get("engine", {}).get("concurrent", [])
    if concurrent:
        parts.append(
            "Engine, concurrent callers (max_batch_size 64; one instance against two on the same GPU, each on a "
            "CUDA stream of its own):\n\n"
            + table(
                ["model", "instances", "callers × batch", "img/s", "mean batch executed"],
                [
                    [
                        r["model"],
                        r["instances"],
                        f"{r['callers']} × {r['batch']}",
                        f"{r['images_per_s']:.0f}",
                        f"{r['mean_batch']:.1f}",
                    ]
                    for r in concurrent
                ],
            )
        )
    for key, label in (
        ("engine_error", "Engine"),
        ("http_error", "HTTP"),
        ("torch_error", "torch"),
        ("transfers_error", "Transfers"),
    ):
        if key in results:
            parts.append(f"{label}: not available: {results[key]}")
    http = results.get("http", {})
    if http.get("rows"):
        parts.append(
            "HTTP (standalone v2 app under uvicorn serving resnet50 alone, binary bodies of one image, Python load "
            "generator in several processes):\n\n"
            + table(
                ["connections", "req/s", "p50 ms", "p99 ms", "errors"],
                [
                    [r["connections"], f"{r['rps']:.0f}", f"{r['p50_ms']:.2f}", f"{r['p99_ms']:.2f}", r["errors"]]
                    for r in http["rows"]
                ],
            )
        )
    scraped = http.get("metrics_under_load")
    if scraped:
        used = scraped.get("nv_gpu_memory_used_bytes", 0) / 2**30
        total = scraped.get("nv_gpu_memory_total_bytes", 0) / 2**30
        parts.append(
            f"`/metrics` scraped mid-run at the most connections: nv_gpu_utilization "
            f"{scraped.get('nv_gpu_utilization', float('nan')):.2f}, memory {used:.1f} of {total:.1f} GiB, "
            f"power {scraped.get('nv_gpu_power_usage', float('nan')):.0f} W: the gauges the console's "
            "/monitoring/ charts read."
        )
    if results.get("nvml"):
        parts.append(
            "NVML per phase (sampled every 100 ms by the bench itself):\n\n"
            + table(
                ["phase", "GPU util %", "memory GiB (max)", "power W", "temp °C (max)"],
                [
                    [
                        k,
                        f"{v['util_mean_pct']:.0f}",
                        f"{v['mem_max_gib']:.1f}",
                        f"{v['power_mean_w']:.0f}",
                        f"{v['temp_max_c']:.0f}",
                    ]
                    for k, v in results["nvml"].items()
                ],
            )
        )
    return "\n\n".join(parts)
