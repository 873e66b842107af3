"""A python model's stub process: runs one instance's model.py, talks to the server over its channel.

Started by engine.backends.python_process with the channel's socket and two memfd regions as inherited file
descriptors. The main thread reads messages; one model thread runs load, execute and finalize in order, so BLS
answers and metric values reach a model that is waiting on them. It ends when the server closes the link or
dies (its socket closes with the server's process), never outliving it. PR_SET_PDEATHSIG is no help here: it
follows the thread that started the stub, and restarts start stubs from threads that end.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import threading
from typing import Any

import numpy as np

from engine.backends import python_utils as pb_utils
from engine.backends.python_channel import Channel, ChannelClosed, Exchange, Region
from engine.backends.python_model import (
    ModelCodeError,
    ModelRunner,
    RequestData,
    ResponseData,
    bls_responses,
    model_call,
)
from engine.types import ModelCallResult


class StubHost:
    """pb_utils.ModelHost over the exchange: every call model code makes outside itself goes to the server."""

    def __init__(self, exchange: Exchange) -> None:
        self.exchange = exchange
        self.cancels: dict[int, threading.Event] = {}  # the streamed requests still open, by stream number

    def _call_message(self, request: pb_utils.InferenceRequest) -> tuple[dict[str, Any], list[np.ndarray]]:
        call = model_call(request)
        names = list(call.inputs)
        header = {
            "op": "call",
            "call": {
                "model_name": call.model_name,
                "model_version": call.model_version,
                "inputs": names,
                "requested_outputs": call.requested_outputs,
                "parameters": call.parameters,
                "request_id": call.request_id,
                "correlation_id": call.correlation_id,
                "flags": call.flags,
                "timeout_us": call.timeout_us,
            },
        }
        return header, [call.inputs[name] for name in names]

    def infer(self, request: pb_utils.InferenceRequest) -> pb_utils.InferenceResponse:
        return _call_results(*self.exchange.ask(*self._call_message(request)))[0]

    async def async_infer(self, request: pb_utils.InferenceRequest) -> pb_utils.InferenceResponse:
        # a worker thread waits (and reads the link) so the model's other coroutines go on meanwhile
        header, arrays = self._call_message(request)
        loop = asyncio.get_running_loop()
        return _call_results(*await loop.run_in_executor(None, self.exchange.ask, header, arrays))[0]

    def stream(self, request: pb_utils.InferenceRequest) -> pb_utils.ResponseIterator:
        """The server answers a streamed call once per response of the model, the last with "final"."""
        header, arrays = self._call_message(request)
        header["call"]["decoupled"] = True
        number = self.exchange.open(header, arrays)

        def receive() -> tuple[pb_utils.InferenceResponse, bool]:
            answer, out = self.exchange.next_answer(number)
            last = bool(answer.get("final", True))
            if last:
                self.exchange.forget(number)
            return _call_results(answer, out)[0], last

        def cancel() -> None:
            self.exchange.channel.post({"op": "call_cancel", "call": number})

        return pb_utils.ResponseIterator(receive, cancel, lambda: self.exchange.forget(number))

    def metric_family(self, family: pb_utils.MetricFamily) -> None:
        kind = pb_utils.MetricFamily.KINDS[family.kind]
        header, _ = self.exchange.ask(
            {"op": "metric_declare", "name": family.name, "description": family.description, "kind": kind}
        )
        if header.get("error"):
            raise pb_utils.TritonModelException(header["error"])

    def metric_update(self, metric: pb_utils.Metric, action: str, value: float) -> None:
        self.exchange.channel.post(
            {
                "op": "metric_update",
                "name": metric.family.name,
                "labels": metric.labels,
                "action": action,
                "value": value,
                "buckets": metric.buckets,
            }
        )

    def metric_value(self, metric: pb_utils.Metric) -> float:
        header, _ = self.exchange.ask({"op": "metric_value", "name": metric.family.name, "labels": metric.labels})
        if header.get("error"):
            raise pb_utils.TritonModelException(header["error"])
        return float(header["value"])

    def metric_release(self, family: pb_utils.MetricFamily) -> None:
        self.exchange.channel.post({"op": "metric_release", "name": family.name})

    def log(self, level: int, message: str) -> None:
        self.exchange.channel.post({"op": "log", "level": level, "message": message})

    def respond(self, stream: int, response: ResponseData | None, final: bool) -> None:
        # posted (a generator's responses of one step go in one write), tensors inside the message: a stream's
        # responses outlive the execute whose region they would use
        header: dict[str, Any] = {"op": "response", "stream": stream, "final": final}
        arrays: list[np.ndarray] = []
        if response is not None:
            header |= {"outputs": list(response.outputs), "error": response.error, "code": response.code}
            arrays = [np.asarray(array) for array in response.outputs.values()]
        if final:
            self.cancels.pop(stream, None)
        self.exchange.channel.post(header, arrays)


def _call_results(header: dict[str, Any], arrays: list[np.ndarray]) -> list[pb_utils.InferenceResponse]:
    results = []
    position = 0
    for entry in header["results"]:
        names = entry.get("outputs", [])
        outputs = dict(zip(names, arrays[position : position + len(names)], strict=True))
        position += len(names)
        results.append(ModelCallResult(outputs, entry.get("error", ""), int(entry.get("code", 0))))
    return bls_responses(results)


class Stub:
    """The stub's loop: read what the server sends; run model work on this thread, in order, and answer it."""

    def __init__(self, channel: Channel) -> None:
        self.channel = channel
        self.exchange = Exchange(channel, self._handle)
        self.host = StubHost(self.exchange)
        pb_utils.set_process_host(self.host)
        self.runner: ModelRunner | None = None
        self.finished = False

    def run(self) -> None:
        self.exchange.serve()  # returns when the server closes the link (or dies)

    def _handle(self, header: dict[str, Any], arrays: list[np.ndarray]) -> None:
        op = header.get("op")
        if op == "cancel":  # the client of a streamed request went away: the model sees request.is_cancelled()
            event = self.host.cancels.get(int(header["stream"]))
            if event is not None:
                event.set()
            return
        if op not in ("load", "auto_complete", "execute", "finalize"):
            return
        try:
            reply, out = getattr(self, f"_{op}")(header, arrays)
        except ModelCodeError as exc:
            reply, out = {"op": "failed", "message": str(exc)}, []
        except Exception as exc:  # noqa: BLE001 - whatever happens, the server gets an answer
            reply, out = {"op": "failed", "message": f"{type(exc).__name__}: {exc}"}, []
        try:
            self.exchange.answer(header, reply, out)
        except ChannelClosed:
            os._exit(0)
        if op == "finalize":
            os._exit(0)  # finalize() ran and was answered: nothing is left to do

    def _runner(self, header: dict[str, Any]) -> ModelRunner:
        return ModelRunner(header["model_path"], header["module_name"], header["model_name"], self.host)

    def _load(self, header: dict[str, Any], _: list) -> tuple[dict[str, Any], list]:
        folder = os.path.dirname(header["model_path"])
        if folder not in sys.path:
            sys.path.insert(0, folder)  # a model.py may import modules that sit beside it
        runner = self._runner(header)
        runner.load(header["args"])
        self.runner = runner
        return {"op": "loaded"}, []

    def _auto_complete(self, header: dict[str, Any], _: list) -> tuple[dict[str, Any], list]:
        return {"op": "config", "config": self._runner(header).auto_complete(header["config"])}, []

    def _execute(self, header: dict[str, Any], arrays: list[np.ndarray]) -> tuple[dict[str, Any], list]:
        if self.runner is None:
            raise ModelCodeError("the model was asked to execute before it was loaded")
        self.channel.reset()  # the server copied everything this stub sent for the batch before
        requests = []
        position = 0
        for entry in header["requests"]:
            names = entry["inputs"]
            inputs = dict(zip(names, arrays[position : position + len(names)], strict=True))
            position += len(names)
            stream = int(entry.get("stream", 0))
            cancelled = self.host.cancels.setdefault(stream, threading.Event()) if stream else None
            requests.append(
                RequestData(
                    inputs=inputs,
                    requested_outputs=entry.get("requested", []),
                    request_id=entry.get("request_id", ""),
                    parameters=entry.get("parameters", "{}"),
                    correlation_id=entry.get("correlation_id", 0),
                    flags=int(entry.get("flags", 0)),
                    stream=stream,
                    cancelled=cancelled,
                )
            )
        responses = self.runner.execute(requests)
        out: list[np.ndarray] = []
        entries = []
        for response in responses:
            names = list(response.outputs)
            out += [np.asarray(response.outputs[name]) for name in names]
            entries.append({"outputs": names, "error": response.error, "code": response.code})
        return {"op": "result", "responses": entries}, out

    def _finalize(self, header: dict[str, Any], _: list) -> tuple[dict[str, Any], list]:
        if self.runner is not None:
            self.runner.finalize()
        return {"op": "finalized"}, []


def main(argv: list[str]) -> int:
    """`argv`: the socket's, the outgoing region's and the incoming region's file descriptors."""
    sock_fd, outgoing_fd, incoming_fd = (int(value) for value in argv[:3])
    if os.getppid() == 1:
        return 0  # the server died before this stub started
    channel = Channel(socket.socket(fileno=sock_fd), Region(outgoing_fd), Region(incoming_fd))
    Stub(channel).run()
    return 0
