"""The LLM engine loop: one thread per model instance that plans, runs, samples and answers, step after step.

Each turn: take the requests submitted and cancelled since the last turn (from any thread), `schedule(now)`, run
the plan in one forward pass (`ModelRunner.execute`), `sample` one token per sampling sequence (each seeded
sequence from its own generator), `update_from_output`, then hand each request its update through its `sink`:
the new token, the text it adds (detokenized incrementally, stop strings cut and held back while they could still
match), the token's logprobs when the request asks for them, and on the last one why it finished and its token
counts. A cancel (`cancel`, the client went away) aborts
the sequence between steps: its blocks are freed at once and its sink gets a final update ("abort").

A request with a compiled grammar (`grammar`, engine/llm/structured.py) gets a matcher of its own: each step the
tokens its grammar forbids are masked in its row of the logits (every constrained row of the batch in one call,
the others untouched) before sampling, the matcher takes the sampled token, and the answer ends "stop" when the
grammar terminates. A preempted sequence keeps its matcher (its tokens are kept too); one that missed tokens is
rebuilt by replaying them.

A failure of the model (its forward raises, memory runs out, the loop's own bookkeeping breaks) is reported first
(`on_failure`: the backend turns its version UNAVAILABLE with the reason), then every request of this engine ends
with `EngineFailed` (a 500 naming the model and the failure: those of the failing step, those running, waiting or
just submitted), and the engine refuses new ones with `EngineUnavailable` (a 503): the model's instance is broken,
the process is not, and a load of the version starts a new engine.

A request arrives when it is submitted; the loop records its queue time, its tokens' times and its end where they
happen, on the engine's clock (engine/llm/metrics.py), and `metrics()` reads them with the scheduler's numbers.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from engine.errors import BackendError, InvalidArgument, Unavailable
from engine.llm.metrics import LLMMetrics, RequestTimings
from engine.llm.model_runner import ModelRunner
from engine.llm.sampling import SampledToken, SamplingParams, SamplingRow, make_generator, sample
from engine.llm.scheduler import LLMScheduler, LLMSequence, SequenceOutput
from engine.llm.structured import GrammarState, mask_logits
from engine.llm.text import IncrementalText, StopMatcher

logger = logging.getLogger(__name__)

EMPTY_PLAN_WAIT_S = 0.05  # a plan with nothing to run (cannot happen with a consistent cache): the next look


class EngineFailed(BackendError):
    """The engine stopped: its model failed, or it is unloading."""


class EngineUnavailable(Unavailable, EngineFailed):
    """A request submitted after the engine stopped (HTTP 503): the model must be loaded again."""


@dataclass(frozen=True, slots=True)
class GenerationUpdate:
    """What one step gave a request: its new token and text; on the last, why it finished and its counts."""

    token_ids: tuple[int, ...] = ()
    text: str = ""
    finished: bool = False
    finish_reason: str | None = None  # "stop", "length" or "abort" on the last update
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0  # prompt tokens found in the prefix cache
    error: Exception | None = None  # the request ends with this (a prompt too long, the model failed)
    logprobs: tuple[SampledToken, ...] = ()  # each new token's logprob and alternatives, when the request asks


@dataclass(slots=True)
class GenerationRequest:
    """A prompt to continue, how to sample, and where its updates go (`sink`, called on the engine's thread)."""

    prompt_token_ids: list[int]
    params: SamplingParams
    sink: Callable[[GenerationUpdate], None]
    stop: Sequence[str] = ()
    priority: int = 0
    grammar: Any = None  # a compiled grammar (engine/llm/structured.py) the answer follows; None: free text
    cache_key: Hashable = None  # whose prefix cache it reads and fills (a caller and a salt); None: everyone's
    adapter: int = 0  # its LoRA adapter's slot in the runner's LoRASet (engine/llm/adapters.py); 0: the base alone
    request_id: Hashable = None  # set by `submit`
    arrival: float | None = None  # set by `submit`, on the engine's clock


@dataclass(slots=True)
class _Live:
    request: GenerationRequest
    seq: LLMSequence
    text: IncrementalText
    stops: StopMatcher
    generator: torch.Generator | None
    scheduled: bool = False  # its queue time is recorded
    grammar: GrammarState | None = None  # its matcher, when its answer follows a grammar


class LLMEngine:
    """Drives one scheduler and one model runner on a thread of its own."""

    def __init__(
        self,
        runner: ModelRunner,
        scheduler: LLMScheduler,
        name: str = "llm",
        eos_token_ids: Sequence[int] = (),
        clock: Callable[[], float] = time.monotonic,
        on_failure: Callable[[str], None] | None = None,
    ) -> None:
        self.runner = runner
        self.scheduler = scheduler
        self.name = name
        eos = list(dict.fromkeys(eos_token_ids))
        self.eos_token_id = eos[0] if eos else None
        self.extra_stop_ids = frozenset(eos[1:])
        self.clock = clock
        self.on_failure = on_failure  # called on the engine's thread with the reason, before requests are failed
        self.failure: str | None = None
        self.steps = 0
        self.timings = RequestTimings()
        self._ids = itertools.count(1)
        self._wake = threading.Condition()
        self._new: list[GenerationRequest] = []
        self._cancelled: list[Hashable] = []
        self._stopping = False
        self._live: dict[Hashable, _Live] = {}  # the loop thread's own
        self._thread = threading.Thread(target=self._run, name=f"llm-{name}", daemon=True)

    # --- any thread -------------------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def submit(self, request: GenerationRequest) -> Hashable:
        """Queue a request for the next step; its id (for `cancel`). EngineFailed once the engine has stopped."""
        request.params.check_vocab(self.runner.shape.vocab_size)
        with self._wake:
            if self.failure is not None or self._stopping:
                raise EngineUnavailable(self.failure or f"model '{self.name}' is unloading")
            request.request_id = next(self._ids)
            request.arrival = self.clock()
            self._new.append(request)
            self._wake.notify()
        return request.request_id

    def cancel(self, request_id: Hashable) -> None:
        """Abort a request between steps (its blocks freed at once); its sink gets a final "abort" update."""
        with self._wake:
            self._cancelled.append(request_id)
            self._wake.notify()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the loop after its current step; requests still open end with an error."""
        with self._wake:
            self._stopping = True
            self._wake.notify()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    # --- the engine's thread ----------------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            while True:
                with self._wake:
                    while not (self._stopping or self._new or self._cancelled or self.scheduler.has_work()):
                        self._wake.wait()
                    if self._stopping:
                        break
                self.intake()
                if self.scheduler.has_work():
                    self.step()
        except BaseException as exc:  # noqa: BLE001 - the model (or the engine) failed: this instance, not the process
            logger.exception("model '%s': the LLM engine failed", self.name)
            reason = f"model '{self.name}' failed: {type(exc).__name__}: {exc}"
            with self._wake:
                self.failure = reason
            if self.on_failure is not None:
                try:
                    self.on_failure(reason)
                except Exception:
                    logger.exception("model '%s': reporting its failure failed", self.name)
            self._fail_all(reason)
            return
        self._fail_all(f"model '{self.name}' is unloading; its open requests end here")

    def intake(self) -> None:
        """Admit the requests submitted and apply the cancels since the last turn (the loop's thread, or a test's)."""
        with self._wake:
            new, self._new = self._new, []
            cancelled, self._cancelled = self._cancelled, []
        for index, request in enumerate(new):
            try:
                self._admit(request)
            except BaseException:
                with self._wake:  # not admitted: answered with the others when the engine fails
                    self._new[:0] = new[index:]
                raise
        for request_id in cancelled:
            self._abort(request_id)

    def adapter_of(self, seq_id: Hashable) -> int:
        """The LoRA adapter slot of a live sequence (0: none); the runner asks on the engine's thread."""
        live = self._live.get(seq_id)
        return live.request.adapter if live is not None else 0

    def _admit(self, request: GenerationRequest) -> None:
        params = request.params
        seq = LLMSequence(
            request.request_id,
            list(request.prompt_token_ids),
            params.max_tokens,
            request.arrival if request.arrival is not None else self.clock(),
            priority=request.priority,
            eos_token_id=self.eos_token_id,
            stop_token_ids=self.extra_stop_ids | frozenset(params.stop_token_ids),
            extra_key=request.cache_key,
        )
        try:
            self.scheduler.add_request(seq)
        except InvalidArgument as exc:  # a prompt too long for the model: this request's own error
            _deliver(request, GenerationUpdate(finished=True, error=exc))
            return
        live = _Live(
            request,
            seq,
            IncrementalText(self.runner.tokenizer, seq.prompt_token_ids),
            StopMatcher(request.stop),
            make_generator(params, self.runner.device),
        )
        if request.grammar is not None:
            stops = ([] if self.eos_token_id is None else [self.eos_token_id]) + sorted(seq.stop_token_ids)
            live.grammar = GrammarState(request.grammar, stops)
        self._live[request.request_id] = live

    def _abort(self, request_id: Hashable) -> None:
        live = self._live.pop(request_id, None)
        if live is None:
            return  # finished meanwhile
        self.scheduler.abort(request_id, self.clock())
        _deliver(live.request, self._final(live, (), "", "abort"))

    def step(self) -> None:
        """One turn of planning, model, sampling and answers."""
        now = self.clock()
        plan = self.scheduler.schedule(now)
        self._record_queue_times(plan.prefills, now)
        if plan.is_empty:  # nothing fits yet: wait for a request or a cancel rather than spin
            with self._wake:
                if not (self._new or self._cancelled or self._stopping):
                    self._wake.wait(EMPTY_PLAN_WAIT_S)
            return
        seq_ids, logits = self.runner.execute(plan)  # a failure here ends the engine (see _run)
        self._constrain(seq_ids, logits)
        rows = [self._row(seq_id) for seq_id in seq_ids]
        tokens = sample(logits, rows)
        self.steps += 1
        drawn = dict(zip(seq_ids, tokens, strict=True))
        sampled = {seq_id: token.token_id for seq_id, token in drawn.items()}
        for output in self.scheduler.update_from_output(plan, sampled, self.clock()):
            self.timings.token(output.first, output.since_previous)
            self._answer(output, drawn.get(output.seq_id))

    def _record_queue_times(self, prefills: Sequence[Any], now: float) -> None:
        """The queue time of each request this step computes for the first time."""
        for chunk in prefills:
            live = self._live.get(chunk.seq_id)
            if live is not None and not live.scheduled:
                live.scheduled = True
                self.timings.scheduled(now - live.seq.arrival)

    def _constrain(self, seq_ids: Sequence[Hashable], logits: torch.Tensor) -> None:
        """Mask the tokens each constrained row's grammar forbids, all such rows at once."""
        states: dict[int, GrammarState] = {}
        for row, seq_id in enumerate(seq_ids):
            grammar = self._live[seq_id].grammar
            if grammar is not None:
                grammar.sync(self._live[seq_id].seq.output_token_ids)
                states[row] = grammar
        mask_logits(logits, states)

    def _row(self, seq_id: Hashable) -> SamplingRow:
        live = self._live[seq_id]
        return SamplingRow(live.request.params, live.seq.prompt_token_ids, live.seq.output_token_ids, live.generator)

    def _answer(self, output: SequenceOutput, token: SampledToken | None = None) -> None:
        live = self._live.get(output.seq_id)
        if live is None:
            return
        logprobs = (token,) if token is not None and token.logprob is not None else ()
        completed = False  # the grammar took its stop token
        if live.grammar is not None:
            if not live.grammar.accept(output.token_id):
                self._refuse(live, f"token {output.token_id} does not follow the answer's grammar")
                return
            completed = live.grammar.terminated
        ended_by_token = completed or (
            output.finish_reason is not None and output.token_id in ({self.eos_token_id} | live.seq.stop_token_ids)
        )
        piece = "" if ended_by_token else live.text.feed(output.token_id)
        if output.finish_reason is not None or completed:
            piece += live.text.flush()
        piece, cut = live.stops.feed(piece)
        stopped = cut or completed
        reason = output.finish_reason.value if output.finish_reason is not None else None
        if stopped and (reason is None or completed):
            if reason is None:
                self.scheduler.abort(output.seq_id, self.clock())
            reason = "stop"
        if reason is None:
            _deliver(live.request, GenerationUpdate((output.token_id,), piece, logprobs=logprobs))
            return
        if not cut:
            piece += live.stops.rest()
        del self._live[output.seq_id]
        _deliver(live.request, self._final(live, (output.token_id,), piece, reason, logprobs))

    def _refuse(self, live: _Live, reason: str) -> None:
        """End one request with an error (its grammar and its tokens disagree); the others go on."""
        del self._live[live.seq.seq_id]
        if self.scheduler.get(live.seq.seq_id) is not None:
            self.scheduler.abort(live.seq.seq_id, self.clock())
        self.timings.finished("abort", self.clock() - live.seq.arrival)
        _deliver(live.request, GenerationUpdate(finished=True, error=BackendError(f"model '{self.name}': {reason}")))

    def _final(
        self, live: _Live, token_ids: tuple[int, ...], text: str, reason: str, logprobs: tuple[SampledToken, ...] = ()
    ) -> GenerationUpdate:
        """The last update of a request that ended with `reason` (a token's, or "abort"); its end is recorded."""
        seq = live.seq
        self.timings.finished(reason, self.clock() - seq.arrival)
        return GenerationUpdate(
            token_ids,
            text,
            finished=True,
            finish_reason=reason,
            prompt_tokens=len(seq.prompt_token_ids),
            completion_tokens=len(seq.output_token_ids),
            cached_tokens=seq.num_cached_tokens,
            logprobs=logprobs,
        )

    def _fail_all(self, reason: str) -> None:
        with self._wake:
            self.failure = self.failure or reason
            new, self._new = self._new, []
        failed = EngineFailed(reason)
        for request in new:
            _deliver(request, GenerationUpdate(finished=True, error=failed))
        for request_id, live in list(self._live.items()):
            try:
                self.scheduler.abort(request_id, self.clock())
            except Exception:  # noqa: BLE001 - its bookkeeping may be what failed: every request is answered anyway
                logger.debug("model '%s': aborting request %r failed", self.name, request_id, exc_info=True)
            _deliver(live.request, GenerationUpdate(finished=True, error=failed))
        self._live.clear()

    def stats(self) -> Any:
        return self.scheduler.stats()

    def metrics(self) -> LLMMetrics:
        """The scheduler's gauges and counters with the loop's request times (from any thread)."""
        stats = self.scheduler.stats()
        blocks = self.scheduler.blocks
        reading = LLMMetrics(
            running=stats.running,
            waiting=stats.waiting,
            kv_blocks=blocks.num_blocks,
            kv_blocks_used=blocks.num_blocks - blocks.num_free_blocks,
            prefix_queries=stats.prefix_queries,
            prefix_hits=stats.prefix_hits,
            preemptions=stats.preemptions,
            prompt_tokens=stats.prompt_tokens,
            generation_tokens=stats.generation_tokens,
        )
        return self.timings.into(reading)


def _deliver(request: GenerationRequest, update: GenerationUpdate) -> None:
    """Hand an update to its request's sink; a sink that fails (its client gone) never stops the loop."""
    try:
        request.sink(update)
    except Exception:
        logger.exception("an LLM request's sink failed")
