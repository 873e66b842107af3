"""The gRPC front end's management calls: the model repository, shared memory, trace and log settings.

The same decisions as HTTP's, in gRPC messages: a repository load is parsed by engine/frontend/repository_load.py
(as HTTP's is), and the extensions answer through engine/frontend/extensions.py. Mixed into GrpcFrontEnd, whose
`server` and `repository_control` they use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from google.protobuf import json_format

from engine.frontend import extensions
from engine.frontend.grpc_calls import Call
from engine.frontend.repository_load import (
    RepositoryControl,
    check_load_name,
    load_model,
    parse_load_request,
    unload_model,
)
from engine.protocol.grpc_codec import parameter_value, parameters_of
from engine.serving.admission import Principal, may_not_change

if TYPE_CHECKING:
    from engine.serving.server import InferenceServer


class ManagementCalls:
    """`rpc_<method>` for the repository and extension methods of inference.GRPCInferenceService."""

    server: InferenceServer
    repository_control: RepositoryControl | None

    # ---- the model repository

    async def rpc_RepositoryIndex(self, request: Any, call: Call, response: type) -> Any:  # noqa: N802
        rows = self.server.repository_index(ready_only=request.ready)
        return json_format.ParseDict({"models": rows}, response(), ignore_unknown_fields=True)

    async def rpc_RepositoryModelLoad(self, request: Any, call: Call, response: type) -> Any:  # noqa: N802
        name = check_load_name(request.model_name)
        self._check_may_change(call.principal, name)
        load = parse_load_request(name, parameters_of(request.parameters))
        await load_model(self.server, self.repository_control, load, call.principal)
        return response()

    async def rpc_RepositoryModelUnload(self, request: Any, call: Call, response: type) -> Any:  # noqa: N802
        name = check_load_name(request.model_name)
        self._check_may_change(call.principal, name)
        await unload_model(self.server, self.repository_control, name, call.principal)
        return response()

    def _check_may_change(self, principal: Principal, name: str) -> None:
        if not principal.may_change_models:
            raise may_not_change(principal, name)

    # ---- shared memory, trace, logging (engine/frontend/extensions.py answers HTTP the same way)

    async def rpc_SystemSharedMemoryStatus(self, request: Any, call: Call, response: type) -> Any:  # noqa: N802
        regions = extensions.shared_memory_status(self.server, "system", request.name or None, call.principal)
        return _regions(response, regions)

    async def rpc_SystemSharedMemoryRegister(self, request: Any, call: Call, response: type) -> Any:  # noqa: N802
        details = {"key": request.key, "offset": request.offset, "byte_size": request.byte_size}
        extensions.register_shared_memory(self.server, "system", request.name, details, call.principal)
        return response()

    async def rpc_SystemSharedMemoryUnregister(self, request: Any, call: Call, response: type) -> Any:  # noqa: N802
        extensions.unregister_shared_memory(self.server, "system", request.name or None, call.principal)
        return response()

    async def rpc_CudaSharedMemoryStatus(self, request: Any, call: Call, response: type) -> Any:  # noqa: N802
        regions = extensions.shared_memory_status(self.server, "cuda", request.name or None, call.principal)
        return _regions(response, regions)

    async def rpc_CudaSharedMemoryRegister(self, request: Any, call: Call, response: type) -> Any:  # noqa: N802
        extensions.register_shared_memory(self.server, "cuda", request.name, {}, call.principal)
        return response()

    async def rpc_CudaSharedMemoryUnregister(self, request: Any, call: Call, response: type) -> Any:  # noqa: N802
        extensions.unregister_shared_memory(self.server, "cuda", request.name or None, call.principal)
        return response()

    async def rpc_TraceSetting(self, request: Any, call: Call, response: type) -> Any:  # noqa: N802
        model = request.model_name or None
        # an empty value list clears a setting (a model's own setting, or back to the default)
        changes = {key: (list(value.value) or None) for key, value in request.settings.items()}
        if changes:
            self._check_may_change(call.principal, "tracing")
            settings = extensions.update_trace_settings(self.server, changes, model)
        else:
            settings = extensions.trace_settings(self.server, model)
        answer = response()
        for key, value in settings.items():
            answer.settings[key].value.extend(value if isinstance(value, list) else [value])
        return answer

    async def rpc_LogSettings(self, request: Any, call: Call, response: type) -> Any:  # noqa: N802
        changes = {key: parameter_value(value) for key, value in request.settings.items()}
        if changes:
            self._check_may_change(call.principal, "logging")
        settings = self.server.log_settings.update(changes) if changes else self.server.log_settings.to_dict()
        answer = response()
        for key, value in settings.items():
            slot = answer.settings[key]
            if isinstance(value, bool):
                slot.bool_param = value
            elif isinstance(value, int):
                slot.uint32_param = value
            else:
                slot.string_param = str(value)
        return answer


def _regions(response_class: type, regions: list[dict[str, Any]]) -> Any:
    answer = response_class()
    for region in regions:
        json_format.ParseDict(region, answer.regions[region["name"]])
    return answer
