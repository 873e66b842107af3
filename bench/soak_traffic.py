"""The soak's traffic: every demo model the seeded console serves, JSON and binary, at several concurrency levels,
each answer checked.

A stream is one part of the mix: `concurrency` keep-alive connections (bench/checked_load.py), each sending its own
endless series of calls, one in flight at a time with `pause_s` between them. A call carries the check of its answer
(None when right, else what is wrong), so sequences check running sums and `digits` checks the probabilities of the
version that says it answered, whichever the switch made active. The counts go to the current `Window`, which the
soak's controller swaps for a fresh one at the end of each window.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np
import orjson

from bench.checked_load import Connection, Reply
from bench.direct import cpu_session
from bench.ensemble_models import MARGIN, SCALE, binary_request, image_request, read_back_grid
from bench.sequence_runs import answered_output, step_body, step_value
from bench.servers import NotAvailable
from console.demo.pipeline import digit_image, png_bytes
from console.demo.repository import digits_split

REQUEST_TIMEOUT_S = 30.0
EXAMPLES = 10
SEQUENCE_STEPS = 20
JSON = {"Content-Type": "application/json"}
DYNA = "simple_dyna_sequence"  # its END answer is the running sum plus the correlation id
Check = Callable[[Reply], str | None]


@dataclass(frozen=True)
class Call:
    """One request of the mix and the check of its answer."""

    path: str
    body: bytes
    headers: dict[str, str]
    check: Check


@dataclass(frozen=True)
class Stream:
    """A part of the mix: `concurrency` connections, each sending the calls `calls()` makes for it."""

    name: str
    concurrency: int
    calls: Callable[[], Iterator[Call]]


@dataclass
class Window:
    """What the streams saw since the window opened: latencies (s), failures and wrong answers, per stream."""

    opened: float = field(default_factory=time.monotonic)
    latencies: dict[str, list[float]] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    examples: list[str] = field(default_factory=list)

    def answered(self, stream: str, seconds: float) -> None:
        self.latencies.setdefault(stream, []).append(seconds)

    def failed(self, stream: str, what: str) -> None:
        self.errors[stream] = self.errors.get(stream, 0) + 1
        if len(self.examples) < EXAMPLES:
            self.examples.append(f"{stream}: {what}")

    def figures(self, closed: float) -> dict:
        """The window's figures: requests, errors, p50/p99 (ms) overall and per stream."""
        every = [s for latencies in self.latencies.values() for s in latencies]
        streams = {
            name: {"requests": len(latencies), "errors": self.errors.get(name, 0), "p99_ms": _p99_ms(latencies)}
            for name, latencies in sorted(self.latencies.items())
        }
        for name, errors in self.errors.items():
            streams.setdefault(name, {"requests": 0, "errors": errors, "p99_ms": None})
        return {
            "seconds": round(closed - self.opened, 3),
            "requests": len(every),
            "errors": sum(self.errors.values()),
            "p50_ms": float(np.percentile(every, 50) * 1000) if every else None,
            "p99_ms": _p99_ms(every),
            "streams": streams,
            "examples": list(self.examples),
        }


def _p99_ms(latencies: list[float]) -> float | None:
    return float(np.percentile(latencies, 99) * 1000) if latencies else None


class Mix:
    """The streams against one server; `run` drives them on the calling thread's event loop until `stop` is set."""

    def __init__(self, base_url: str, streams: list[Stream], pause_s: float) -> None:
        address = urlsplit(base_url)
        self.host, self.port = address.hostname or "127.0.0.1", address.port or 80
        self.streams = streams
        self.pause_s = pause_s
        self.window = Window()

    def swap(self) -> Window:
        """Close the current window and open the next; the closed one is returned."""
        closed, self.window = self.window, Window()
        return closed

    async def run(self, stop: threading.Event) -> None:
        workers = [self._worker(stream, stop) for stream in self.streams for _ in range(stream.concurrency)]
        await asyncio.gather(*workers)

    async def _worker(self, stream: Stream, stop: threading.Event) -> None:
        connection = Connection(self.host, self.port)
        calls = stream.calls()
        try:
            while not stop.is_set():
                call = next(calls)
                started = time.perf_counter()
                try:
                    sent = connection.send(call.path, call.body, call.headers)
                    reply = await asyncio.wait_for(sent, REQUEST_TIMEOUT_S)
                except (OSError, asyncio.IncompleteReadError, TimeoutError, ValueError) as error:
                    connection.close()
                    self.window.failed(stream.name, f"no answer ({type(error).__name__}: {error})")
                    continue
                elapsed = time.perf_counter() - started
                problem = (
                    f"HTTP {reply.status} {reply.body[:200].decode(errors='replace')}"
                    if reply.status != 200
                    else call.check(reply)
                )
                if problem is None:
                    self.window.answered(stream.name, elapsed)
                else:
                    self.window.failed(stream.name, problem)
                if self.pause_s:
                    await asyncio.sleep(self.pause_s)
        finally:
            connection.close()


# ---- reading answers


def json_outputs(reply: Reply) -> dict[str, list]:
    """A JSON answer's outputs by name (their flat data)."""
    return {output["name"]: output["data"] for output in orjson.loads(reply.body)["outputs"]}


def binary_outputs(reply: Reply) -> dict[str, bytes]:
    """A binary-extension answer's outputs by name (their raw bytes)."""
    length = int(reply.headers.get(b"inference-header-content-length", b"0"))
    if not length:
        raise ValueError("the answer is JSON, not the binary data asked for")
    outputs, offset, data = {}, length, reply.body
    for output in orjson.loads(data[:length])["outputs"]:
        size = output["parameters"]["binary_data_size"]
        outputs[output["name"]] = data[offset : offset + size]
        offset += size
    return outputs


def checked(check: Callable[[Reply], str | None]) -> Check:
    """`check` with an unreadable answer reported as what is wrong instead of raised."""

    def safe(reply: Reply) -> str | None:
        try:
            return check(reply)
        except (ValueError, KeyError, IndexError, TypeError) as error:
            return f"unreadable answer ({type(error).__name__}: {error}): {reply.body[:200]!r}"

    return safe


def infer_path(model: str) -> str:
    return f"/v2/models/{model}/infer"


# ---- the demo models' calls


A = np.arange(16, dtype=np.int32).reshape(1, 16)
B = np.ones_like(A)


def simple_json() -> Iterator[Call]:
    """`simple` (ONNX): OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1, as JSON."""
    body = orjson.dumps(
        {
            "inputs": [
                {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": A.ravel().tolist()},
                {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": B.ravel().tolist()},
            ]
        }
    )
    want = {"OUTPUT0": (A + B).ravel().tolist(), "OUTPUT1": (A - B).ravel().tolist()}

    def check(reply: Reply) -> str | None:
        got = json_outputs(reply)
        return None if all(got[name] == data for name, data in want.items()) else f"wrong sums {got}"

    return itertools.repeat(Call(infer_path("simple"), body, JSON, checked(check)))


def simple_binary() -> Iterator[Call]:
    """`simple` with tensors in Triton's binary extension both ways."""
    inputs = [("INPUT0", "INT32", [1, 16], A.tobytes()), ("INPUT1", "INT32", [1, 16], B.tobytes())]
    body, headers = binary_request(inputs, ("OUTPUT0", "OUTPUT1"))
    want = {"OUTPUT0": (A + B).tobytes(), "OUTPUT1": (A - B).tobytes()}

    def check(reply: Reply) -> str | None:
        return None if binary_outputs(reply) == want else "wrong binary sums"

    return itertools.repeat(Call(infer_path("simple"), body, headers, checked(check)))


def simple_string_json() -> Iterator[Call]:
    """`simple_string` (python): the same sums on BYTES tensors of decimal strings."""
    body = orjson.dumps(
        {
            "inputs": [
                {"name": "INPUT0", "shape": [1, 16], "datatype": "BYTES", "data": [str(v) for v in A.ravel()]},
                {"name": "INPUT1", "shape": [1, 16], "datatype": "BYTES", "data": [str(v) for v in B.ravel()]},
            ]
        }
    )
    want = [str(v) for v in (A + B).ravel()]

    def check(reply: Reply) -> str | None:
        got = json_outputs(reply)["OUTPUT0"]
        return None if got == want else f"wrong string sums {got}"

    return itertools.repeat(Call(infer_path("simple_string"), body, JSON, checked(check)))


@dataclass(frozen=True)
class DigitsAnswers:
    """One held-out digit, the probabilities each `digits` version gives it, and pipeline images with the labels
    either version may give them."""

    sample: np.ndarray  # float32 [64]
    probabilities: dict[str, np.ndarray]  # version -> float32 [10]
    images: list[tuple[bytes, dict[str, str], set[str]]]  # (body, headers, allowed labels)

    @classmethod
    def of(cls, store: Path, images: int = 16) -> DigitsAnswers:
        """Computed in process from the store's version folders (`digits/1`, `digits/2`)."""
        sessions = {v: cpu_session(store / "digits" / v / "model.onnx") for v in ("1", "2")}
        _, _, test_x, _ = digits_split()
        sample = test_x[0]
        probabilities = {v: s.run(["probabilities"], {"image": sample[None, :]})[0][0] for v, s in sessions.items()}
        greys = [digit_image(x, SCALE) for x in test_x[: images * 8]]
        grids = np.stack([read_back_grid(grey) for grey in greys]).astype(np.float32)
        per_version = [s.run(["probabilities"], {"image": grids})[0] for s in sessions.values()]
        chosen = []
        for index, grey in enumerate(greys):
            tops = [np.sort(p[index])[-2:] for p in per_version]
            if all(top[1] - top[0] >= MARGIN for top in tops):
                image = image_request(png_bytes(grey), "")
                chosen.append((image.body, image.headers, {str(int(p[index].argmax())) for p in per_version}))
            if len(chosen) == images:
                break
        if not chosen:
            raise NotAvailable("no held-out digit that both versions of 'digits' label clearly")
        return cls(sample, probabilities, chosen)


def digits_check(answers: DigitsAnswers, read: Callable[[Reply], np.ndarray]) -> Check:
    def check(reply: Reply) -> str | None:
        head = reply.body[: int(reply.headers.get(b"inference-header-content-length", len(reply.body)))]
        version = orjson.loads(head)["model_version"]
        if version not in answers.probabilities:
            return f"answered by version {version!r}"
        got = read(reply)
        if not np.allclose(got, answers.probabilities[version], atol=1e-4):
            return f"version {version}: probabilities {got.tolist()}"
        return None

    return checked(check)


def digits_json(answers: DigitsAnswers) -> Callable[[], Iterator[Call]]:
    """`digits` (ONNX, two versions, switched): probabilities of the version that answered, as JSON."""
    body = orjson.dumps(
        {"inputs": [{"name": "image", "shape": [1, 64], "datatype": "FP32", "data": answers.sample.tolist()}]}
    )

    def read(reply: Reply) -> np.ndarray:
        return np.asarray(json_outputs(reply)["probabilities"], dtype=np.float32)

    return lambda: itertools.repeat(Call(infer_path("digits"), body, JSON, digits_check(answers, read)))


def digits_binary(answers: DigitsAnswers) -> Callable[[], Iterator[Call]]:
    """`digits` in the binary extension both ways."""
    body, headers = binary_request([("image", "FP32", [1, 64], answers.sample.tobytes())], ("probabilities",))

    def read(reply: Reply) -> np.ndarray:
        return np.frombuffer(binary_outputs(reply)["probabilities"], dtype=np.float32)

    return lambda: itertools.repeat(Call(infer_path("digits"), body, headers, digits_check(answers, read)))


def pipeline_images(answers: DigitsAnswers) -> Callable[[], Iterator[Call]]:
    """`digits_pipeline` (an ensemble of two python steps around `digits`): PNGs in, a label either version gives."""

    def calls() -> Iterator[Call]:
        for body, headers, allowed in itertools.cycle(answers.images):

            def check(reply: Reply, allowed: set[str] = allowed) -> str | None:
                label = str(json_outputs(reply)["LABEL"][0])
                return None if label in allowed else f"LABEL {label!r}, expected one of {sorted(allowed)}"

            yield Call(infer_path("digits_pipeline"), body, headers, checked(check))

    return calls


GENERATED_CHARACTERS = 16


def generated_text() -> Iterator[Call]:
    """`text_generator` (a decoupled python model) through the generate extension: one answer holding the whole
    text, at most GENERATED_CHARACTERS characters of it (its tokens are characters)."""
    body = orjson.dumps({"text_input": "def ", "max_tokens": GENERATED_CHARACTERS, "temperature": 0})

    def check(reply: Reply) -> str | None:
        text = orjson.loads(reply.body)["text_output"]
        if isinstance(text, str) and 0 < len(text) <= GENERATED_CHARACTERS:
            return None
        return f"text_output {text!r}"

    return itertools.repeat(Call("/v2/models/text_generator/generate", body, JSON, checked(check)))


_SEQUENCE_IDS = itertools.count(1)  # correlation ids never repeat within one soak


def sequences(model: str) -> Callable[[], Iterator[Call]]:
    """Sequences of SEQUENCE_STEPS steps on a stateful model, each answer checked against its running sum."""

    def calls() -> Iterator[Call]:
        while True:
            sequence_id, total = next(_SEQUENCE_IDS), 0
            for step in range(SEQUENCE_STEPS):
                end = step == SEQUENCE_STEPS - 1
                body = step_body(model, sequence_id, step, end, total)
                total += step_value(sequence_id, step)
                want = total + (sequence_id if end and model == DYNA else 0)

                def check(reply: Reply, want: int = want, where: str = f"sequence {sequence_id} step {step}"):
                    got = answered_output(reply.body)
                    return None if got == want else f"{where}: OUTPUT {got}, expected {want}"

                yield Call(infer_path(model), body, JSON, check)

    return calls


def demo_streams(store: Path) -> list[Stream]:
    """The mix: every demo model, JSON and binary where the model takes both, at concurrencies from 1 to 16."""
    answers = DigitsAnswers.of(store)
    return [
        Stream("simple json", 8, simple_json),
        Stream("simple binary", 2, simple_binary),
        Stream("simple_string json", 1, simple_string_json),
        Stream("digits json", 4, digits_json(answers)),
        Stream("digits binary", 16, digits_binary(answers)),
        Stream("digits_pipeline binary", 4, pipeline_images(answers)),
        Stream("simple_sequence json", 2, sequences("simple_sequence")),
        Stream("simple_dyna_sequence json", 4, sequences(DYNA)),
        Stream("simple_sequence_onnx json", 4, sequences("simple_sequence_onnx")),
        Stream("text_generator generate", 2, generated_text),
    ]
