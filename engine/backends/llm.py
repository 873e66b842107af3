"""The `llm` backend: a Llama-family causal LM (a GGUF file or a Hugging Face folder) generating through Infera's
own scheduler, paged KV cache and sampler, on an engine thread of each instance (engine/llm/engine_loop.py).

Weights are data (GGUF or safetensors, never pickles) and the code that runs is Infera's own, so loading one runs no
user code (`code_in` is None): the backend runs in the server's process.

The model is decoupled and takes the text generator's contract (Triton's vLLM backend's tensor names, the toy
`text_generator`'s): inputs `text_input` (STRING [1], the prompt) or `messages` (STRING [1], a JSON list of
{"role", "content"} rendered with the model's chat template), optional `stream` (BOOL [1]; false, the default, is
one response with the whole text; true is one response per token), `sampling_parameters` (STRING [1], JSON: every
field of SamplingParams and `stop`, a list of strings) and the scalars `max_tokens`, `temperature`, `top_p`, `seed`.
A scalar input wins over `sampling_parameters`, which wins over the request's parameters (where the generate
extension puts unknown keys). Outputs: `text_output` (STRING [-1], the new text only), and on the last response
`finish_reason` ("stop", "length"), `prompt_tokens`, `completion_tokens` and `cached_tokens` (INT32 [1], the prompt
tokens the prefix cache held); when `sampling_parameters` asks for `logprobs: k`, each response also carries
`logprobs` (STRING [1]): a JSON list, one entry per token of that response, {"token_id", "token", "logprob",
"top_logprobs": the k most likely [{"token_id", "token", "logprob"}]}, the model's own log-softmax (before
temperature and penalties, vLLM's default). Config parameters `openai_text_input`, `openai_text_output`,
`openai_messages_input` and `openai_logprobs_output` name those tensors for the OpenAI front end, which also
tokenizes and detokenizes with the model's tokenizer (`tokenize`, `detokenize`, `token_strings`).

Structured outputs (vLLM's `structured_outputs`: {"json": a schema, "strict"?} | {"json_object": true} |
{"regex": ...} | {"choice": [...]} | {"grammar": EBNF}) come in `sampling_parameters` or as a request parameter (an
object, or its JSON text from generate); the grammar is compiled on the instance's worker thread (cached by tokenizer
and spec, engine/llm/structured.py) and the engine holds the answer to it; one it cannot compile is a 400 naming
`structured_outputs` and the library's reason. `compile_structured` lets the OpenAI front end check one first.
Tools (OpenAI's tool objects, `tools` in `sampling_parameters` or a request parameter) and messages with tool calls
and tool results are rendered by the chat template; one that renders no tools gets them in the form of the config's
`tool_call_parser` family (default "hermes", engine/llm/tool_parsers.py).

Config parameters of the engine: `max_model_len` (prompt + output tokens; default the model's
max_position_embeddings capped at 2048), `max_num_seqs` (32), `max_num_batched_tokens` (512), `kv_block_size` (16),
`kv_num_blocks` or else `kv_cache_memory_mb` (256), `dtype` ("auto", the default: bfloat16 where the device
multiplies it natively, else float32; or float32, bfloat16, float16), `enable_prefix_caching` (true),
`prefix_cache_scope` ("caller", the default: a prompt's cached prefix serves only the caller that computed it, its
token, user or address, so no caller can time another's prompts; "shared": every caller's), `quantization`
("none"; "int8": the decoder's linear layers in int8 on a CPU instance; "int4": in 4-bit groups of 32, Q4_1's
layout, for one stream's latency; engine/llm/quantization.py),
`default_max_tokens` (64). A request's `cache_salt` (vLLM's: a parameter of generate, a field of /v1, or in
`sampling_parameters`) separates its prefix cache further. The scheduler serves the lower priority value first
(vLLM's rule, 0 by default): `priority` in `sampling_parameters` (where /v1 puts vLLM's field) is taken as it is, any
whole number; otherwise Triton's request priority (1 the highest, 0 the default level) counts from the config's
`dynamic_batching.default_priority_level` (level p is p - default, so the default level is 0 and level 1 comes first;
without one, p itself, after the requests that give none).
"""

from __future__ import annotations

import functools
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from engine.backends import register_backend
from engine.backends.base import Backend
from engine.backends.llm_parameters import (
    dtype_of,
    parameter,
    positive,
    prefix_cache_per_caller,
    quantization_of,
    switch,
)
from engine.backends.llm_responses import COUNT_OUTPUTS, LOGPROBS_OUTPUT, TEXT_OUTPUT, ResponseSink, logprob_entry
from engine.config.model_config import ModelConfig, TensorConfig
from engine.errors import InferaError, InvalidArgument, LoadError
from engine.llm.tool_parsers import (
    TOOL_PARSER,
    UnknownToolParser,
    chat_messages,
    parser_named,
    template_messages,
    tools_of,
)
from engine.types import InferenceRequest

TEXT_INPUT = "text_input"
MESSAGES_INPUT = "messages"
SCALARS = {"max_tokens": int, "temperature": float, "top_p": float, "seed": int}
STRUCTURED_OUTPUTS = "structured_outputs"
MAX_CACHE_SALT_CHARS = 256

DEFAULT_INPUTS = [
    TensorConfig(TEXT_INPUT, "TYPE_STRING", [1], optional=True),
    TensorConfig(MESSAGES_INPUT, "TYPE_STRING", [1], optional=True),
    TensorConfig("stream", "TYPE_BOOL", [1], optional=True),
    TensorConfig("sampling_parameters", "TYPE_STRING", [1], optional=True),
    TensorConfig("max_tokens", "TYPE_INT32", [1], optional=True),
    TensorConfig("temperature", "TYPE_FP32", [1], optional=True),
    TensorConfig("top_p", "TYPE_FP32", [1], optional=True),
    TensorConfig("seed", "TYPE_INT64", [1], optional=True),
]
DEFAULT_OUTPUTS = [
    TensorConfig(TEXT_OUTPUT, "TYPE_STRING", [-1]),
    TensorConfig("finish_reason", "TYPE_STRING", [1]),
    *(TensorConfig(name, "TYPE_INT32", [1]) for name in COUNT_OUTPUTS),
    TensorConfig(LOGPROBS_OUTPUT, "TYPE_STRING", [1]),
]
DEFAULT_PARAMETERS = {
    "openai_text_input": TEXT_INPUT,
    "openai_text_output": TEXT_OUTPUT,
    "openai_messages_input": MESSAGES_INPUT,
    "openai_logprobs_output": LOGPROBS_OUTPUT,
}


@register_backend
class LLMBackend(Backend):
    """One instance: a model runner, a block manager and a scheduler, driven by an engine thread."""

    name = "llm"

    @classmethod
    def autocomplete(cls, config: ModelConfig, version_path: Path) -> ModelConfig:
        """Decoupled, the text generator's inputs and outputs, and the OpenAI front end's parameters, where unset."""
        from engine.llm.weights import find_weights

        find_weights(version_path, config.default_model_filename)  # a clear reason now, not at the trial load
        parameters = DEFAULT_PARAMETERS | dict(config.parameters)
        return replace(
            config,
            decoupled=True,
            input=config.input or [replace(t) for t in DEFAULT_INPUTS],
            output=config.output or [replace(t) for t in DEFAULT_OUTPUTS],
            parameters=parameters,
        )

    def load(self) -> None:
        from engine.llm.adapters import register_base
        from engine.llm.engine_loop import LLMEngine
        from engine.llm.kv_blocks import BlockManager
        from engine.llm.model_runner import ModelRunner
        from engine.llm.scheduler import LLMScheduler
        from engine.llm.weights import find_weights

        config = self.config
        if not config.decoupled:
            raise LoadError(
                f"model '{config.name}': the llm backend streams its tokens: its config needs "
                "model_transaction_policy { decoupled: true }"
            )
        self.per_caller = prefix_cache_per_caller(config)
        try:
            parser_named(config.parameters.get(TOOL_PARSER))
        except UnknownToolParser as exc:
            raise LoadError(f"model '{config.name}': parameter {exc}") from None
        source = find_weights(self.version_path, config.default_model_filename)
        dtype = dtype_of(config, str(self.device))
        quantization = quantization_of(config, dtype, str(self.device))
        runner = ModelRunner.load(source, dtype, str(self.device), quantization)
        shape = runner.shape
        max_model_len = parameter(config, "max_model_len", int, min(shape.max_position_embeddings, 2048))
        max_num_seqs = positive("max_num_seqs", parameter(config, "max_num_seqs", int, 32), config)
        batched = parameter(config, "max_num_batched_tokens", int, max(512, max_num_seqs))
        block_size = positive("kv_block_size", parameter(config, "kv_block_size", int, 16), config)
        num_blocks = parameter(config, "kv_num_blocks", int, 0)
        if num_blocks <= 0:
            budget = positive("kv_cache_memory_mb", parameter(config, "kv_cache_memory_mb", int, 256), config)
            num_blocks = budget * 2**20 // runner.block_bytes(block_size)
        if max_model_len > shape.max_position_embeddings:
            raise LoadError(
                f"model '{config.name}': parameter 'max_model_len' ({max_model_len}) is over the model's "
                f"max_position_embeddings ({shape.max_position_embeddings})"
            )
        if num_blocks * block_size < max_model_len:
            raise LoadError(
                f"model '{config.name}': the KV cache holds {num_blocks} blocks of {block_size} tokens "
                f"({num_blocks * block_size}), less than max_model_len ({max_model_len}): raise kv_num_blocks or "
                "kv_cache_memory_mb, or lower max_model_len"
            )
        prefix = parameter(config, "enable_prefix_caching", switch, True)
        self.default_max_tokens = positive(
            "default_max_tokens", parameter(config, "default_max_tokens", int, 64), config
        )
        try:
            scheduler = LLMScheduler(BlockManager(num_blocks, block_size, prefix), batched, max_num_seqs, max_model_len)
        except InvalidArgument as exc:
            raise LoadError(f"model '{config.name}': {exc.message}") from None
        runner.allocate_cache(num_blocks, block_size)
        self.runner = runner
        self.tokenizer = runner.tokenizer
        self.max_model_len = max_model_len
        self.engine = LLMEngine(runner, scheduler, config.name, _eos_ids(runner), on_failure=self.report_failure)
        self.engine.start()
        register_base(self.context.services, config.name, self)  # where LoRA adapter models find it

    # --- requests -----------------------------------------------------------------------------------------------
    def prepare_requests(self, requests: list[InferenceRequest]) -> list[Any]:
        """Each request as a GenerationRequest (tokenized, sampling checked), or its own error."""
        prepared: list[Any] = []
        for request in requests:
            try:
                prepared.append((request, self._generation(request)))
            except InferaError as exc:
                prepared.append((request, exc))
        return prepared

    def _generation(self, request: InferenceRequest) -> Any:
        from engine.llm.engine_loop import GenerationRequest
        from engine.llm.sampling import SamplingParams

        if request.stream is None:
            raise InvalidArgument(f"model '{self.config.name}' streams its answer: use generate or a stream")
        options = {k: v for k, v in request.parameters.items() if k in _SAMPLING_FIELDS or k == "stop"}
        given = _text(request, "sampling_parameters")
        if given is not None:
            try:
                document = json.loads(given)
            except ValueError:
                raise InvalidArgument("sampling_parameters must be a JSON object") from None
            if not isinstance(document, dict):
                raise InvalidArgument("sampling_parameters must be a JSON object")
            options |= document
        for name, cast in SCALARS.items():
            array = request.inputs.get(name)
            if array is not None and array.size:
                options[name] = cast(np.asarray(array).reshape(-1)[0].item())
        priority = options.pop("priority", None)
        if priority is not None and (isinstance(priority, bool) or not isinstance(priority, int)):
            raise InvalidArgument(f"priority must be a whole number, got {priority!r}")
        salt = options.pop("cache_salt", request.parameters.get("cache_salt"))
        if salt is not None and (not isinstance(salt, str) or not salt or len(salt) > MAX_CACHE_SALT_CHARS):
            raise InvalidArgument(f"cache_salt must be a non-empty string of at most {MAX_CACHE_SALT_CHARS} characters")
        tools = tools_of(options.pop("tools", request.parameters.get("tools")))
        structured = options.pop(STRUCTURED_OUTPUTS, request.parameters.get(STRUCTURED_OUTPUTS))
        grammar = self.compile_structured(structured) if structured is not None else None
        options = {k: _number(v) for k, v in options.items()}
        stop = options.pop("stop", None) or []
        if isinstance(stop, str):
            stop = [stop]
        if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
            raise InvalidArgument("stop must be a string or a list of strings")
        options.setdefault("max_tokens", self.default_max_tokens)
        params = SamplingParams.from_options(options)
        if params.n != 1:
            raise InvalidArgument(
                f"n must be 1 for model '{self.config.name}' (one choice per request), got {params.n}"
            )
        prompt = self._prompt_ids(request, tools)
        if len(prompt) >= self.max_model_len:
            raise InvalidArgument(
                f"the prompt has {len(prompt)} tokens and model '{self.config.name}' takes at most "
                f"{self.max_model_len - 1} (max_model_len {self.max_model_len} leaves room for one token)"
            )
        streamed = request.inputs.get("stream")
        per_token = bool(streamed is not None and streamed.size and np.asarray(streamed).reshape(-1)[0])
        describe = functools.partial(logprob_entry, self.tokenizer) if params.logprobs is not None else None
        sink = ResponseSink(request.stream, per_token, describe)
        caller = request.caller if self.per_caller else None
        cache_key = (caller, salt) if caller is not None or salt is not None else None
        return GenerationRequest(
            prompt,
            params,
            sink,
            stop=stop,
            priority=self._priority(request.priority) if priority is None else priority,
            grammar=grammar,
            cache_key=cache_key,
        )

    def compile_structured(self, value: object) -> Any:
        """The compiled grammar of a `structured_outputs` value for this model's tokenizer (cached); an
        InvalidArgument naming the field and the grammar library's reason. Slow the first time: a worker thread's."""
        from engine.llm.structured import StructuredOutput, compile_grammar

        spec = value if isinstance(value, StructuredOutput) else StructuredOutput.from_options(value)
        return compile_grammar(self.tokenizer, self.runner.shape.vocab_size, spec)

    def _priority(self, given: int) -> int:
        """Triton's priority (1 the highest, 0 the model's default level) as the scheduler's (lower value first, the
        default level 0)."""
        batching = self.config.dynamic_batching
        default = batching.default_priority_level if batching is not None and batching.priority_levels > 0 else 0
        return given - default if given else 0

    def _prompt_ids(self, request: InferenceRequest, tools: list[dict[str, Any]] | None = None) -> list[int]:
        messages = _text(request, MESSAGES_INPUT)
        if messages is not None:
            return self.tokenize(messages=chat_messages(messages), tools=tools)
        text = _text(request, TEXT_INPUT)
        if text is None:
            raise InvalidArgument(f"model '{self.config.name}' needs '{TEXT_INPUT}' or '{MESSAGES_INPUT}'")
        ids = self.tokenize(text)
        if not ids:
            raise InvalidArgument("the prompt is empty: it needs at least one token")
        return ids

    # --- the tokenizer, for generations and the front ends' tokenize and detokenize -------------------------------
    def tokenize(
        self,
        prompt: str | None = None,
        messages: list[dict[str, Any]] | None = None,
        *,
        tools: list[dict[str, Any]] | None = None,
        add_special_tokens: bool | None = None,
        add_generation_prompt: bool = True,
    ) -> list[int]:
        """A prompt's token ids as a generation sees them: a text (special tokens added unless told otherwise), or
        messages rendered by the model's chat template (none added unless told: the template writes its own)."""
        if messages is not None:
            if not getattr(self.tokenizer, "chat_template", None):
                raise InvalidArgument(f"model '{self.config.name}' has no chat template: send text_input instead")
            template = self.tokenizer.chat_template
            messages, tools = template_messages(messages, tools, template, self.config.parameters.get(TOOL_PARSER))
            prompt = self.tokenizer.apply_chat_template(
                messages, tools=tools, add_generation_prompt=add_generation_prompt, tokenize=False
            )
            add_special_tokens = bool(add_special_tokens)
        special = True if add_special_tokens is None else add_special_tokens
        return list(self.tokenizer(prompt or "", add_special_tokens=special)["input_ids"])

    def detokenize(self, token_ids: list[int]) -> str:
        """The text of these token ids (special tokens kept); an id the model does not have is refused."""
        self._check_ids(token_ids)
        return self.tokenizer.decode(token_ids)

    def token_strings(self, token_ids: list[int]) -> list[str]:
        """Each id's token as the tokenizer spells it (byte-level tokens as their symbols)."""
        self._check_ids(token_ids)
        return [str(token) for token in self.tokenizer.convert_ids_to_tokens(token_ids)]

    def _check_ids(self, token_ids: list[int]) -> None:
        vocab = self.runner.shape.vocab_size
        for token in token_ids:
            if not 0 <= token < vocab:
                raise InvalidArgument(f"token id {token} is not in model '{self.config.name}' (vocabulary of {vocab})")

    def execute(self, batch: list[Any]) -> list[dict[str, np.ndarray] | InferaError]:
        results: list[dict[str, np.ndarray] | InferaError] = []
        for request, generation in batch:
            if isinstance(generation, InferaError):
                results.append(generation)
                continue
            try:
                request_id = self.engine.submit(generation)
            except InferaError as exc:
                results.append(exc)
                continue
            stream = request.stream
            stream.on_cancel = functools.partial(self.engine.cancel, request_id)
            if stream.cancelled.is_set():
                self.engine.cancel(request_id)
            results.append({})  # answered through its stream
        return results

    def split(self, outputs: list[Any], batch_sizes: list[int]) -> list[Any]:
        return outputs

    def llm_stats(self) -> Any:
        """The scheduler's counters and gauges (running, waiting, KV-cache usage, prefix hits, preemptions)."""
        engine = getattr(self, "engine", None)
        return engine.stats() if engine is not None else None

    def llm_metrics(self) -> Any:
        """This instance's LLMMetrics (engine/llm/metrics.py) for /metrics and the live snapshot; None unloaded."""
        engine = getattr(self, "engine", None)
        return engine.metrics() if engine is not None else None

    def unload(self) -> None:
        engine = getattr(self, "engine", None)
        if engine is not None:
            engine.stop()
        runner = getattr(self, "runner", None)
        self.engine = self.runner = self.tokenizer = None
        if runner is not None and not (engine is not None and engine.alive):
            runner.close()  # its weights and KV cache freed, and the memory handed back


_SAMPLING_FIELDS = frozenset(
    "n max_tokens temperature top_p top_k min_p repetition_penalty presence_penalty frequency_penalty logit_bias "
    "seed stop_token_ids logprobs".split()
)


def _number(value: Any) -> Any:
    """A numeric string (sampling_parameters may carry "0.5") as its number; anything else unchanged."""
    if isinstance(value, str):
        for cast in (int, float):
            try:
                return cast(value)
            except ValueError:
                continue
    return value


def _text(request: InferenceRequest, name: str) -> str | None:
    array = request.inputs.get(name)
    if array is None or not np.asarray(array).size:
        return None
    item = np.asarray(array).reshape(-1)[0]
    return item.decode("utf-8", errors="replace") if isinstance(item, bytes) else str(item)


def _eos_ids(runner: Any) -> list[int]:
    """The tokenizer's eos first, then the generation config's (a model may end a turn with several)."""
    ids: list[int] = []
    if runner.tokenizer.eos_token_id is not None:
        ids.append(int(runner.tokenizer.eos_token_id))
    configured = getattr(getattr(runner.model, "generation_config", None), "eos_token_id", None)
    for token in configured if isinstance(configured, list) else [configured]:
        if token is not None and int(token) not in ids:
            ids.append(int(token))
    return ids
