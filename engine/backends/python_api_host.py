"""The `ModelHost` model code reaches outside itself through (BLS, custom metrics, log lines), set by the runner
around every call into model code, and the event loop an `async def execute` runs on."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from typing import TYPE_CHECKING, Any, Protocol

from engine.backends.python_api_errors import TritonModelException

if TYPE_CHECKING:
    from engine.backends.python_api_metrics import Metric, MetricFamily
    from engine.backends.python_api_requests import InferenceRequest, InferenceResponse, ResponseIterator


class ModelHost(Protocol):
    """What model code reaches outside itself through: the server (BLS), its metrics and its log."""

    def infer(self, request: InferenceRequest) -> InferenceResponse: ...

    async def async_infer(self, request: InferenceRequest) -> InferenceResponse: ...

    def stream(self, request: InferenceRequest) -> ResponseIterator:
        """A BLS call whose responses are read as they come (exec(decoupled=True))."""
        ...

    def metric_family(self, family: MetricFamily) -> None: ...

    def metric_update(self, metric: Metric, action: str, value: float) -> None: ...

    def metric_value(self, metric: Metric) -> float: ...

    def metric_release(self, family: MetricFamily) -> None: ...

    def log(self, level: int, message: str) -> None: ...

    def respond(self, stream: int, response: Any, final: bool) -> None:
        """One response of a decoupled model's request (`stream` names it); `response` is plain data or None."""
        ...


_current_host: contextvars.ContextVar[ModelHost | None] = contextvars.ContextVar("infera_model_host", default=None)
_process_host: list[ModelHost] = []  # the stub's one host: threads the model starts itself see it too


def set_host(host: ModelHost | None) -> contextvars.Token:
    """Make `host` the one model code reaches in this context (the runner calls this around model code)."""
    return _current_host.set(host)


def reset_host(token: contextvars.Token) -> None:
    _current_host.reset(token)


def set_process_host(host: ModelHost) -> None:
    """In a stub process: the host every thread of the model reaches."""
    _process_host[:] = [host]


def current_host() -> ModelHost:
    host = _current_host.get() or (_process_host[0] if _process_host else None)
    if host is None:
        raise TritonModelException("this call needs a running model: it is only available inside model.py calls")
    return host


def run_coroutine(coroutine: Any) -> Any:
    """Run `async def execute` to its end on an event loop of this thread (kept for the model's later calls)."""
    loop = _thread_loop()
    return loop.run_until_complete(coroutine)


_loops = threading.local()


def _thread_loop() -> asyncio.AbstractEventLoop:
    loop = getattr(_loops, "loop", None)
    if loop is None or loop.is_closed():
        loop = _loops.loop = asyncio.new_event_loop()
    return loop
