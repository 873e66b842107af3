"""The demo generator `text_generator`: a character-level transformer trained here, served as a decoupled python
model that streams its text token by token and batches its sequences continuously; importable without Django.

Served model (backend python, `model_transaction_policy { decoupled: true }`, max_batch_size 0), named as Triton's
vLLM backend names its tensors:
- inputs: `text_input` (STRING [1], the prompt); optional `stream` (BOOL [1], default false as in vLLM: one
  response per token, then the final flag; false: one response holding the whole text), `sampling_parameters`
  (STRING [1], JSON with max_tokens, temperature, top_p, seed, stop; numbers may be strings), and the scalars
  `max_tokens` (INT32 [1]), `temperature` (FP32 [1]), `top_p` (FP32 [1]), `seed` (INT64 [1]). Settings also come
  from the request's parameters (the generate extension puts unknown keys there); a scalar input wins over
  `sampling_parameters`, which wins over a parameter. Defaults: max_tokens 64 (characters), temperature 1.0
  (0 is greedy, and deterministic), top_p 1.0; a seed makes sampling repeatable per request. A stop string ends
  the text and is not part of it.
- output: `text_output` (STRING [-1]): the generated text only, never the prompt (vLLM's
  exclude_input_in_output).
- config parameters: `openai_text_input` = "text_input" and `openai_text_output` = "text_output" declare the model
  a text generator for the OpenAI-compatible endpoints (the tensors a prompt goes to and text comes from);
  `continuous_batching` ("true"/"false": false serves one sequence at a time, for comparison), `max_sequences`
  (how many sequences one step may hold) and `torch_threads` (the stub's intra-op threads).
- custom metrics (pb_utils.MetricFamily counters, labels model and version): `text_generator_steps_total` (decode
  steps) and `text_generator_sequence_steps_total` (sequences summed over steps): their ratio is the mean batch a
  step held.

Code layout: the tokenizer, transformer, KV cache and continuous batcher live in console/demo/generator_core.py, a
module that imports only torch and the standard library. model.py is that file's source followed by the Triton glue
below (GLUE_PY), so the served model is one self-contained file that imports nothing from this project, while
tests import and lint the core as an ordinary module.

Training happens at seed time on the Python help topics (pydoc_data, part of the standard library): bounded by
steps and seconds, one torch thread, a fixed seed; the weights are a plain state dict read back with
torch.load(weights_only=True).
"""

from __future__ import annotations

import functools
import io
import math
import re
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.nn import functional as F  # noqa: N812 - torch's own spelling

from console.demo import generator_core
from console.demo.generator_core import WEIGHTS_FILE, CharTokenizer, CharTransformer, ModelShape, save_model
from console.demo.training import one_torch_thread

MODEL_NAME = "text_generator"

GENERATOR_CONFIG = """\
name: "text_generator"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [
  { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "stream" data_type: TYPE_BOOL dims: [ 1 ] optional: true },
  { name: "sampling_parameters" data_type: TYPE_STRING dims: [ 1 ] optional: true },
  { name: "max_tokens" data_type: TYPE_INT32 dims: [ 1 ] optional: true },
  { name: "temperature" data_type: TYPE_FP32 dims: [ 1 ] optional: true },
  { name: "top_p" data_type: TYPE_FP32 dims: [ 1 ] optional: true },
  { name: "seed" data_type: TYPE_INT64 dims: [ 1 ] optional: true }
]
output [ { name: "text_output" data_type: TYPE_STRING dims: [ -1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
parameters { key: "openai_text_input" value: { string_value: "text_input" } }
parameters { key: "openai_text_output" value: { string_value: "text_output" } }
parameters { key: "continuous_batching" value: { string_value: "true" } }
parameters { key: "max_sequences" value: { string_value: "64" } }
parameters { key: "torch_threads" value: { string_value: "1" } }
"""

GLUE_PY = '''

# ---- the python backend's side (console.demo.generator): requests in, responses out through their senders

import contextvars
import json
import os

import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
SCALARS = ("max_tokens", "temperature", "top_p", "seed")
SWITCHES = {"true": True, "false": False}


class TritonPythonModel:
    """text_input -> text_output, token by token; execute only queues, one thread generates for every request."""

    def initialize(self, args):
        config = json.loads(args["model_config"])
        if not pb_utils.using_decoupled_model_transaction_policy(config):
            raise pb_utils.TritonModelException(
                "text_generator sends a response per token: its config needs model_transaction_policy "
                "{ decoupled: true }"
            )
        parameters = {key: value.get("string_value", "") for key, value in config.get("parameters", {}).items()}
        if parameters.get("torch_threads"):
            torch.set_num_threads(int(parameters["torch_threads"]))
        continuous = parameters.get("continuous_batching", "true").strip().lower()
        if continuous not in SWITCHES:
            raise pb_utils.TritonModelException(f"continuous_batching must be true or false, got {continuous!r}")
        max_sequences = parameters.get("max_sequences", "64").strip()
        if not max_sequences.isdigit() or int(max_sequences) < 1:
            raise pb_utils.TritonModelException(f"max_sequences must be a whole number from 1, got {max_sequences!r}")
        max_sequences = int(max_sequences) if SWITCHES[continuous] else 1
        model = load_model(os.path.join(args["model_repository"], args["model_version"], WEIGHTS_FILE))
        labels = {"model": args["model_name"], "version": str(args["model_version"])}
        counter = pb_utils.MetricFamily.COUNTER
        self.steps = pb_utils.MetricFamily(
            "text_generator_steps_total", "Decode steps of the generation loop", counter
        ).Metric(labels)
        self.sequence_steps = pb_utils.MetricFamily(
            "text_generator_sequence_steps_total",
            "Sequences summed over decode steps (divided by the steps: the mean batch a step held)",
            counter,
        ).Metric(labels)
        self.batcher = ContinuousBatcher(model, CharTokenizer(), self.emit, max_sequences, self.count_step)
        # the loop's thread reaches the server (metrics) through the same host as the model's calls
        self.thread = threading.Thread(
            target=contextvars.copy_context().run, args=(self.batcher.serve_forever,), name="text-generator"
        )
        self.thread.daemon = True
        self.thread.start()

    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            try:
                prompt, stream, sampling = read_request(request)
            except ValueError as exc:
                error = pb_utils.TritonError(str(exc), pb_utils.TritonError.INVALID_ARG)
                sender.send(pb_utils.InferenceResponse(error=error), flags=FINAL)
                continue
            sequence = Sequence((sender, stream), prompt, sampling, is_cancelled=request.is_cancelled)
            self.batcher.submit(sequence)
        return None

    def emit(self, sequence, text, reason):
        sender, stream = sequence.client
        if reason == FINISH_CANCELLED:
            error = pb_utils.TritonError("the request was cancelled", pb_utils.TritonError.CANCELLED)
            sender.send(pb_utils.InferenceResponse(error=error), flags=FINAL)
        elif reason == FINISH_ERROR:
            sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(sequence.error)), flags=FINAL)
        elif not stream:
            if reason is not None:
                sender.send(text_response(sequence.text), flags=FINAL)
        elif text:
            sender.send(text_response(text), flags=FINAL if reason is not None else 0)
        elif reason is not None:
            sender.send(flags=FINAL)

    def count_step(self, sequences):
        self.steps.increment(1)
        self.sequence_steps.increment(sequences)

    def finalize(self):
        self.batcher.close()
        self.thread.join(timeout=30)
        self.batcher.fail_all("the model was unloaded")


def read_request(request):
    """(prompt, stream, Sampling) of a request; ValueError says what is wrong with it."""
    prompt = first(request, "text_input")
    if prompt is None:
        raise ValueError("text_input is required")
    prompt = prompt.decode("utf-8", "replace") if isinstance(prompt, bytes) else str(prompt)
    settings = json.loads(request.parameters() or "{}")
    stream = first(request, "stream")
    stream = bool(stream) if stream is not None else settings.get("stream") is True
    given = first(request, "sampling_parameters")
    if given is not None:
        try:
            parsed = json.loads(given)
        except ValueError:
            raise ValueError("sampling_parameters must be a JSON object") from None
        if not isinstance(parsed, dict):
            raise ValueError("sampling_parameters must be a JSON object")
        settings.update(parsed)
    for name in SCALARS:
        value = first(request, name)
        if value is not None:
            settings[name] = value.item()
    return prompt, stream, sampling_from(settings)


def first(request, name):
    """The first element of an input, or None when the request does not have it."""
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return None
    values = tensor.as_numpy().reshape(-1)
    return values[0] if values.size else None


def text_response(text):
    return pb_utils.InferenceResponse(
        output_tensors=[pb_utils.Tensor("text_output", np.array([text.encode("utf-8")], dtype=np.object_))]
    )
'''

TRAINING_STEPS = 300
TRAINING_SECONDS = 8.0
TRAINING_BATCH = 16
LEARNING_RATE = 1e-2
WARMUP_STEPS = 10
HELD_OUT_SHARE = 0.05


@dataclass(frozen=True)
class TrainingReport:
    """How training went: steps taken, wall seconds, held-out loss and what uniform guessing would score."""

    steps: int
    seconds: float
    loss: float  # cross-entropy on held-out text, nats per character
    uniform_loss: float  # ln(vocabulary size)

    def describe(self) -> str:
        return (
            f"{self.steps} training steps in {self.seconds:.1f} s, held-out loss {self.loss:.2f} nats/char "
            f"(uniform {self.uniform_loss:.2f})"
        )


def model_source() -> str:
    """model.py: the core's source, then the Triton glue."""
    return Path(generator_core.__file__).read_text(encoding="utf-8") + GLUE_PY


def training_text() -> str:
    """The Python help topics (pydoc_data ships with Python): 430 kB of English about Python, its indentation and
    runs of spaces and blank lines collapsed (a model this small learns prose, not layout)."""
    from pydoc_data.topics import topics

    text = "\n\n".join(topics[name] for name in sorted(topics))
    text = re.sub(r"\n[ \t]+", "\n", re.sub(r"[ \t]{2,}", " ", text))
    return re.sub(r"\n{3,}", "\n\n", text)


@functools.cache
def training_tokens() -> torch.Tensor:
    return torch.tensor(CharTokenizer().encode(training_text()))


def train_generator(
    steps: int = TRAINING_STEPS,
    seconds: float | None = TRAINING_SECONDS,
    seed: int = 0,
    shape: ModelShape | None = None,
) -> tuple[CharTransformer, TrainingReport]:
    """Train the transformer for `steps` steps or `seconds` seconds, whichever ends first (None: steps only, so the
    result depends on the seed alone)."""
    shape = shape or ModelShape()
    tokens = training_tokens()
    cut = int(len(tokens) * (1 - HELD_OUT_SHARE))
    train, held_out = tokens[:cut], tokens[cut:]
    with one_torch_thread():
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = CharTransformer(shape)
        optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, betas=(0.9, 0.98), weight_decay=0.01)
        batches = torch.Generator().manual_seed(seed)
        started = time.perf_counter()
        taken = 0
        while taken < steps:
            elapsed = time.perf_counter() - started
            if seconds is not None and elapsed >= seconds:
                break
            progress = max(taken / steps, elapsed / seconds if seconds else 0.0)
            warmup = min(1.0, (taken + 1) / WARMUP_STEPS)
            for group in optimizer.param_groups:
                group["lr"] = LEARNING_RATE * warmup * 0.5 * (1 + math.cos(math.pi * progress))
            inputs, targets = windows(train, TRAINING_BATCH, shape.context, batches)
            loss = F.cross_entropy(model(inputs).reshape(-1, shape.vocab), targets.reshape(-1))
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            taken += 1
        seconds_taken = time.perf_counter() - started
        model.eval()
        inputs, targets = windows(held_out, 16, shape.context, torch.Generator().manual_seed(1))
        with torch.no_grad():
            held_out_loss = F.cross_entropy(model(inputs).reshape(-1, shape.vocab), targets.reshape(-1)).item()
    return model, TrainingReport(taken, seconds_taken, held_out_loss, math.log(shape.vocab))


def windows(
    tokens: torch.Tensor, count: int, length: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """`count` random windows of `length` tokens and the same windows one token later (the targets)."""
    starts = torch.randint(0, len(tokens) - length - 1, (count,), generator=generator)
    spans = tokens[starts[:, None] + torch.arange(length + 1)]
    return spans[:, :-1], spans[:, 1:]


def weights_bytes(model: CharTransformer) -> bytes:
    buffer = io.BytesIO()
    save_model(model, buffer)
    return buffer.getvalue()


def generator_files(model: CharTransformer) -> dict[str, bytes]:
    """The version folder's files: model.py and the weights."""
    return {"model.py": model_source().encode(), WEIGHTS_FILE: weights_bytes(model)}


def write_generator(store: Path, model: CharTransformer, config: str = GENERATOR_CONFIG) -> Path:
    """Write `text_generator` version 1 with `model`'s weights into a repository folder (tests, bench)."""
    folder = Path(store) / MODEL_NAME / "1"
    folder.mkdir(parents=True, exist_ok=True)
    (folder.parent / "config.pbtxt").write_text(config)
    for name, content in generator_files(model).items():
        (folder / name).write_bytes(content)
    return folder.parent
