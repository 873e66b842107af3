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

    The same contract as engine/frontend/openai.py's StopMatcher (feed, rest), which can become this one: the engine
    sits below the front ends, so the shared class lives here.
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
    """How many characters at the end of `text` could begin `stop`."""
    for size in range(min(len(stop) - 1, len(text)), 0, -1):
        if stop.startswith(text[-size:]):
            return size
    return 0
