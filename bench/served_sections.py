"""The bench sections that each measure one Infera server of their own: hot swap, dashboards, python models,
sequences and the ensemble (bench/__main__.py runs them)."""

from __future__ import annotations

from pathlib import Path

from bench import ensemble_models, ensemble_runs
from bench.dashboards import run_dashboards
from bench.hotswap import console_switcher, repository_switcher, run_hotswap
from bench.infera import ConsoleHome, infera_spec, resolve_mode
from bench.models import MLP_SMALL, write_python_repository
from bench.python_runs import CONCURRENCIES, MODES, measure_python_models
from bench.sequence_models import PREFERRED_BATCH_SIZES, QUEUE_DELAY_US, STRATEGIES, write_sequence_repository
from bench.sequence_runs import CONCURRENCY, STEPS, measure_sequence_models
from bench.servers import ROOT, NotAvailable, ServerProcess, ServerSpec, free_port
from bench.system import usable_cores
from bench.wrk import WrkScripts

RESULTS = ROOT / "bench" / "results"


def with_models(spec: ServerSpec, models: list[str], name: str | None = None) -> ServerSpec:
    """`spec` waiting for `models` to be ready too, its log named `name` when given."""
    spec.ready_models = list(models)
    spec.name = name or spec.name
    return spec


def hotswap_section(args, repository: Path, workdir: Path, scripts: WrkScripts) -> dict:
    mode = resolve_mode(args.infera_launch)
    spec = infera_spec("uvicorn", free_port(), repository, workdir / "hotswap", mode)
    with_models(spec, [MLP_SMALL.name], "infera-hotswap")
    with ServerProcess(spec, RESULTS / "logs"):
        if mode == "console":
            switch = console_switcher(spec.base_url, ConsoleHome(workdir / "hotswap").api_token())
            mechanism = "the console API (POST /api/models/mlp_small/versions/{n}/activate)"
        else:
            switch = repository_switcher(spec.base_url)
            mechanism = "the v2 repository extension (load with a version_policy override)"
        result = run_hotswap(spec, switch, repository, scripts, args.seconds)
    result["mechanism"] = mechanism
    d, s = result["during"], result["steady"]
    print(
        f"  steady p99 {s['p99_ms']:.3f} ms, during switches p99 {d['p99_ms']:.3f} ms, failed {d['errors']}", flush=True
    )
    return result


def dashboards_section(args, repository: Path, workdir: Path, scripts: WrkScripts) -> dict:
    if resolve_mode(args.infera_launch) != "console":
        raise NotAvailable("/ws/metrics/ lives in the console process, which this tree cannot start yet")
    spec = infera_spec("uvicorn", free_port(), repository, workdir / "dashboards", "console")
    with_models(spec, [MLP_SMALL.name], "infera-dashboards")
    with ServerProcess(spec, RESULTS / "logs"):
        cookie = ConsoleHome(workdir / "dashboards").session_cookie()
        result = run_dashboards(spec, cookie, repository, scripts, args.seconds)
    print(
        f"  {result['rps_without']:.0f} req/s without, {result['rps_with']:.0f} with: cost {result['cost'] * 100:.1f}%"
    )
    return result


def python_section(args, repository: Path, workdir: Path, scripts: WrkScripts) -> dict:
    """add_sub as a python-backend model, isolated and in process, both in one infera-uvicorn process."""
    python_repository = write_python_repository(RESULTS / "python-repository").resolve()
    mode = resolve_mode(args.infera_launch)
    spec = infera_spec("uvicorn", free_port(), python_repository, workdir / "python", mode)
    with_models(spec, list(MODES), "infera-python")
    with ServerProcess(spec, RESULTS / "logs"):
        rows = measure_python_models(spec, repository, scripts, args.encodings, args.seconds, args.runs)
    return {
        "rows": rows,
        "encodings": args.encodings,
        "concurrencies": list(CONCURRENCIES),
        "seconds": args.seconds,
        "runs": args.runs,
        "launch": mode,
    }


def sequences_section(args, workdir: Path) -> dict:
    """The ONNX accumulator under direct, oldest and no sequence batching, in one infera-uvicorn process."""
    sequence_repository = write_sequence_repository(RESULTS / "sequence-repository").resolve()
    mode = resolve_mode(args.infera_launch)
    spec = infera_spec("uvicorn", free_port(), sequence_repository, workdir / "sequences", mode)
    with_models(spec, list(STRATEGIES), "infera-sequences")
    with ServerProcess(spec, RESULTS / "logs"):
        rows = measure_sequence_models(spec.base_url, args.seconds, args.runs)
    return {
        "rows": rows,
        "concurrency": CONCURRENCY,
        "steps": STEPS,
        "preferred_batch_sizes": list(PREFERRED_BATCH_SIZES),
        "queue_delay_us": QUEUE_DELAY_US,
        "seconds": args.seconds,
        "runs": args.runs,
        "launch": mode,
        "cores": usable_cores(),
    }


def ensemble_section(args, workdir: Path) -> dict:
    """digits_pipeline against the client chaining its three steps, both in one infera-uvicorn process."""
    models = ensemble_models  # the section's four models and its images
    repository = models.write_ensemble_repository(RESULTS / "ensemble-repository", models.trained_digits(RESULTS))
    images = models.digit_images(repository / models.DIGITS / str(models.DIGITS_VERSION) / "model.onnx")
    mode = resolve_mode(args.infera_launch)
    spec = infera_spec("uvicorn", free_port(), repository.resolve(), workdir / "ensemble", mode)
    with_models(spec, [*models.STEPS, models.PIPELINE], "infera-ensemble")
    with ServerProcess(spec, RESULTS / "logs"):
        rows = ensemble_runs.measure_ensemble(spec.base_url, images, args.seconds, args.runs)
    return {
        "rows": rows,
        "paths": ensemble_runs.PATHS,
        "concurrencies": list(ensemble_runs.CONCURRENCIES),
        "queue_delay_us": models.queue_delays(repository),
        "digits_version": models.DIGITS_VERSION,
        "scale": models.SCALE,
        "margin": models.MARGIN,
        "images": len(images),
        "body_bytes": round(sum(len(image.body) for image in images) / len(images)),
        "seconds": args.seconds,
        "runs": args.runs,
        "launch": mode,
        "cores": usable_cores(),
    }
