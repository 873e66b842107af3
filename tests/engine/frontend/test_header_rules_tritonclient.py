"""Triton's restricted APIs and header forwarding, driven by tritonclient (HTTP and gRPC, aio) against real front ends
on loopback: V2App under uvicorn and GrpcFrontEnd, on the test's event loop over one engine.

Read against Triton's src/restricted_features.h, src/command_line_parser.cc (ParseRestrictedFeatureOption),
src/http_server.cc (RespondIfRestricted, ForwardHeaders) and src/grpc/ (ExecutePrecondition,
ForwardHeadersAsParameters): a restricted category answers 403 "This API is restricted, expecting header '<h>'"
over HTTP and UNAVAILABLE "This protocol is restricted, expecting header 'triton-grpc-protocol-<h>'" over gRPC.
"""

from __future__ import annotations

import asyncio
import json
import socket
import textwrap
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import grpc
import numpy as np
import pytest
import pytest_asyncio
import tritonclient.grpc.aio as grpcclient
import tritonclient.http.aio as httpclient
import uvicorn
from tritonclient.utils import InferenceServerException

from engine.environment.headers import RESTRICTED_CATEGORIES, HeaderRules, Restriction, read_header_rules
from engine.frontend.grpc_server import GrpcFrontEnd
from engine.frontend.header_rules import GRPC_REFUSAL, HTTP_REFUSAL, HeaderCheck
from engine.frontend.http import V2App
from engine.serving.admission import Principal
from engine.serving.server import InferenceServer
from engine.settings import EngineSettings, GrpcSettings
from tests.engine.frontend.test_grpc_security import GOOD_KEY, authenticate  # token mode in miniature
from tests.engine.model_factory import make_python_model, make_simple_onnx, python_config

pytestmark = pytest.mark.asyncio(loop_scope="module")

WAIT_S = 120.0  # a bound on every wait: a hang fails the test, it never decides it
KEY, SECRET = "infera-key", "s3cret=="  # a value may hold '=' (base64), as Triton's parser allows

PARAMETERS_SOURCE = textwrap.dedent(
    '''
    """Answers the request's parameters, as JSON text: what model code sees of forwarded headers."""
    import numpy as np
    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        def execute(self, requests):
            return [
                pb_utils.InferenceResponse(
                    [pb_utils.Tensor("PARAMETERS", np.array([r.parameters().encode()], dtype=np.object_))]
                )
                for r in requests
            ]
    '''
)


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def engine(tmp_path_factory: pytest.TempPathFactory):
    """`simple` and `parameters`; each front end's header rules as the environment gives them."""
    repo = tmp_path_factory.mktemp("header-rules")
    make_simple_onnx(repo, name="simple")
    config = python_config("parameters", [("INPUT0", "TYPE_FP32", [1])], [("PARAMETERS", "TYPE_STRING", [1])], 0)
    make_python_model(repo, "parameters", PARAMETERS_SOURCE, config)
    settings = EngineSettings(
        http_headers=read_header_rules(
            {
                "INFERA_HTTP_RESTRICTED_API": f"inference:{KEY}={SECRET}",
                "INFERA_HTTP_HEADER_FORWARD_PATTERN": "^x-fwd-|^authorization$|^cookie$|key|^priority$",
            },
            "http",
        ),
        grpc_headers=read_header_rules(
            {
                "INFERA_GRPC_RESTRICTED_PROTOCOL": f"inference:{KEY}={SECRET}",
                "INFERA_GRPC_HEADER_FORWARD_PATTERN": "^x-fwd-|^authorization$|key|^triton_",
            },
            "grpc",
        ),
        max_concurrent_per_caller=0,
    )
    server = InferenceServer(repo, gpu_count=0, settings=settings)
    await server.start()
    yield server
    await server.stop()


class Served:
    """An HTTP and a gRPC client of one pair of front ends."""

    def __init__(self, http: httpclient.InferenceServerClient, grpc: grpcclient.InferenceServerClient) -> None:
        self.http = http
        self.grpc = grpc


@asynccontextmanager
async def front_ends(
    server: InferenceServer,
    authenticate: Callable[[Any], Awaitable[Principal]] | None = None,
    rules: HeaderRules | None = None,
) -> AsyncIterator[Served]:
    """V2App under uvicorn and a GrpcFrontEnd on loopback (their rules the engine's settings, or `rules` for both)."""
    v2 = V2App(server, authenticate=authenticate)
    grpc_front = GrpcFrontEnd(server, GrpcSettings(port=0, shutdown_grace_seconds=0), authenticate=authenticate)
    if rules is not None:
        v2.headers = HeaderCheck(rules, HTTP_REFUSAL)
        grpc_rules = HeaderRules(
            tuple(Restriction(r.categories, "triton-grpc-protocol-" + r.header, r.value) for r in rules.restrictions)
        )
        grpc_front.headers = HeaderCheck(grpc_rules, GRPC_REFUSAL)
    await grpc_front.start()
    listener = socket.create_server(("127.0.0.1", 0))
    config = uvicorn.Config(v2, lifespan="off", log_level="warning", loop="asyncio", interface="asgi3")
    web = uvicorn.Server(config)
    task = asyncio.create_task(web.serve(sockets=[listener]))
    try:
        async with asyncio.timeout(WAIT_S):
            while not web.started:
                await asyncio.sleep(0)  # a yield to the loop: uvicorn starts on this same loop
        http = httpclient.InferenceServerClient(f"127.0.0.1:{listener.getsockname()[1]}")
        grpc_client = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_front.port}")
        try:
            yield Served(http, grpc_client)
        finally:
            await http.close()
            await grpc_client.close()
    finally:
        web.should_exit = True
        await task
        await grpc_front.stop(0)


def simple_inputs(module: Any) -> list[Any]:
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        infer_input = module.InferInput(name, [1, 16], "INT32")
        infer_input.set_data_from_numpy(np.ones((1, 16), np.int32))
        inputs.append(infer_input)
    return inputs


def parameters_inputs(module: Any) -> list[Any]:
    infer_input = module.InferInput("INPUT0", [1], "FP32")
    infer_input.set_data_from_numpy(np.ones(1, np.float32))
    return [infer_input]


# one call of each category's endpoints per client: (category, what it calls)
Call = Callable[[Any, Any, dict[str, str]], Awaitable[Any]]
CALLS: list[tuple[str, str, Call]] = [
    ("health", "is_server_live", lambda c, m, h: c.is_server_live(headers=h)),
    ("health", "is_server_ready", lambda c, m, h: c.is_server_ready(headers=h)),
    ("health", "is_model_ready", lambda c, m, h: c.is_model_ready("simple", headers=h)),
    ("metadata", "get_server_metadata", lambda c, m, h: c.get_server_metadata(headers=h)),
    ("metadata", "get_model_metadata", lambda c, m, h: c.get_model_metadata("simple", headers=h)),
    ("inference", "infer", lambda c, m, h: c.infer("simple", simple_inputs(m), headers=h)),
    ("shared-memory", "system_shm_status", lambda c, m, h: c.get_system_shared_memory_status(headers=h)),
    ("shared-memory", "cuda_shm_status", lambda c, m, h: c.get_cuda_shared_memory_status(headers=h)),
    ("model-config", "get_model_config", lambda c, m, h: c.get_model_config("simple", headers=h)),
    ("model-repository", "repository_index", lambda c, m, h: c.get_model_repository_index(headers=h)),
    ("statistics", "statistics", lambda c, m, h: c.get_inference_statistics("simple", headers=h)),
    ("trace", "get_trace_settings", lambda c, m, h: c.get_trace_settings(headers=h)),
    ("logging", "get_log_settings", lambda c, m, h: c.get_log_settings(headers=h)),
]


async def refusal_of(call: Call, client: Any, module: Any, headers: dict[str, str]) -> str | None:
    """The refusal a call got (its message), or None when it was answered."""
    try:
        answer = await call(client, module, dict(headers))  # tritonclient.http adds its own to the dict it gets
    except InferenceServerException as exc:
        return f"{exc.status()} {exc.message()}"
    if answer is False:  # tritonclient.http's health calls answer False for any status but 200
        return "False"
    return None


@pytest.mark.parametrize("category", RESTRICTED_CATEGORIES)
async def test_each_category_is_refused_without_its_header_and_the_others_are_not(engine, category):
    rules = HeaderRules((Restriction(frozenset({category}), KEY, SECRET),))
    async with front_ends(engine, rules=rules) as served:
        for client, module, header, refused in (
            (served.http, httpclient, KEY, f"403 {HTTP_REFUSAL}'{KEY}'"),
            (
                served.grpc,
                grpcclient,
                f"triton-grpc-protocol-{KEY}",
                f"StatusCode.UNAVAILABLE {GRPC_REFUSAL}'triton-grpc-protocol-{KEY}'",
            ),
        ):
            for own, name, call in CALLS:
                without = await refusal_of(call, client, module, {})
                wrong = await refusal_of(call, client, module, {header: SECRET + "x"})
                with_it = await refusal_of(call, client, module, {header: SECRET})
                assert with_it is None, (module.__name__, name, with_it)
                if own != category:
                    assert without is None, (module.__name__, name, without)  # other categories unaffected
                elif module is httpclient and own == "health":
                    assert without == wrong == "False", name
                else:
                    assert without == wrong == refused, (name, without, wrong)


async def test_the_refusal_comes_before_the_token_and_neither_stands_in_for_the_other(engine):
    async with front_ends(engine, authenticate=authenticate) as served:
        token = {"authorization": GOOD_KEY}
        for client, module, header, restricted, unauthenticated in (
            (served.http, httpclient, KEY, f"403 {HTTP_REFUSAL}'{KEY}'", "401 "),
            (
                served.grpc,
                grpcclient,
                f"triton-grpc-protocol-{KEY}",
                f"StatusCode.UNAVAILABLE {GRPC_REFUSAL}'triton-grpc-protocol-{KEY}'",
                "StatusCode.UNAUTHENTICATED",
            ),
        ):

            async def infer(headers: dict[str, str], client: Any = client, module: Any = module) -> str | None:
                return await refusal_of(CALLS[5][2], client, module, headers)

            assert await infer(token) == restricted  # a valid token, no restricted header
            assert await infer({}) == restricted
            assert (await infer({header: SECRET})).startswith(unauthenticated)  # the header, no token
            bad_token = await infer({header: SECRET, "authorization": "Bearer wrong"})
            assert bad_token.startswith(unauthenticated)
            assert await infer({header: SECRET, **token}) is None
            # an unrestricted category still needs only what it needed: the token
            assert await refusal_of(CALLS[8][2], client, module, token) is None
            assert (await refusal_of(CALLS[8][2], client, module, {})).startswith(unauthenticated)


async def parameters_seen(client: Any, module: Any, headers: dict[str, str], **parameters: Any) -> dict[str, Any]:
    inputs = parameters_inputs(module)
    result = await client.infer("parameters", inputs, headers=dict(headers), parameters=parameters)
    return json.loads(result.as_numpy("PARAMETERS")[0])


async def test_forwarded_headers_reach_the_python_models_parameters_and_credentials_never_do(engine):
    async with front_ends(engine, authenticate=authenticate) as served:
        headers = {
            "X-Fwd-Tenant": "acme",
            "x-fwd-quoted": 'a "quoted" value\\ ',
            "x-other": "not matched",
            "authorization": GOOD_KEY,  # matched by both patterns: never forwarded
            "cookie": "sessionid=secret",
        }
        over_http = await parameters_seen(served.http, httpclient, {**headers, KEY: SECRET}, sent="body")
        assert over_http == {"sent": "body", "x-fwd-tenant": "acme", "x-fwd-quoted": 'a "quoted" value\\ '}
        grpc_headers = {key.lower(): value for key, value in headers.items()} | {f"triton-grpc-protocol-{KEY}": SECRET}
        over_grpc = await parameters_seen(served.grpc, grpcclient, grpc_headers, sent="body")
        assert over_grpc == over_http
        # a header wins over a parameter of the same name, as Triton adds headers after the request's own
        overridden = await parameters_seen(served.http, httpclient, {**headers, KEY: SECRET}, **{"x-fwd-tenant": "b"})
        assert overridden["x-fwd-tenant"] == "acme"


async def test_a_reserved_header_is_refused_as_triton_refuses_it(engine):
    async with front_ends(engine) as served:
        reserved = "is reserved for Triton usage and cannot be forwarded."
        with pytest.raises(InferenceServerException) as refused:
            await parameters_seen(served.http, httpclient, {KEY: SECRET, "priority": "u=1"})
        assert refused.value.status() == "400" and refused.value.message() == f"Header 'priority' {reserved}"
        with pytest.raises(InferenceServerException) as refused:
            await parameters_seen(served.grpc, grpcclient, {f"triton-grpc-protocol-{KEY}": SECRET, "triton_x": "1"})
        assert refused.value.status() == "StatusCode.INVALID_ARGUMENT"
        assert refused.value.message() == f"Header 'triton_x' {reserved}"


async def test_a_stream_is_restricted_and_forwards_its_metadata_to_each_request(engine):
    async with front_ends(engine) as served:

        async def requests() -> AsyncIterator[dict[str, Any]]:
            for _ in range(2):
                yield {"model_name": "parameters", "inputs": parameters_inputs(grpcclient)}

        headers = {f"triton-grpc-protocol-{KEY}": SECRET, "x-fwd-stream": "yes"}
        seen = []
        async for result, error in served.grpc.stream_infer(requests(), headers=headers):
            assert error is None
            seen.append(json.loads(result.as_numpy("PARAMETERS")[0]))
        assert seen == [{"x-fwd-stream": "yes"}] * 2
        with pytest.raises(grpc.aio.AioRpcError) as refused:  # tritonclient's stream hands grpc's error on as is
            async for _ in served.grpc.stream_infer(requests(), headers={"x-fwd-stream": "yes"}):
                pass
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        assert refused.value.details() == f"{GRPC_REFUSAL}'triton-grpc-protocol-{KEY}'"
