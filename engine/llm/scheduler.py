"""Continuous batching with chunked prefill: which sequences run in the next model step, decided on an explicit clock.

Rules (vLLM's scheduler, Infera's own code):
- A sequence is WAITING, RUNNING, PREEMPTED (back in the waiting queue, its blocks freed) or FINISHED. Requests are
  added at any time and join at the next `schedule(now)`; each step's `StepPlan` is plain data.
- A step computes at most `max_num_batched_tokens` tokens for at most `max_num_seqs` running sequences. Decodes go
  first (one token for each running sequence whose prompt is computed), then the next chunk of prompts already
  admitted, then new admissions, each prompt cut to the budget left: a long prompt is prefilled over several steps
  and never stalls the decodes, so time to first token stays bounded while long prompts arrive.
- Priority follows vLLM: a LOWER value is served EARLIER (0 by default), arrival order breaks ties. The waiting
  queue is ordered by priority, preempted sequences first within one priority, then arrival; admission stops at the
  first sequence that does not fit (no overtaking, so a long prompt is not starved).
- Admission is by free KV-cache blocks for the whole prompt (`BlockManager.can_allocate`, a cached prefix counted
  as computed); a decode takes a new block when its last one is full. When none is free, the running sequence with
  the lowest priority, then the latest arrival, among those not yet given work this step, is preempted by
  recompute: its blocks are freed and it waits at the front with its generated tokens appended to its prompt, to
  be prefilled again (its cached blocks are often still there).
- vLLM's "priority" policy: before a step is planned, a waiting sequence that cannot be admitted (max_num_seqs
  running, or too few free blocks) takes the place of running sequences of a strictly lower priority (a higher
  value), the lowest and then the latest first, so a high-priority request under a saturating low-priority load
  starts at the next step. Equal priorities never preempt each other (arrival order holds).
- `update_from_output(plan, sampled, now)` applies a step: computed tokens are recorded (full blocks become
  shareable), each sampling sequence gets its token and finishes on its stop or eos token ("stop"), on
  `max_tokens` or `max_model_len` ("length"). `abort` finishes a sequence ("abort") at once. A finished sequence's
  blocks are freed at once and its id is listed in the next plan's `finished`.
- One plan at a time: `schedule` refuses to plan again before the previous plan's output is applied.
"""

from __future__ import annotations

import bisect
import enum
import itertools
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field

from engine.errors import InvalidArgument
from engine.llm.kv_blocks import BlockManager


class SequenceStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    PREEMPTED = "preempted"
    FINISHED = "finished"


class FinishReason(enum.StrEnum):
    """Why a sequence ended, in OpenAI's words (`finish_reason`)."""

    STOP = "stop"  # its eos token or a stop token id
    LENGTH = "length"  # max_tokens, or the model's max_model_len
    ABORT = "abort"  # cancelled, or the client went away


@dataclass(slots=True, eq=False)
class LLMSequence:
    """One generation: its prompt, what it generated, where it stands, and its stamps on the caller's clock."""

    seq_id: Hashable
    prompt_token_ids: list[int]
    max_tokens: int
    arrival: float
    priority: int = 0
    eos_token_id: int | None = None
    stop_token_ids: frozenset[int] = frozenset()
    extra_key: Hashable = None  # separates prefix-cache entries (a caller and a cache salt, an adapter id)
    output_token_ids: list[int] = field(default_factory=list)
    status: SequenceStatus = SequenceStatus.WAITING
    num_computed_tokens: int = 0  # tokens whose KV is written in the cache
    num_cached_tokens: int = 0  # prompt tokens found in the prefix cache at first admission
    num_preemptions: int = 0
    finish_reason: FinishReason | None = None
    first_scheduled_at: float | None = None
    first_token_at: float | None = None
    last_token_at: float | None = None
    finished_at: float | None = None
    order: int = 0  # arrival order, breaks ties

    @property
    def all_token_ids(self) -> list[int]:
        return self.prompt_token_ids + self.output_token_ids

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    @property
    def remaining(self) -> int:
        """Tokens still to compute before the next token can be sampled."""
        return self.num_tokens - self.num_computed_tokens

    @property
    def queue_time(self) -> float | None:
        """From arrival to the first step that computed any of it."""
        return None if self.first_scheduled_at is None else self.first_scheduled_at - self.arrival

    @property
    def ttft(self) -> float | None:
        """Time to first token: from arrival to the step that sampled the first token."""
        return None if self.first_token_at is None else self.first_token_at - self.arrival


@dataclass(frozen=True, slots=True)
class ScheduledChunk:
    """Tokens of one sequence computed in a step: positions `start`..`start + len(token_ids)`, in `block_table`."""

    seq_id: Hashable
    start: int
    token_ids: tuple[int, ...]
    block_table: tuple[int, ...]
    samples: bool  # the chunk ends the sequence's known tokens: its last logits give the next token

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)


@dataclass(frozen=True, slots=True)
class StepPlan:
    """What the next model step computes, and what changed since the previous plan."""

    decodes: tuple[ScheduledChunk, ...] = ()
    prefills: tuple[ScheduledChunk, ...] = ()
    preempted: tuple[Hashable, ...] = ()  # blocks freed, back to waiting: drop their per-step state
    finished: tuple[Hashable, ...] = ()  # finished or aborted since the previous plan, blocks freed

    @property
    def chunks(self) -> tuple[ScheduledChunk, ...]:
        return self.decodes + self.prefills

    @property
    def num_batched_tokens(self) -> int:
        return sum(chunk.num_tokens for chunk in self.chunks)

    @property
    def is_empty(self) -> bool:
        return not self.decodes and not self.prefills


@dataclass(frozen=True, slots=True)
class SequenceOutput:
    """A token a step gave a sequence, and whether that ended it."""

    seq_id: Hashable
    token_id: int
    first: bool  # its first token: `since_previous` is its time to first token
    since_previous: float  # from arrival (first token) or from the previous token (inter-token latency)
    finish_reason: FinishReason | None


@dataclass(frozen=True, slots=True)
class SchedulerStats:
    """Counters and gauges for metrics."""

    running: int
    waiting: int
    preemptions: int
    prompt_tokens: int
    generation_tokens: int
    kv_usage: float
    prefix_hit_rate: float
    prefix_queries: int
    prefix_hits: int
    evictions: int


class LLMScheduler:
    """Plans each model step over a paged KV cache; the caller owns the clock, the loop and the model."""

    def __init__(
        self,
        blocks: BlockManager,
        max_num_batched_tokens: int,
        max_num_seqs: int,
        max_model_len: int,
        watermark: float = 0.0,
    ) -> None:
        if max_num_seqs < 1:
            raise InvalidArgument(f"max_num_seqs must be at least 1, got {max_num_seqs}")
        if max_num_batched_tokens < max_num_seqs:
            raise InvalidArgument(
                f"max_num_batched_tokens ({max_num_batched_tokens}) must be at least max_num_seqs ({max_num_seqs}):"
                " every running sequence decodes a token each step"
            )
        capacity = blocks.num_blocks * blocks.block_size
        if max_model_len < 2 or max_model_len > capacity:
            raise InvalidArgument(
                f"max_model_len must be from 2 to the KV cache's capacity ({blocks.num_blocks} blocks of "
                f"{blocks.block_size} tokens = {capacity}), got {max_model_len}"
            )
        if not 0.0 <= watermark < 1.0:
            raise InvalidArgument(f"the KV cache's watermark is a share from 0 to 1, got {watermark}")
        self.blocks = blocks
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_num_seqs = max_num_seqs
        self.max_model_len = max_model_len
        self.reserve = int(watermark * blocks.num_blocks)  # blocks admission leaves to growing sequences
        self.waiting: list[LLMSequence] = []  # in admission order (see _waiting_key)
        self.running: list[LLMSequence] = []
        self._seqs: dict[Hashable, LLMSequence] = {}
        self._order = itertools.count()
        self._left: list[Hashable] = []  # finished or aborted since the last plan
        self._in_flight = False
        self.preemptions = 0
        self.prompt_tokens = 0
        self.generation_tokens = 0

    # --- requests ---------------------------------------------------------------------------------------------
    def add_request(self, seq: LLMSequence) -> None:
        """Queue a new sequence (validated here: a prompt must leave room for one token and fit the cache)."""
        if seq.seq_id in self._seqs:
            raise InvalidArgument(f"request id {seq.seq_id!r} is already generating")
        prompt = len(seq.prompt_token_ids)
        if prompt == 0:
            raise InvalidArgument("the prompt is empty: it needs at least one token")
        if prompt >= self.max_model_len:
            raise InvalidArgument(
                f"the prompt has {prompt} tokens and this model's max_model_len is {self.max_model_len}: "
                "no room left to generate a token"
            )
        if seq.max_tokens < 1:
            raise InvalidArgument(f"max_tokens must be at least 1, got {seq.max_tokens}")
        seq.order = next(self._order)
        seq.status = SequenceStatus.WAITING
        self._seqs[seq.seq_id] = seq
        self._enqueue(seq)

    def get(self, seq_id: Hashable) -> LLMSequence | None:
        """A sequence not yet finished."""
        return self._seqs.get(seq_id)

    def abort(self, seq_id: Hashable, now: float) -> LLMSequence | None:
        """Finish a sequence at once (cancelled, client gone) and free its blocks; None if it already ended."""
        seq = self._seqs.get(seq_id)
        if seq is None:
            return None
        if seq in self.running:
            self.running.remove(seq)
        else:
            self.waiting.remove(seq)
        self._finish(seq, FinishReason.ABORT, now)
        return seq

    def has_work(self) -> bool:
        return bool(self.running or self.waiting)

    # --- planning ---------------------------------------------------------------------------------------------
    def schedule(self, now: float) -> StepPlan:
        """Plan the next step: decodes, then prefill chunks, under the token budget and the sequence cap."""
        if self._in_flight:
            raise RuntimeError("the previous step's output was not applied (update_from_output) before planning")
        budget = self.max_num_batched_tokens
        decodes: list[ScheduledChunk] = []
        prefills: list[ScheduledChunk] = []
        preempted: list[Hashable] = []
        given: set[Hashable] = set()
        self._preempt_for_waiting(preempted)
        self.running.sort(key=_running_key)

        for seq in list(self.running):  # decodes, highest priority first
            if budget == 0:
                break
            if seq.status is not SequenceStatus.RUNNING or seq.remaining != 1:
                continue
            if not self._make_room(seq, given, preempted):
                continue
            if self.blocks.num_tokens(seq.seq_id) < seq.num_tokens:
                self.blocks.append_slot(seq.seq_id, seq.all_token_ids[-1])
            decodes.append(self._chunk(seq, 1))
            given.add(seq.seq_id)
            budget -= 1

        for seq in self.running:  # prompts admitted earlier, their next chunk
            if budget == 0:
                break
            if seq.seq_id not in given and seq.remaining > 1:
                prefills.append(self._chunk(seq, min(seq.remaining, budget)))
                given.add(seq.seq_id)
                budget -= prefills[-1].num_tokens

        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:  # admissions
            seq = self.waiting[0]
            tokens = seq.all_token_ids
            reserve = self.reserve if self.running else 0  # alone, a sequence may use the whole cache
            if not self.blocks.can_allocate(tokens, seq.extra_key, reserve=reserve):
                break
            self.waiting.pop(0)
            cached = self.blocks.allocate(seq.seq_id, tokens, seq.extra_key)
            seq.num_computed_tokens = cached
            if seq.first_scheduled_at is None:
                seq.first_scheduled_at = now
                seq.num_cached_tokens = cached
            seq.status = SequenceStatus.RUNNING
            self.running.append(seq)
            prefills.append(self._chunk(seq, min(seq.remaining, budget)))
            given.add(seq.seq_id)
            budget -= prefills[-1].num_tokens

        left, self._left = tuple(self._left), []
        plan = StepPlan(tuple(decodes), tuple(prefills), tuple(preempted), left)
        self._in_flight = not plan.is_empty
        return plan

    def _preempt_for_waiting(self, preempted: list[Hashable]) -> None:
        """Preempt running sequences of a strictly lower priority while the first waiting one cannot be admitted."""
        while self.waiting and self.running:
            head = self.waiting[0]
            victim = max(self.running, key=_running_key)
            if victim.priority <= head.priority:
                return
            room = len(self.running) < self.max_num_seqs
            if room and self.blocks.can_allocate(head.all_token_ids, head.extra_key, reserve=self.reserve):
                return
            self._preempt(victim)
            preempted.append(victim.seq_id)

    def _make_room(self, seq: LLMSequence, given: set[Hashable], preempted: list[Hashable]) -> bool:
        """Ensure a decode's slot, preempting the lowest-priority, latest running sequences; False if it went."""
        needs_block = self.blocks.num_tokens(seq.seq_id) < seq.num_tokens
        while needs_block and not self.blocks.can_append_slot(seq.seq_id):
            victim = max((s for s in self.running if s.seq_id not in given), key=_running_key)
            self._preempt(victim)
            preempted.append(victim.seq_id)
            if victim is seq:
                return False
        return True

    def _preempt(self, seq: LLMSequence) -> None:
        """Recompute later: free its blocks and put it back at the front of its priority's waiting queue."""
        self.running.remove(seq)
        self.blocks.free(seq.seq_id)
        seq.num_computed_tokens = 0
        seq.num_preemptions += 1
        seq.status = SequenceStatus.PREEMPTED
        self.preemptions += 1
        self._enqueue(seq)

    def _chunk(self, seq: LLMSequence, count: int) -> ScheduledChunk:
        start = seq.num_computed_tokens
        tokens = tuple(seq.all_token_ids[start : start + count])
        table = tuple(self.blocks.block_table(seq.seq_id))
        return ScheduledChunk(seq.seq_id, start, tokens, table, samples=start + count == seq.num_tokens)

    def _enqueue(self, seq: LLMSequence) -> None:
        bisect.insort(self.waiting, seq, key=_waiting_key)

    # --- applying a step -----------------------------------------------------------------------------------------
    def update_from_output(self, plan: StepPlan, sampled: Mapping[Hashable, int], now: float) -> list[SequenceOutput]:
        """Record a step's work: computed tokens, one sampled token per sampling chunk, finished sequences."""
        self._in_flight = False
        outputs: list[SequenceOutput] = []
        for chunk in plan.chunks:
            seq = self._seqs.get(chunk.seq_id)
            if seq is None or seq.status is not SequenceStatus.RUNNING:
                continue  # aborted while the step ran
            seq.num_computed_tokens = chunk.start + chunk.num_tokens
            self.blocks.mark_computed(seq.seq_id, seq.num_computed_tokens)
            if not chunk.samples:
                continue
            if chunk.seq_id not in sampled:
                raise ValueError(f"the step sampled no token for sequence {chunk.seq_id!r}")
            outputs.append(self._append(seq, int(sampled[chunk.seq_id]), now))
        return outputs

    def _append(self, seq: LLMSequence, token: int, now: float) -> SequenceOutput:
        first = seq.first_token_at is None
        since = now - (seq.arrival if first else seq.last_token_at)
        if first:
            seq.first_token_at = now
            self.prompt_tokens += len(seq.prompt_token_ids)
        seq.last_token_at = now
        seq.output_token_ids.append(token)
        self.generation_tokens += 1
        reason = None
        if token == seq.eos_token_id or token in seq.stop_token_ids:
            reason = FinishReason.STOP
        elif len(seq.output_token_ids) >= seq.max_tokens or seq.num_tokens >= self.max_model_len:
            reason = FinishReason.LENGTH
        if reason is not None:
            self.running.remove(seq)
            self._finish(seq, reason, now)
        return SequenceOutput(seq.seq_id, token, first, since, reason)

    def _finish(self, seq: LLMSequence, reason: FinishReason, now: float) -> None:
        self.blocks.free(seq.seq_id)
        seq.status = SequenceStatus.FINISHED
        seq.finish_reason = reason
        seq.finished_at = now
        del self._seqs[seq.seq_id]
        self._left.append(seq.seq_id)

    # --- metrics ----------------------------------------------------------------------------------------------
    def stats(self) -> SchedulerStats:
        blocks = self.blocks
        return SchedulerStats(
            running=len(self.running),
            waiting=len(self.waiting),
            preemptions=self.preemptions,
            prompt_tokens=self.prompt_tokens,
            generation_tokens=self.generation_tokens,
            kv_usage=blocks.usage,
            prefix_hit_rate=blocks.hit_rate,
            prefix_queries=blocks.queries,
            prefix_hits=blocks.hits,
            evictions=blocks.evictions,
        )


def _running_key(seq: LLMSequence) -> tuple[int, int]:
    """Serve order: lower priority value first, then earlier arrival (the max is the first to preempt)."""
    return (seq.priority, seq.order)


def _waiting_key(seq: LLMSequence) -> tuple[int, bool, int]:
    """Admission order: priority, preempted sequences before new ones, then arrival."""
    return (seq.priority, seq.status is not SequenceStatus.PREEMPTED, seq.order)
