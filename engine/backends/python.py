"""The python backend: a user's model.py with Triton's `TritonPythonModel`, in a stub process per instance.

As in Triton, each instance runs in a process of its own (engine.backends.python_stub), so a model that crashes,
leaks or holds the GIL cannot take the server down or slow its HTTP path; tensors travel through shared memory.
A stub that dies fails the batch it was running and is started again. A model may opt in to running inside the
server (`parameters { key: "EXECUTION_MODE" value { string_value: "in_process" } }`): faster for tiny models,
with none of that protection.
"""

from __future__ import annotations

import functools
import itertools
import json
import logging
import os
import re
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from engine.backends import register_backend
from engine.backends.base import Backend
from engine.backends.python_channel import ChannelClosed
from engine.backends.python_host import EngineModelHost
from engine.backends.python_model import ModelCodeError, ModelRunner, RequestData, ResponseData, describe
from engine.backends.python_process import StubDied, StubProcess, stub_environment
from engine.config.datatypes import wire_type_of
from engine.config.model_config import ModelConfig
from engine.config.text_format import config_to_dict, parse_config_json
from engine.errors import BackendError, InferaError, InvalidArgument, LoadError, NotFound, Unavailable, Unsupported
from engine.serving.streams import ResponseStream, StreamClosed
from engine.types import InferenceRequest

log = logging.getLogger("infera.engine")

EXECUTION_MODE = "EXECUTION_MODE"
IN_PROCESS = "in_process"
PROCESS = "process"
EXECUTION_ENV_PATH = "EXECUTION_ENV_PATH"
LOAD_TIMEOUT_SECONDS = 300.0
FINALIZE_TIMEOUT_SECONDS = 30.0
_module_numbers = itertools.count()
# request parameters the front end acts on itself; the model sees the rest, as Triton's python backend does
PROTOCOL_PARAMETERS = frozenset({"binary_data_output"})
# pb_utils.TritonError codes -> what the client gets for a model's error response
_ERROR_CLASSES: dict[int, type[InferaError]] = {2: NotFound, 3: InvalidArgument, 4: Unavailable, 5: Unsupported}


def execution_mode(config: ModelConfig) -> str:
    mode = config.parameters.get(EXECUTION_MODE, PROCESS).strip().lower() or PROCESS
    if mode not in (PROCESS, IN_PROCESS):
        raise LoadError(f"parameter {EXECUTION_MODE} is '{mode}'; it must be '{PROCESS}' or '{IN_PROCESS}'")
    return mode


def interpreter(config: ModelConfig, version_path: Path) -> str:
    """The Python a stub runs on: this server's, or the one in the model's EXECUTION_ENV_PATH environment."""
    raw = config.parameters.get(EXECUTION_ENV_PATH, "").strip()
    if not raw:
        return sys.executable
    model_dir = Path(version_path).parent.resolve()
    folder = Path(raw.replace("$$TRITON_MODEL_DIRECTORY", str(model_dir))).resolve()
    if not folder.is_relative_to(model_dir):
        raise LoadError(f"{EXECUTION_ENV_PATH} must name a folder inside the model's folder, not '{raw}'")
    if folder.suffix in (".gz", ".tgz", ".tar") or folder.is_file():
        raise LoadError(f"{EXECUTION_ENV_PATH} '{raw}' is an archive; unpack the environment into a folder")
    python = folder / "bin" / "python"
    if not python.is_file():
        raise LoadError(f"{EXECUTION_ENV_PATH} '{raw}' holds no bin/python")
    return str(python)


def module_name(config: ModelConfig, version_path: Path) -> str:
    safe_name = re.sub(r"\W", "_", config.name)
    return f"infera_model_{safe_name}_{Path(version_path).name}_{next(_module_numbers)}"


@register_backend
class PythonBackend(Backend):
    """Runs model.py's TritonPythonModel for one instance, in its stub process or (opted in) in the server."""

    name = "python"

    @classmethod
    def code_in(cls, config: ModelConfig) -> str | None:
        return f"{config.model_filename} runs code inside the server"

    @classmethod
    def autocomplete(cls, config: ModelConfig, version_path: Path) -> ModelConfig:
        """Triton's `auto_complete_config(auto_complete_model_config)`, when model.py defines one."""
        path = Path(version_path) / config.model_filename
        try:
            source = path.read_text(errors="replace")
        except OSError:
            return config  # the load reports the missing file
        if "auto_complete_config" not in source:
            return config  # no hook: no process started just to find none
        given = config_to_dict(config)
        host = EngineModelHost(config.name, f"{config.name}_autocomplete", None)
        if execution_mode(config) == IN_PROCESS:
            runner = ModelRunner(path, module_name(config, version_path), config.name, host)
            try:
                completed = runner.auto_complete(given)
            except ModelCodeError as exc:
                raise LoadError(str(exc)) from None
        else:
            stub = StubProcess(f"{config.name}-autocomplete", host, interpreter=interpreter(config, version_path))
            try:
                stub.start()
                header = {"op": "auto_complete", "model_path": str(path), "model_name": config.name}
                header["module_name"] = module_name(config, version_path)
                reply, _ = stub.ask(dict(header, config=given), timeout=LOAD_TIMEOUT_SECONDS)
                if reply.get("op") == "failed":
                    raise LoadError(reply["message"])
                completed = reply["config"]
                stub.ask({"op": "finalize"}, timeout=FINALIZE_TIMEOUT_SECONDS)
            except (StubDied, TimeoutError) as exc:
                raise LoadError(
                    f"auto_complete_config() of model '{config.name}' failed: {exc or 'timed out'}"
                ) from None
            finally:
                stub.kill()
        return parse_config_json(completed, source=f"auto_complete_config() of model '{config.name}'")

    def load(self) -> None:
        # absolute, as Triton's stub is given it: the stub runs in the version's folder, and model code reads
        # args["model_repository"]; a repository named relative to the server's folder answered neither
        self.version_path = Path(os.path.abspath(self.version_path))
        self.require_model_file()
        self.mode = execution_mode(self.config)
        self.host = EngineModelHost(self.config.name, self.context.instance_name, self.context.services)
        self._output_names = [t.name for t in self.config.output]
        self.restarts = 0
        self.failure = ""  # why the stub last died
        self._stub: StubProcess | None = None
        self._restart_lock = threading.Lock()
        self._closing = False
        # a decoupled model's open requests, by the number their responses come back under
        self._streams: dict[int, ResponseStream] = {}
        self._stream_numbers = itertools.count(1)
        self.host.on_response = self._deliver
        if self.mode == IN_PROCESS:
            self.runner = ModelRunner(
                self.model_path, module_name(self.config, self.version_path), self.config.name, self.host
            )
            try:
                self.runner.load(self.initialize_args())
            except ModelCodeError as exc:
                raise LoadError(str(exc)) from None
            return
        self._interpreter = interpreter(self.config, self.version_path)
        try:
            self._stub = self._start_stub()
        except (StubDied, ModelCodeError) as exc:
            raise LoadError(str(exc)) from None

    def initialize_args(self) -> dict[str, str]:
        """The `args` Triton passes to initialize(): every value a string, the config as JSON."""
        return {
            "model_config": json.dumps(config_to_dict(self.config)),
            "model_instance_kind": self.device.kind,
            "model_instance_name": self.context.instance_name,
            "model_instance_device_id": str(self.device.id),
            # the model's own folder (absolute, see load), as Triton's: python_backend src/stub_launcher.cc
            "model_repository": str(self.version_path.parent),
            "model_version": self.version_path.name,
            "model_name": self.config.name,
        }

    # ---- the stub

    def _start_stub(self) -> StubProcess:
        label = re.sub(r"[^\w.-]", "_", self.context.instance_name)
        stub = StubProcess(
            label,
            self.host,
            interpreter=self._interpreter,
            environment=stub_environment(self.device.kind, self.device.id),
            cwd=self.version_path,
            on_death=self._stub_died,
        )
        stub.start()
        try:
            reply, _ = stub.ask(
                {
                    "op": "load",
                    "model_path": str(self.model_path),
                    "module_name": module_name(self.config, self.version_path),
                    "model_name": self.config.name,
                    "args": self.initialize_args(),
                },
                timeout=LOAD_TIMEOUT_SECONDS,
            )
        except TimeoutError:
            stub.kill()
            raise StubDied(
                f"initialize() of model '{self.config.name}' took longer than {LOAD_TIMEOUT_SECONDS:.0f} s"
            ) from None
        except StubDied as exc:
            stub.kill()
            raise StubDied(f"loading model '{self.config.name}' failed: {exc.reason}") from None
        if reply.get("op") == "failed":
            stub.kill()
            raise ModelCodeError(reply["message"])
        return stub

    def _stub_died(self, reason: str) -> None:
        """From the stub's reader thread: note why, and start a new stub unless the version is leaving."""
        self.failure = reason
        self._fail_streams(f"model '{self.config.name}' instance '{self.context.instance_name}' failed: {reason}")
        log.warning(
            "instance '%s' of model '%s' failed: %s; restarting it",
            self.context.instance_name,
            self.config.name,
            reason,
        )
        if not self._closing:
            threading.Thread(
                target=self._restart, name=f"infera-restart-{self.context.instance_name}", daemon=True
            ).start()

    def _restart(self) -> StubProcess | None:
        with self._restart_lock:
            if self._closing:
                return None
            if self._stub is not None and self._stub.dead is None:
                return self._stub  # another thread restarted it already
            if self._stub is not None:
                self._stub.wait(timeout=5)
            try:
                self._stub = self._start_stub()
            except (StubDied, ModelCodeError) as exc:
                self._stub = None
                self.failure = f"restarting failed: {exc}"
                log.error("instance '%s' of model '%s': %s", self.context.instance_name, self.config.name, self.failure)
                return None
            self.restarts += 1
            log.info("instance '%s' of model '%s' restarted", self.context.instance_name, self.config.name)
            return self._stub

    def _live_stub(self) -> StubProcess:
        stub = self._stub
        if stub is None or stub.dead is not None:
            stub = self._restart()
        if stub is None:
            raise BackendError(
                f"instance '{self.context.instance_name}' of model '{self.config.name}' is not running: {self.failure}"
            )
        return stub

    # ---- execution

    def prepare_requests(self, requests: list[InferenceRequest]) -> list[tuple[RequestData, float | None]]:
        """One request object per request (a python model sees requests, never a concatenated batch)."""
        prepared = []
        for request in requests:
            wanted = [o.name for o in request.requested_outputs] if request.requested_outputs else self._output_names
            data = RequestData(
                inputs=request.inputs,
                requested_outputs=wanted,
                request_id=request.id,
                parameters=json.dumps(
                    {k: v for k, v in request.parameters.items() if k not in PROTOCOL_PARAMETERS}, default=str
                ),
                correlation_id=request.sequence_id,
                flags=(1 if request.sequence_start else 0) | (2 if request.sequence_end else 0),
            )
            if request.stream is not None:
                data.stream = self._open_stream(request.stream)
                data.cancelled = request.stream.cancelled  # in process the model reads the stream's own flag
            deadline = (
                (request.arrival_ns or time.monotonic_ns()) + request.timeout_us * 1000 if request.timeout_us else None
            )
            prepared.append((data, deadline))
        return prepared

    # ---- decoupled models: responses through each request's sender

    def _open_stream(self, stream: ResponseStream) -> int:
        number = next(self._stream_numbers)
        self._streams[number] = stream
        stream.on_cancel = functools.partial(self._cancel, number)
        return number

    def _deliver(self, number: int, response: ResponseData | None, final: bool) -> None:
        """A response the model sent (from its stub's message, or its own thread in process) to its stream."""
        stream = self._streams.pop(number, None) if final else self._streams.get(number)
        if stream is None:
            return  # the request failed or its version stopped meanwhile
        try:
            if response is None:
                stream.send(final=final)
            else:
                outputs = self._outputs_of(response)
                if isinstance(outputs, InferaError):
                    stream.send(error=outputs, final=final)
                else:
                    stream.send(outputs, final=final)
        except StreamClosed:
            pass

    def _cancel(self, number: int) -> None:
        """The client of a streamed request went away: a stub is told; in process the model reads the flag."""
        stub = self._stub
        if self.mode != IN_PROCESS and stub is not None and stub.channel is not None:
            try:
                stub.channel.send({"op": "cancel", "stream": number})
            except ChannelClosed:
                pass

    def _fail_streams(self, reason: str, numbers: list[int] | None = None) -> None:
        """End open streams (all, or `numbers`) with an error: their model will not answer them any more."""
        for number in list(self._streams) if numbers is None else numbers:
            stream = self._streams.pop(number, None)
            if stream is not None:
                stream.fail(BackendError(reason))

    def prepare(self, requests: list[dict[str, np.ndarray]]) -> list[tuple[RequestData, float | None]]:
        return [(RequestData(inputs=inputs, requested_outputs=self._output_names), None) for inputs in requests]

    def execute(self, batch: list[tuple[RequestData, float | None]]) -> list[dict[str, np.ndarray] | InferaError]:
        requests = [data for data, _ in batch]
        try:
            if self.mode == IN_PROCESS:
                responses = self.runner.execute(requests)
            else:
                deadlines = [deadline for _, deadline in batch]
                limit = max(deadlines) if deadlines and all(d is not None for d in deadlines) else None
                responses = self._execute_in_stub(requests, limit)
        except (ModelCodeError, InferaError) as exc:
            streams = [data.stream for data in requests if data.stream]
            if streams:  # the requests fail as a whole: their streams will get nothing more
                self._fail_streams(str(exc), streams)
            if isinstance(exc, InferaError):
                raise
            raise BackendError(str(exc)) from None
        if self.config.decoupled:
            return [{} for _ in requests]  # answered through their streams, now or later
        return [self._outputs_of(response) for response in responses]

    def _execute_in_stub(self, requests: list[RequestData], deadline_ns: float | None) -> list[ResponseData]:
        stub = self._live_stub()
        if stub.channel is not None:
            stub.channel.reset()  # the stub copied every tensor of the previous batch before it answered
        arrays: list[np.ndarray] = []
        entries = []
        for data in requests:
            names = list(data.inputs)
            arrays += [data.inputs[name] for name in names]
            entries.append(
                {
                    "inputs": names,
                    "requested": data.requested_outputs,
                    "request_id": data.request_id,
                    "parameters": data.parameters,
                    "correlation_id": data.correlation_id,
                    "flags": data.flags,
                    "stream": data.stream,
                }
            )
        timeout = None if deadline_ns is None else max((deadline_ns - time.monotonic_ns()) / 1e9, 0.0)
        try:
            reply, outputs = stub.ask({"op": "execute", "requests": entries}, arrays, timeout=timeout)
        except StubDied as exc:
            raise BackendError(
                f"model '{self.config.name}' instance '{self.context.instance_name}' failed: {exc.reason} while "
                "running this request; the instance is being restarted"
            ) from None
        except TimeoutError:
            self._kill_for_timeout(stub)
            raise Unavailable(
                f"inference request for model '{self.config.name}' timed out while the model ran it; "
                f"instance '{self.context.instance_name}' was stopped and is being restarted"
            ) from None
        if reply.get("op") == "failed":
            raise ModelCodeError(reply["message"])
        responses = []
        position = 0
        for entry in reply["responses"]:
            names = entry["outputs"]
            responses.append(
                ResponseData(
                    dict(zip(names, outputs[position : position + len(names)], strict=True)),
                    entry.get("error", ""),
                    int(entry.get("code", 0)),
                )
            )
            position += len(names)
        return responses

    def _kill_for_timeout(self, stub: StubProcess) -> None:
        """A batch whose every request is past its deadline: stop the model and start it again."""
        stub.kill()
        self.failure = "a request timed out while the model ran it"
        threading.Thread(target=self._restart, name=f"infera-restart-{self.context.instance_name}", daemon=True).start()

    def _outputs_of(self, response: ResponseData) -> dict[str, np.ndarray] | InferaError:
        if response.error:
            error_class = _ERROR_CLASSES.get(response.code, BackendError)
            return error_class(response.error)
        try:
            return {name: self._as_config_type(name, array) for name, array in response.outputs.items()}
        except BackendError as exc:
            return exc

    def _as_config_type(self, name: str, array: Any) -> np.ndarray:
        """The output as the engine carries it (BYTES as object arrays of bytes). A type other than the config's
        passes through as its own, as Triton's python backend answers it (the response output takes the tensor's
        dtype, python_backend src/infer_response.cc, and Triton's core checks it against no config); a type with
        no Triton datatype at all is refused."""
        if not isinstance(array, np.ndarray):
            raise BackendError(
                f"output '{name}' of model '{self.config.name}' is a {type(array).__name__}, not an array"
            )
        if array.dtype.kind in "OSU":
            return _bytes_array(array)
        if not array.dtype.isnative:  # a big-endian array: the same numbers in this machine's order
            array = array.astype(array.dtype.newbyteorder("="))
        try:
            wire_type_of(array)
        except ValueError:
            raise BackendError(
                f"output '{name}' of model '{self.config.name}' is {array.dtype}, which has no Triton datatype"
            ) from None
        return array

    def split(self, outputs: list[Any], batch_sizes: list[int]) -> list[Any]:
        """Already one entry per request."""
        return outputs

    def abort(self) -> None:
        self._closing = True  # no restart: the stub is meant to die
        stub = getattr(self, "_stub", None)
        if stub is not None:
            stub.kill(wait=False)

    def unload(self) -> None:
        self._closing = True
        if getattr(self, "_streams", None):
            self._fail_streams(f"model '{self.config.name}' is unloading; its open streams end here")
        if getattr(self, "mode", None) == IN_PROCESS:
            try:
                self.runner.finalize()
            except Exception as exc:  # noqa: BLE001 - unloading goes on: the version is leaving either way
                log.warning("finalize() of model '%s' raised %s", self.config.name, describe(exc))
        else:
            with getattr(self, "_restart_lock", threading.Lock()):
                stub = getattr(self, "_stub", None)
                if stub is not None and stub.dead is None:
                    stub.closing = True  # the stub exits after finalize: that is no failure
                    try:
                        reply, _ = stub.ask({"op": "finalize"}, timeout=FINALIZE_TIMEOUT_SECONDS)
                        if reply.get("op") == "failed":
                            log.warning("finalize() of model '%s' failed: %s", self.config.name, reply["message"])
                    except (StubDied, TimeoutError):
                        log.warning("finalize() of model '%s' did not finish; its stub was stopped", self.config.name)
                if stub is not None:
                    stub.closing = True
                    stub.wait(timeout=5)
                    stub.kill()
                self._stub = None
        host = getattr(self, "host", None)
        if host is not None:
            host.release()


def _bytes_array(array: np.ndarray) -> np.ndarray:
    """str, fixed-width bytes or mixed object elements as an object array of bytes."""
    if array.dtype.kind == "S":
        return array.astype(object)
    if array.dtype.kind == "U":
        return np.char.encode(array, "utf-8").astype(object)
    if all(isinstance(item, bytes) for item in array.flat):
        return array
    items = [item if isinstance(item, bytes) else str(item).encode("utf-8") for item in array.flat]
    return np.array(items, dtype=object).reshape(array.shape)
