"""One choice of an OpenAI completion: the model's response stream read as pieces of text (with their tokens'
logprobs), cut at a stop string or after the token limit, and what the last response says (finish_reason, counts).

A request for `n` choices runs `n` requests, choice i seeded `seed + i` when a seed is given (vLLM's rule), and
reads their streams side by side (`interleaved`), each piece tagged with its choice.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engine.frontend.openai_fields import OpenAIError
from engine.frontend.openai_logprobs import entries_of
from engine.llm.text import StopMatcher
from engine.serving.streams import ResponseStream

COUNT_OUTPUTS = ("prompt_tokens", "completion_tokens", "cached_tokens")
FINISH_REASONS = ("stop", "length")


@dataclass(slots=True)
class Piece:
    """What one response added to a choice: its text (possibly empty) and its tokens' logprob entries."""

    choice: Choice
    text: str
    logprobs: list[dict[str, Any]] = field(default_factory=list)
    offset: int = 0  # the characters of this choice's text given out before this piece


class Choice:
    """Choice `index`: its stream, read once through `pieces()`; its counts and finish_reason once it has ended."""

    def __init__(
        self,
        index: int,
        stream: ResponseStream,
        *,
        text_output: str,
        logprobs_output: str | None,
        stop: Sequence[str],
        limit: int,
    ) -> None:
        self.index = index
        self.stream = stream
        self.text_output = text_output
        self.logprobs_output = logprobs_output  # None: logprobs were not asked for
        self.stop = stop
        self.limit = limit  # the tokens the server lets it run
        self.tokens = 0  # responses received: the completion's tokens
        self.finish_reason = "stop"
        self.counts: dict[str, int] = {}  # the model's own token counts, from its last response
        self.model_reason: str | None = None  # "stop" or "length", when the model's last response says why it ended
        self.sent = 0  # characters of text given out so far (a streamed completion's text_offset starts there)

    def completion_tokens(self) -> int:
        return self.counts.get("completion_tokens", self.tokens)

    def text_of(self, outputs: dict[str, np.ndarray] | None) -> str:
        array = (outputs or {}).get(self.text_output)
        if array is None:
            return ""
        return "".join(item.decode("utf-8", errors="replace") for item in np.asarray(array).reshape(-1))

    async def pieces(self) -> AsyncIterator[Piece]:
        """The generated text piece by piece, cut at the first stop string or after `limit` tokens (either cancels
        the rest, whatever the model does); a piece with no text still comes when it carries logprobs."""
        stream = self.stream
        matcher = StopMatcher(self.stop)
        async for response in stream:
            if response.error is not None:
                raise OpenAIError(response.error.message, 500, "server_error")
            if response.empty:
                continue
            self.tokens += 1
            outputs = response.outputs or {}
            self.take_final(outputs)
            text, stopped = matcher.feed(self.text_of(outputs))
            logprobs = entries_of(outputs.get(self.logprobs_output)) if self.logprobs_output else []
            if text or logprobs:
                yield self._given(text, logprobs)
            if stopped:
                self.finish_reason = "stop"
                stream.cancel()
                return
            if self.tokens >= self.limit:
                stream.cancel()
                break
        if rest := matcher.rest():
            yield self._given(rest, [])
        if self.model_reason is not None:
            self.finish_reason = self.model_reason
        elif self.tokens >= self.limit:
            self.finish_reason = "length"

    def _given(self, text: str, logprobs: list[dict[str, Any]]) -> Piece:
        piece = Piece(self, text, logprobs, self.sent)
        self.sent += len(text)
        return piece

    def take_final(self, outputs: dict[str, np.ndarray]) -> None:
        """Keep the model's finish_reason and token counts where its (last) response carries them."""
        for name in COUNT_OUTPUTS:
            array = outputs.get(name)
            if array is not None and np.asarray(array).size:
                self.counts[name] = int(np.asarray(array).reshape(-1)[0])
        reason = outputs.get("finish_reason")
        if reason is not None and np.asarray(reason).size:
            item = np.asarray(reason).reshape(-1)[0]
            text = item.decode("utf-8", errors="replace") if isinstance(item, bytes) else str(item)
            if text in FINISH_REASONS:
                self.model_reason = text


async def whole(choice: Choice) -> tuple[str, list[dict[str, Any]]]:
    """A choice's whole text and every logprob entry, once its stream has ended."""
    texts: list[str] = []
    logprobs: list[dict[str, Any]] = []
    async for piece in choice.pieces():
        texts.append(piece.text)
        logprobs += piece.logprobs
    return "".join(texts), logprobs


_ENDED = object()


async def interleaved(choices: Sequence[Choice]) -> AsyncIterator[Piece | Choice]:
    """Every choice's pieces as they come, and each choice itself once it has ended (its finish_reason set).

    One choice is read in place; several each by a task of their own into one queue, cancelled if the reader stops
    first (the client went away); the first error ends them all."""
    if len(choices) == 1:
        async for piece in choices[0].pieces():
            yield piece
        yield choices[0]
        return
    queue: asyncio.Queue[tuple[Choice, Any]] = asyncio.Queue()

    async def read(choice: Choice) -> None:
        try:
            async for piece in choice.pieces():
                queue.put_nowait((choice, piece))
            queue.put_nowait((choice, _ENDED))
        except OpenAIError as exc:
            queue.put_nowait((choice, exc))

    tasks = [asyncio.ensure_future(read(choice)) for choice in choices]
    try:
        open_choices = len(choices)
        while open_choices:
            choice, item = await queue.get()
            if isinstance(item, OpenAIError):
                raise item
            if item is _ENDED:
                open_choices -= 1
                yield choice
            else:
                yield item
    finally:
        for task in tasks:
            task.cancel()
        for choice in choices:
            if not choice.stream.closed:
                choice.stream.cancel()
