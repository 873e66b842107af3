"""Triton's generate, generate_stream and gRPC stream requests held to the caller's token budgets, as /v1 is
(openai_budgets.py), so a budget cannot be gone round through /v2 or gRPC.

The request's max_tokens (its `max_tokens` input, then `sampling_parameters`, then its parameters) above the ceiling
is a 400 (on gRPC, the stream's error message); when it names none and a ceiling is set, the ceiling goes to the
model as its `max_tokens` parameter. Then the gate reserves it and a stream (a refusal is a 429 with `Retry-After`
in generate's error shape, the stream's error message on gRPC), and the stream's counts (`prompt_tokens`,
`completion_tokens`, `cached_tokens`, as the llm backend's last response carries them) settle it when the stream
ends or the client goes away. Every request is admitted so, budgets or not, so its usage is counted (/metrics, the
console's usage chart).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import numpy as np

from engine.errors import InvalidArgument
from engine.llm.budgets import Admission, BudgetGate
from engine.llm.usage import Usage

if TYPE_CHECKING:
    from engine.serving.admission import Principal
    from engine.serving.streams import ResponseStream, StreamedResponse
    from engine.types import InferenceRequest

COUNTS = ("prompt_tokens", "completion_tokens", "cached_tokens")


def asked_max_tokens(request: InferenceRequest) -> int | None:
    """The max_tokens a generate request names, where the llm backend reads it (None when it names none)."""
    array = request.inputs.get("max_tokens")
    if array is not None and array.size:
        return int(np.asarray(array).reshape(-1)[0])
    given = request.inputs.get("sampling_parameters")
    if given is not None and given.size:
        try:
            value = json.loads(np.asarray(given).reshape(-1)[0]).get("max_tokens")
        except (ValueError, AttributeError, TypeError):
            value = None  # the model refuses a bad sampling_parameters itself
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    value = request.parameters.get("max_tokens")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


async def admit(gate: BudgetGate | None, principal: Principal, request: InferenceRequest) -> Admission | None:
    """The request's reservation against the caller's budgets (None without a gate); a caller without budgets
    reserves nothing, and what its request uses is still counted when it settles."""
    if gate is None:
        return None
    ceiling = gate.ceiling(principal)
    asked = asked_max_tokens(request)
    if ceiling is not None and asked is not None and asked > ceiling:
        raise InvalidArgument(f"max_tokens may be at most {ceiling} for this caller (its token budget), got {asked}")
    if ceiling is not None and asked is None:
        request.parameters["max_tokens"] = asked = ceiling
    return await gate.admit(principal, max(asked or 0, 0))


class BudgetedStream:
    """A ResponseStream read through: its counts noted, the admission settled at its end or its cancel."""

    def __init__(self, stream: ResponseStream, admission: Admission) -> None:
        self.stream = stream
        self.admission = admission
        self.counts: dict[str, int] = {}

    @property
    def model_version(self) -> int:
        return self.stream.model_version

    def cancel(self) -> None:
        self.stream.cancel()
        self.admission.settle_soon(self.usage())

    def usage(self) -> Usage:
        return Usage(*(self.counts.get(name, 0) for name in COUNTS))

    def __aiter__(self) -> BudgetedStream:
        return self

    async def __anext__(self) -> StreamedResponse:
        try:
            response = await self.stream.__anext__()
        except BaseException:
            await self.admission.settle(self.usage())
            raise
        for name in COUNTS:
            array: Any = (response.outputs or {}).get(name)
            if array is not None and np.asarray(array).size:
                self.counts[name] = int(np.asarray(array).reshape(-1)[0])
        if response.final:
            await self.admission.settle(self.usage())
        return response
