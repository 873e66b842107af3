"""The issues' targets, checked against one run's results: PASS, MISS, or N/A with the reason."""

from __future__ import annotations

from dataclasses import dataclass

INFERA_LABELS = ("infera-uvicorn", "infera-daphne", "infera-default")
# the default profile (`make serve`'s access log, configs as uploaded) beside the tuned server it must keep up with
DEFAULT_LABEL, TUNED_LABEL = "infera-default", "infera-uvicorn"
DEFAULT_GOAL = 0.9  # the default profile: at least this share of the tuned profile's requests a second
# each gRPC server and the HTTP server of the same profile
GRPC_LABELS = {"infera-grpc": TUNED_LABEL, "infera-grpc-default": DEFAULT_LABEL}
CEILING_LABEL = "echo-uvicorn"
# each Infera server's own ceiling: the bare echo app under the same ASGI server
SAME_SERVER_ECHO = {"infera-uvicorn": "echo-uvicorn", "infera-daphne": "echo-daphne"}
MLSERVER_LABEL = "mlserver"
PYTHON_GOAL = 0.7  # isolated python models: at least this share of in-process throughput at c=64
ENSEMBLE_GOAL = 2.0  # digits_pipeline: at least this many times the client-chained images/s at c=64
CANARY_GOAL = 0.95  # a 90/10 canary on mlp_small: at least this share of the throughput with no policy at c=64
CANARY_SHARE, CANARY_SLACK = 0.10, 0.05  # the candidate's share of a canary's requests, and how far it may stray


@dataclass
class Verdict:
    """One target line of the report."""

    target: str
    goal: str
    measured: str
    status: str  # PASS, MISS or N/A


def http_row(results: dict, target: str, model: str, encoding: str, concurrency: int) -> dict | None:
    """The HTTP row of one case, or None when it was not run."""
    for row in results.get("http", []):
        if (row["target"], row["model"], row["encoding"], row["concurrency"]) == (target, model, encoding, concurrency):
            return row
    return None


def _measured(row: dict | None) -> bool:
    return row is not None and "unavailable" not in row


def _why_missing(*rows: tuple[str, dict | None]) -> str:
    for label, row in rows:
        if row is None:
            return f"{label} not run"
        if "unavailable" in row:
            return f"{label} not available: {row['unavailable'][:120]}"
    return ""


def direct_rate(results: dict, model: str, batch: int) -> float | None:
    for row in results.get("direct", []):
        if row["model"] == model and row["batch"] == batch:
            return row["infer_per_s"]
    return None


def _ratio_verdict(
    target: str, goal: str, minimum: float, num: tuple[str, dict | None], den: tuple[str, dict | None]
) -> Verdict:
    if not (_measured(num[1]) and _measured(den[1])):
        return Verdict(target, goal, _why_missing(num, den), "N/A")
    ratio = num[1]["rps"] / den[1]["rps"]
    status = "PASS" if ratio >= minimum and num[1]["errors"] == 0 else "MISS"
    errors = f", {num[1]['errors']} errors" if num[1]["errors"] else ""
    text = f"{ratio:.2f}× ({num[1]['rps']:.0f} vs {den[1]['rps']:.0f} req/s{errors})"
    return Verdict(target, goal, text, status)


def _reported_ratio(target: str, goal: str, num: tuple[str, dict | None], den: tuple[str, dict | None]) -> Verdict:
    """A ratio with no goal to meet: INFO once measured without errors."""
    verdict = _ratio_verdict(target, goal, 0.0, num, den)
    if verdict.status == "PASS":
        verdict.status = "INFO"
    return verdict


def echo_of(label: str) -> str:
    """The bare echo under the same ASGI server as `label`."""
    return SAME_SERVER_ECHO.get(label, CEILING_LABEL)


def mlserver_goal(results: dict) -> str:
    """The MLServer goal's text, naming the batching window both sides used on mlp_small."""
    delay = results.get("settings", {}).get("queue_delay_us", {}).get("mlp_small")
    return f"≥ 5× (both batching windows {delay} µs)" if delay is not None else "≥ 5×"


def http_verdicts(results: dict, label: str) -> list[Verdict]:
    """The HTTP targets of issues 4, 8 and 23 for one Infera server."""
    verdicts = []
    small = http_row(results, label, "mlp_small", "json", 64)
    mls = http_row(results, MLSERVER_LABEL, "mlp_small", "json", 64)
    goal = mlserver_goal(results)
    verdicts.append(
        _ratio_verdict(f"{label}: mlp_small c=64 vs MLServer", goal, 5.0, (label, small), (MLSERVER_LABEL, mls))
    )
    for model in ("simple", "mlp_small"):
        ours = http_row(results, label, model, "json", 64)
        echo = http_row(results, CEILING_LABEL, model, "json", 64)
        verdicts.append(
            _ratio_verdict(
                f"{label}: {model} c=64 vs bare ASGI echo", "≥ 0.5×", 0.5, (label, ours), (CEILING_LABEL, echo)
            )
        )
    own = echo_of(label)
    if own != CEILING_LABEL:  # daphne: also against the bare echo under daphne itself (issue 23)
        ours, echo = http_row(results, label, "simple", "json", 64), http_row(results, own, "simple", "json", 64)
        verdicts.append(
            _ratio_verdict(f"{label}: simple c=64 vs bare {own}", "≥ 0.5×", 0.5, (label, ours), (own, echo))
        )
    large = http_row(results, label, "mlp_large", "json", 64)
    ceiling = direct_rate(results, "mlp_large", 64)
    goal = "≥ 0.8× session.run at batch 64"
    if not _measured(large) or ceiling is None:
        verdicts.append(
            Verdict(f"{label}: mlp_large c=64 vs direct", goal, _why_missing((label, large)) or "direct not run", "N/A")
        )
    else:
        ratio = large["rps"] / ceiling
        verdicts.append(
            Verdict(
                f"{label}: mlp_large c=64 vs direct",
                goal,
                f"{ratio:.2f}× ({large['rps']:.0f} vs {ceiling:.0f} inferences/s)",
                "PASS" if ratio >= 0.8 and large["errors"] == 0 else "MISS",
            )
        )
    if label == DEFAULT_LABEL:
        for encoding in ("json", "binary"):
            ours, tuned = (
                http_row(results, label, "mlp_small", encoding, 64),
                http_row(results, TUNED_LABEL, "mlp_small", encoding, 64),
            )
            verdicts.append(
                _ratio_verdict(
                    f"{label}: mlp_small c=64 ({encoding}) vs the tuned profile",
                    f"≥ {DEFAULT_GOAL}× of {TUNED_LABEL}",
                    DEFAULT_GOAL,
                    (label, ours),
                    (TUNED_LABEL, tuned),
                )
            )
    simple1 = http_row(results, label, "simple", "json", 1)
    if not _measured(simple1):
        verdicts.append(Verdict(f"{label}: simple c=1 p50", "≤ 0.5 ms", _why_missing((label, simple1)), "N/A"))
    else:
        p50 = simple1["p50_ms"]
        verdicts.append(
            Verdict(f"{label}: simple c=1 p50", "≤ 0.5 ms", f"{p50:.3f} ms", "PASS" if p50 <= 0.5 else "MISS")
        )
    return verdicts


def engine_verdicts(results: dict) -> list[Verdict]:
    """Issue 3: engine throughput ≥ 0.9 of direct at 64 callers; ≤ 50 µs overhead at one."""
    engine = results.get("engine")
    if not engine or "unavailable" in engine:
        reason = (engine or {}).get("unavailable", "not run")
        return [
            Verdict("engine in process: 64 callers vs direct", "≥ 0.9×", reason[:160], "N/A"),
            Verdict("engine in process: overhead at c=1", "≤ 50 µs", reason[:160], "N/A"),
        ]
    ratio, overhead = engine["ratio"], engine["overhead_us"]
    return [
        Verdict(
            f"engine in process: {engine['model']} 64 callers vs direct",
            "≥ 0.9×",
            f"{ratio:.2f}× (mean batch {engine['mean_batch']:.1f})",
            "PASS" if ratio >= 0.9 else "MISS",
        ),
        Verdict(
            f"engine in process: {engine['model']} overhead at c=1",
            "≤ 50 µs",
            f"{overhead:.0f} µs",
            "PASS" if overhead <= 50 else "MISS",
        ),
    ]


def hotswap_verdicts(results: dict) -> list[Verdict]:
    run = results.get("hotswap")
    if not run or "unavailable" in run:
        return [
            Verdict(
                "hot swap: failed requests over 10 switches",
                "0",
                (run or {}).get("unavailable", "not run")[:160],
                "N/A",
            )
        ]
    failed = run["during"]["errors"]
    extra = f", {len(run['switch_errors'])} switches refused" if run["switch_errors"] else ""
    ok = failed == 0 and not run["switch_errors"] and run["switches"] == 10
    return [Verdict("hot swap: failed requests over 10 switches", "0", f"{failed}{extra}", "PASS" if ok else "MISS")]


def dashboards_verdicts(results: dict) -> list[Verdict]:
    run = results.get("dashboards")
    if not run or "unavailable" in run:
        return [
            Verdict("50 dashboards: throughput cost", "< 5%", (run or {}).get("unavailable", "not run")[:160], "N/A")
        ]
    cost = run["cost"]
    return [Verdict("50 dashboards: throughput cost", "< 5%", f"{cost * 100:.1f}%", "PASS" if cost < 0.05 else "MISS")]


def grpc_row(results: dict, target: str, model: str, concurrency: int) -> dict | None:
    """The gRPC row of one case, or None when it was not run."""
    for row in results.get("grpc", []):  # a section that could not run holds one row naming why
        if (row.get("target"), row.get("model"), row.get("concurrency")) == (target, model, concurrency):
            return row
    return None


def grpc_verdicts(results: dict) -> list[Verdict]:
    """Issue 13: gRPC at c=64 at least HTTP's (binary bodies) and 5× MLServer's gRPC; p50 at c=1 within 0.5 ms; in
    each profile that ran (issue 38: the default one too)."""
    if "grpc" not in results:
        return []
    model = "simple" if "simple" in results["settings"]["models"] else results["settings"]["models"][0]
    verdicts = []
    for label, http_label in GRPC_LABELS.items():
        if label != "infera-grpc" and grpc_row(results, label, model, 64) is None:
            continue  # a profile this run left out
        verdicts += _grpc_profile_verdicts(results, model, label, http_label)
    return verdicts


def _grpc_profile_verdicts(results: dict, model: str, label: str, http_label: str) -> list[Verdict]:
    prefix = "gRPC" if label == "infera-grpc" else "gRPC (default settings)"
    ours = (label, grpc_row(results, label, model, 64))
    verdicts = [
        _ratio_verdict(
            f"{prefix} vs HTTP (binary), {model} c=64",
            "≥ 1.0× of Infera's HTTP",
            1.0,
            ours,
            (f"{http_label} binary", http_row(results, http_label, model, "binary", 64)),
        ),
        _ratio_verdict(
            f"{prefix} vs MLServer gRPC, {model} c=64",
            "≥ 5× MLServer 1.7.1's gRPC",
            5.0,
            ours,
            ("mlserver-grpc", grpc_row(results, "mlserver-grpc", model, 64)),
        ),
    ]
    verdicts.append(
        _reported_ratio(
            f"{prefix} vs a bare grpc.aio echo, {model} c=64",
            "reported: the share of grpc.aio's own ceiling",
            ours,
            ("echo-grpc", grpc_row(results, "echo-grpc", model, 64)),
        )
    )
    single = grpc_row(results, label, model, 1)
    if _measured(single):
        status = "PASS" if single["p50_ms"] <= 0.5 else "MISS"
        verdicts.append(Verdict(f"{prefix} p50, {model} c=1", "≤ 0.5 ms", f"{single['p50_ms']:.3f} ms", status))
    else:
        verdicts.append(Verdict(f"{prefix} p50, {model} c=1", "≤ 0.5 ms", _why_missing((label, single)), "N/A"))
    return verdicts


def profiles_verdicts(results: dict) -> list[Verdict]:
    """Issue 38, interleaved: the default profile within 10% of the tuned one, and gRPC at least HTTP's, per profile."""
    run = results.get("profiles")
    if run is None:
        return []
    if "unavailable" in run:
        return [Verdict("profiles: default vs tuned, interleaved", f"≥ {DEFAULT_GOAL}×", run["unavailable"], "N/A")]
    profiles, model, conns = run["profiles"], run["model"], run["connections"]
    tuned, default = profiles["tuned"], profiles["default"]
    verdicts = []
    for protocol, key in (("HTTP binary", "http_rps"), ("gRPC", "grpc_rps")):
        ratio = default[key] / tuned[key]
        verdicts.append(
            Verdict(
                f"default settings vs tuned, {model} c={conns}, {protocol} (interleaved)",
                f"≥ {DEFAULT_GOAL}× of the tuned profile",
                f"{ratio:.2f}× ({default[key]:.0f} vs {tuned[key]:.0f} req/s)",
                "PASS" if ratio >= DEFAULT_GOAL else "MISS",
            )
        )
    for name in ("tuned", "default"):
        figures = profiles[name]
        ratio = figures["grpc_rps"] / figures["http_rps"]
        verdicts.append(
            Verdict(
                f"gRPC vs HTTP binary, {name} settings, {model} c={conns} (interleaved)",
                "≥ 1.0× of Infera's HTTP",
                f"{ratio:.2f}× ({figures['grpc_rps']:.0f} vs {figures['http_rps']:.0f} req/s)",
                "PASS" if ratio >= 1.0 else "MISS",
            )
        )
    return verdicts


def python_row(run: dict, mode: str, encoding: str, concurrency: int) -> dict | None:
    """The python section's row of one mode ('isolated' or 'in-process'), body and concurrency, or None."""
    for row in run.get("rows", []):
        if (row["mode"], row["encoding"], row["concurrency"]) == (mode, encoding, concurrency):
            return row
    return None


def python_verdict(run: dict, encoding: str) -> Verdict:
    """Python models: the stub process keeps at least PYTHON_GOAL of in-process throughput at c=64."""
    return _ratio_verdict(
        f"python add_sub: isolated vs in-process, c=64 ({encoding})",
        f"≥ {PYTHON_GOAL}×",
        PYTHON_GOAL,
        ("isolated", python_row(run, "isolated", encoding, 64)),
        ("in-process", python_row(run, "in-process", encoding, 64)),
    )


def python_verdicts(results: dict) -> list[Verdict]:
    run = results.get("python")
    if not run or "unavailable" in run:
        reason = (run or {}).get("unavailable", "not run")[:160]
        return [Verdict("python add_sub: isolated vs in-process, c=64", f"≥ {PYTHON_GOAL}×", reason, "N/A")]
    return [python_verdict(run, encoding) for encoding in run["encodings"]]


def ensemble_row(run: dict, path: str, concurrency: int) -> dict | None:
    """The ensemble section's row of one path ('ensemble' or 'chained') and concurrency, or None."""
    for row in run.get("rows", []):
        if (row["path"], row["concurrency"]) == (path, concurrency):
            return row
    return None


def ensemble_verdict(run: dict) -> Verdict:
    """digits_pipeline: ENSEMBLE_GOAL times the client-chained images/s at c=64, every image labelled right."""
    target, goal = "digits_pipeline vs client-chained steps, c=64", f"≥ {ENSEMBLE_GOAL:g}×"
    ensemble, chained = ensemble_row(run, "ensemble", 64), ensemble_row(run, "chained", 64)
    if not (_measured(ensemble) and _measured(chained)) or not chained["rps"]:
        return Verdict(target, goal, _why_missing(("ensemble", ensemble), ("chained", chained)) or "no images", "N/A")
    ratio = ensemble["rps"] / chained["rps"]
    faults = sum(row["errors"] + row["wrong"] for row in (ensemble, chained))
    text = f"{ratio:.2f}× ({ensemble['rps']:.0f} vs {chained['rps']:.0f} images/s"
    text += f", {faults} failed or wrong)" if faults else ")"
    return Verdict(target, goal, text, "PASS" if ratio >= ENSEMBLE_GOAL and not faults else "MISS")


def ensemble_verdicts(results: dict) -> list[Verdict]:
    run = results.get("ensemble")
    if not run or "unavailable" in run:
        reason = (run or {}).get("unavailable", "not run")[:160]
        return [Verdict("digits_pipeline vs client-chained steps, c=64", f"≥ {ENSEMBLE_GOAL:g}×", reason, "N/A")]
    return [ensemble_verdict(run)]


def traffic_row(run: dict, policy: str) -> dict | None:
    """The traffic section's row of one policy ('active', 'canary' or 'shadow'), or None."""
    return next((row for row in run.get("rows", []) if row["policy"] == policy), None)


CANARY_TARGET = "traffic: canary 90/10 vs no policy, mlp_small c=64"
SHADOW_TARGET = "traffic: shadow 100% vs no policy, mlp_small c=64"
CANARY_GOAL_TEXT = f"≥ {CANARY_GOAL:g}× (candidate {CANARY_SHARE:.0%} ± {CANARY_SLACK * 100:.0f} points)"
SHADOW_GOAL_TEXT = "reported: the cost of the copies"


def canary_verdict(run: dict) -> Verdict:
    """A 90/10 canary keeps CANARY_GOAL of the throughput with no policy, and the candidate really gets its share."""
    active, canary = traffic_row(run, "active"), traffic_row(run, "canary")
    verdict = _ratio_verdict(CANARY_TARGET, CANARY_GOAL_TEXT, CANARY_GOAL, ("canary", canary), ("active", active))
    if verdict.status != "N/A":
        share = canary["candidate_share"]
        verdict.measured += f"; the candidate took {share:.1%}"
        if abs(share - CANARY_SHARE) > CANARY_SLACK:
            verdict.status = "MISS"
    return verdict


def shadow_verdict(run: dict) -> Verdict:
    """A 100% shadow's throughput over the one with no policy (no goal), with the copies it compared."""
    active, shadow = traffic_row(run, "active"), traffic_row(run, "shadow")
    verdict = _reported_ratio(SHADOW_TARGET, SHADOW_GOAL_TEXT, ("shadow", shadow), ("active", active))
    if verdict.status != "N/A" and shadow["shadow"]:
        counts, answered = shadow["shadow"], shadow["served"].get(str(run["active_version"]), [0])[0]
        verdict.measured += (
            f"; {counts['copies']} copies of {answered} requests, {counts['agree']} agreed, "
            f"{counts['disagree']} disagreed, {counts['failures']} failed"
        )
    return verdict


def traffic_verdicts(results: dict) -> list[Verdict]:
    run = results.get("traffic")
    if not run or "unavailable" in run:
        reason = (run or {}).get("unavailable", "not run")[:160]
        return [
            Verdict(CANARY_TARGET, CANARY_GOAL_TEXT, reason, "N/A"),
            Verdict(SHADOW_TARGET, SHADOW_GOAL_TEXT, reason, "N/A"),
        ]
    return [canary_verdict(run), shadow_verdict(run)]


CLUSTER_TARGET = "cluster: a switch reaches all 3 replicas (max of 20)"
CLUSTER_GOAL_S = 2.0


def cluster_verdicts(results: dict) -> list[Verdict]:
    """Issue 21: an activation through one replica is served by every replica within 2 s."""
    run = results.get("cluster")
    goal = f"≤ {CLUSTER_GOAL_S:.0f} s"
    if not run or "unavailable" in run:
        return [Verdict(CLUSTER_TARGET, goal, (run or {}).get("unavailable", "not run")[:160], "N/A")]
    worst = max(run["switch_s"])
    return [Verdict(CLUSTER_TARGET, goal, f"{worst * 1000:.0f} ms", "PASS" if worst <= CLUSTER_GOAL_S else "MISS")]


GPU_GOAL = 0.9  # issue 23: the engine at >= 0.9x of direct torch / onnxruntime CUDA throughput at batch 64
# GPU targets -> the pair of bench/gpu_section.py's ratios that decides each
GPU_TARGETS = {
    "GPU: engine pytorch vs torch alone (plain), one caller": "engine pytorch (graphs) / torch plain",
    "GPU: engine pytorch vs torch hand-tuned (pinned, CUDA graph)": "engine pytorch (graphs) / torch tuned",
    "GPU: engine onnxruntime vs onnxruntime CUDA (IO binding)": "engine onnxruntime / onnxruntime io binding",
}


def gpu_verdicts(results: dict) -> list[Verdict]:
    """Issue 23's GPU path: the engine in process against the runtime alone, same file, same batch (bench/gpu.sh)."""
    gpu = results.get("gpu")
    verdicts = []
    for target, pair in GPU_TARGETS.items():
        row = next((r for r in (gpu or {}).get("ratios", []) if r["pair"] == pair), None)
        goal = f"≥ {GPU_GOAL}× at batch {row['batch'] if row else 64}"
        if row is None:
            why = "not run (no GPU on this machine; bench/gpu.sh on one)" if not gpu else "not measured"
            if gpu and "onnxruntime" in pair and gpu.get("onnxruntime_error"):
                why = gpu["onnxruntime_error"]
            verdicts.append(Verdict(target, goal, why[:160], "N/A"))
            continue
        measured = f"{row['ratio']:.2f}× ({row['engine']:.0f} vs {row['direct']:.0f} img/s, {gpu['system']['gpu']})"
        verdicts.append(Verdict(target, goal, measured, "PASS" if row["ratio"] >= GPU_GOAL else "MISS"))
    return verdicts


def llm_verdicts(results: dict) -> list[Verdict]:
    """Issue 34's LLM goals, checked where the section is rendered (bench/report_llm.py imports Verdict here)."""
    from bench.report_llm import llm_verdicts as verdicts

    return verdicts(results)


# the targets each `--sections` entry decides from its own figures: a run of some rewrites their rows (report.py)
SECTION_VERDICTS = {
    "grpc": grpc_verdicts,
    "profiles": profiles_verdicts,
    "engine": engine_verdicts,
    "hotswap": hotswap_verdicts,
    "dashboards": dashboards_verdicts,
    "python": python_verdicts,
    "ensemble": ensemble_verdicts,
    "traffic": traffic_verdicts,
    "cluster": cluster_verdicts,
    "llm": llm_verdicts,
    "gpu": gpu_verdicts,
}


def all_verdicts(results: dict) -> list[Verdict]:
    """Every target of the bench, in the report's order."""
    verdicts = []
    for label in INFERA_LABELS:
        verdicts += http_verdicts(results, label)
    return verdicts + [v for section in SECTION_VERDICTS.values() for v in section(results)]
