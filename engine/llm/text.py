"""Text out of tokens: incremental detokenization and stop strings, per generated sequence."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

PROMPT_CONTEXT = 5  # prompt tokens decoded before the first output token, so its leading space survives


class IncrementalText:
    """The text each new token adds (vLLM's window: decode only the last few tokens, hold an incomplete character)."""

    def __init__(self, tokenizer: Any, prompt_token_ids: Sequence[int]) -> None:
        self.tokenizer = tokenizer
        self.ids = list(prompt_token_ids[-PROMPT_CONTEXT:])
        self.prefix = 0
        self.read = len(self.ids)

    def feed(self, token_id: int) -> str:
        self.ids.append(token_id)
        decode = self.tokenizer.decode
        before = decode(self.ids[self.prefix : self.read], skip_special_tokens=True)
        after = decode(self.ids[self.prefix :], skip_special_tokens=True)
        if len(after) > len(before) and not after.endswith("\ufffd"):
            self.prefix, self.read = self.read, len(self.ids)
            return after[len(before) :]
        return ""

    def flush(self) -> str:
        """What is still held at the end (an incomplete character comes out as U+FFFD)."""
        decode = self.tokenizer.decode
        before = decode(self.ids[self.prefix : self.read], skip_special_tokens=True)
        after = decode(self.ids[self.prefix :], skip_special_tokens=True)
        self.prefix = self.read = len(self.ids)
        return after[len(before) :] if after.startswith(before) else ""


class StopMatcher:
    """Cuts text at the first stop string, holding back only a tail that could still begin one.

    The one copy: the engine loop's and the OpenAI front end's (engine/frontend/openai_choices.py). Each piece costs a
    search of the held tail (shorter than the longest stop) and the piece, per stop string: the text already sent is
    never searched again.
    """

    def __init__(self, stops: Sequence[str]) -> None:
        self.stops = [stop for stop in stops if stop]
        self.held = ""

    def feed(self, piece: str) -> tuple[str, bool]:
        """The text now safe to send, and whether a stop string ended the sequence (the stop itself is cut)."""
        if not self.stops:
            return piece, False
        text = self.held + piece
        found = [at for stop in self.stops if (at := text.find(stop)) >= 0]
        if found:
            self.held = ""
            return text[: min(found)], True
        keep = max((_overlap(text, stop) for stop in self.stops), default=0)
        self.held = text[len(text) - keep :]
        return text[: len(text) - keep], False

    def rest(self) -> str:
        held, self.held = self.held, ""
        return held


def _overlap(text: str, stop: str) -> int:
    """How many characters at the end of `text` could begin `stop` (kept back until the next piece decides)."""
    start = text.find(stop[0], max(0, len(text) - len(stop) + 1))
    while start >= 0:
        if stop.startswith(text[start:]):
            return len(text) - start
        start = text.find(stop[0], start + 1)
    return 0
