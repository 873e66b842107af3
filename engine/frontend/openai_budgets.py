"""A /v1 completion against the caller's token budgets (engine/llm/budgets.py), before any work is queued.

The max_tokens ceiling: a request asking for more is a 400 naming `max_tokens` (OpenAI and vLLM refuse a
max_tokens above what they allow, they never clamp one); a request that names none runs with the ceiling when it is
below the server's default. Then the gate reserves `max_tokens` times `n` tokens and a stream: over a budget the
answer is a 429 in OpenAI's shape ({"error": {"message", "type": "tokens" or "requests", "param": null, "code":
"rate_limit_exceeded"}}) with `Retry-After`. When the completion ends (answered, failed, the client gone) its usage
settles the reservation and is counted (/metrics, the console's usage chart). /v1/embeddings reserves its inputs'
tokens the same way (`admit_tokens`; openai_embeddings.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

from engine.frontend.openai_fields import OpenAIError
from engine.llm.budgets import Admission, BudgetExceeded, BudgetGate
from engine.llm.usage import Usage

if TYPE_CHECKING:
    from engine.frontend.openai import Completion
    from engine.serving.admission import Principal

RATE_LIMITED = "rate_limit_exceeded"


class RateLimited(OpenAIError):
    """429 with OpenAI's rate-limit code and the seconds to wait."""

    def __init__(self, refusal: BudgetExceeded) -> None:
        super().__init__(refusal.message, 429, refusal.kind)
        self.headers = [(b"retry-after", str(refusal.retry_after).encode())]

    def body(self) -> bytes:
        error = {"message": self.message, "type": self.kind, "param": None, "code": RATE_LIMITED}
        return orjson.dumps({"error": error})


def bound_max_tokens(completion: Completion, ceiling: int | None) -> None:
    """Hold the completion to the caller's max_tokens ceiling: 400 above it, the ceiling when none was asked."""
    if ceiling is None:
        return
    if completion.max_tokens is not None and completion.max_tokens > ceiling and completion.asked_max_tokens:
        raise OpenAIError(
            f"'max_tokens' may be at most {ceiling} for this caller (its token budget), got {completion.max_tokens}",
            param="max_tokens",
        )
    if completion.limit > ceiling:
        completion.max_tokens = completion.limit = ceiling
        completion.sampling["max_tokens"] = ceiling


async def admit(gate: BudgetGate, principal: Principal, completion: Completion) -> Admission:
    """The completion's reservation against the caller's budgets; a 400 or a 429 when they refuse it."""
    bound_max_tokens(completion, gate.ceiling(principal))
    return await admit_tokens(gate, principal, completion.limit * completion.n)


async def admit_tokens(gate: BudgetGate, principal: Principal, tokens: int) -> Admission:
    """A reservation of `tokens` (and a stream) against the caller's budgets; a 429 in OpenAI's shape when refused."""
    try:
        return await gate.admit(principal, tokens)
    except BudgetExceeded as refusal:
        raise RateLimited(refusal) from None


def usage_of(answer: dict[str, Any]) -> Usage:
    """A completion's usage (OpenAI's shape) as the gate counts it."""
    cached = (answer.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    return Usage(answer.get("prompt_tokens", 0), answer.get("completion_tokens", 0), cached)
