"""The gRPC front end in process, driven by tritonclient.grpc.aio and by grpcio's own stubs and clients."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import numpy as np
import pytest
import pytest_asyncio
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from engine.frontend.grpc_server import GrpcFrontEnd
from engine.serving.server import InferenceServer
from engine.settings import EngineSettings, GrpcSettings, SharedMemoryLimits
from tests.engine.frontend.v2_checks import GUARD_INPUT, check_guard_output

pytestmark = pytest.mark.asyncio(loop_scope="module")

A = np.arange(16, dtype=np.int32).reshape(1, 16)
B = np.full((1, 16), 5, dtype=np.int32)


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def front_end(server_repository: Path):
    """An engine over the shared test repository (anyone may load, as Triton) and its gRPC server on a free port."""
    # clients may use shared memory, off by default as in Triton
    settings = EngineSettings(open_repository_control=True, shared_memory=SharedMemoryLimits(allowed=True))
    server = InferenceServer(server_repository, gpu_count=0, settings=settings)
    await server.start()
    grpc_server = GrpcFrontEnd(server, GrpcSettings(port=0, shutdown_grace_seconds=1))
    await grpc_server.start()
    yield grpc_server
    await grpc_server.stop()
    await server.stop()


@pytest_asyncio.fixture(loop_scope="module")
async def client(front_end):
    client = aioclient.InferenceServerClient(f"127.0.0.1:{front_end.port}")
    yield client
    await client.close()


def inputs_of(**arrays: np.ndarray) -> list[grpcclient.InferInput]:
    made = []
    for name, array in arrays.items():
        datatype = "BYTES" if array.dtype == object else grpcclient.np_to_triton_dtype(array.dtype)
        infer_input = grpcclient.InferInput(name, list(array.shape), datatype)
        infer_input.set_data_from_numpy(array)
        made.append(infer_input)
    return made


async def test_it_reports_health_metadata_and_config(client):
    assert await client.is_server_live() and await client.is_server_ready()
    metadata = await client.get_server_metadata()
    assert metadata.name == "infera" and "model_repository" in metadata.extensions
    model = await client.get_model_metadata("simple")
    assert [t.name for t in model.outputs] == ["OUTPUT0", "OUTPUT1"] and list(model.inputs[0].shape) == [-1, 16]
    config = (await client.get_model_config("simple")).config  # a protobuf ModelConfig, as Triton sends
    assert config.max_batch_size == 8 and config.input[0].name == "INPUT0"
    assert await client.is_model_ready("simple") and not await client.is_model_ready("broken")


async def test_it_infers_with_raw_contents_on_every_dtype_of_the_test_models(client):
    result = await client.infer("simple", inputs_of(INPUT0=A, INPUT1=B))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A + B)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), A - B)
    text = np.array([[str(i).encode() for i in range(16)]], dtype=object)
    strings = await client.infer("simple_string", inputs_of(INPUT0=text, INPUT1=text))
    assert strings.as_numpy("OUTPUT0").reshape(-1).tolist() == [str(2 * i).encode() for i in range(16)]
    half = np.array([[1, 2, 3, 4]], dtype=np.float16)
    np.testing.assert_array_equal(
        (await client.infer("fp16_double", inputs_of(INPUT0=half))).as_numpy("OUTPUT0"), half * 2
    )
    guard = await client.infer("guard", inputs_of(INPUT0=GUARD_INPUT))
    check_guard_output(guard.as_numpy("OUTPUT0"))


async def test_it_takes_typed_contents_and_requested_outputs_as_triton_defines_them(front_end):
    async with grpc.aio.insecure_channel(f"127.0.0.1:{front_end.port}") as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        request = service_pb2.ModelInferRequest(model_name="simple", id="typed-1")
        for name, array in (("INPUT0", A), ("INPUT1", B)):
            tensor = request.inputs.add(name=name, datatype="INT32", shape=[1, 16])
            tensor.contents.int_contents.extend(array.reshape(-1).tolist())
        request.outputs.add(name="OUTPUT1")
        response = await stub.ModelInfer(request)
        assert response.id == "typed-1" and [o.name for o in response.outputs] == ["OUTPUT1"]
        np.testing.assert_array_equal(np.frombuffer(response.raw_output_contents[0], dtype=np.int32), (A - B)[0])

        wrong = service_pb2.ModelInferRequest(model_name="simple")
        tensor = wrong.inputs.add(name="INPUT0", datatype="INT32", shape=[1, 16])
        tensor.contents.fp32_contents.extend([0.0] * 16)
        wrong.inputs.add(name="INPUT1", datatype="INT32", shape=[1, 16]).contents.int_contents.extend([0] * 16)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.ModelInfer(wrong)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "carries 'fp32_contents'; it travels in 'int_contents'" in refused.value.details()


async def test_it_answers_each_error_with_tritons_status_code(client):
    cases = [
        (client.infer("nope", inputs_of(INPUT0=A, INPUT1=B)), "StatusCode.INVALID_ARGUMENT", "unknown model"),
        (client.infer("simple", inputs_of(INPUT0=A)), "StatusCode.INVALID_ARGUMENT", "missing required input"),
        (
            client.infer("broken", inputs_of(INPUT0=np.zeros((1, 1), np.float32))),
            "StatusCode.UNAVAILABLE",
            "initialize",
        ),
        (
            client.infer("failing", inputs_of(INPUT0=np.zeros((1, 1), np.float32))),
            "StatusCode.INTERNAL",
            "deliberate failure",
        ),
        (client.register_cuda_shared_memory("r", b"aGFuZGxl", 0, 64), "StatusCode.UNIMPLEMENTED", "has no GPU"),
        (client.register_system_shared_memory("r", "/nowhere", 64), "StatusCode.INVALID_ARGUMENT", "Unable to open"),
    ]
    for call, status, text in cases:
        with pytest.raises(InferenceServerException) as refused:
            await call
        assert refused.value.status() == status and text in refused.value.message()
    assert (await client.infer("simple", inputs_of(INPUT0=A, INPUT1=B))).as_numpy("OUTPUT0") is not None


async def test_a_stream_interleaves_many_requests_and_reports_an_error_without_ending(client):
    async def requests():
        for i in range(10):
            if i == 5:
                yield {"model_name": "nope", "inputs": inputs_of(INPUT0=A, INPUT1=B), "request_id": "bad"}
            else:
                yield {"model_name": "simple", "inputs": inputs_of(INPUT0=A * i, INPUT1=B), "request_id": str(i)}

    answers: dict[str, np.ndarray] = {}
    errors = []
    async for result, error in client.stream_infer(requests()):
        if error is not None:
            errors.append(error.message())
        else:
            answers[result.get_response().id] = result.as_numpy("OUTPUT0")
    assert sorted(answers) == sorted(str(i) for i in range(10) if i != 5)
    for key, output in answers.items():
        np.testing.assert_array_equal(output, A * int(key) + B)
    assert len(errors) == 1 and "unknown model" in errors[0]


async def test_statistics_count_what_was_sent(client):
    before = (await client.get_inference_statistics("simple")).model_stats[0].inference_stats.success.count
    await asyncio.gather(*(client.infer("simple", inputs_of(INPUT0=A, INPUT1=B)) for _ in range(7)))
    stats = (await client.get_inference_statistics("simple")).model_stats[0]
    assert stats.inference_stats.success.count == before + 7 and stats.name == "simple"


async def test_repository_index_load_with_a_config_override_and_unload(client):
    index = {m.name: m for m in (await client.get_model_repository_index()).models}
    assert index["simple"].state == "READY" and index["broken"].state == "UNAVAILABLE"
    await client.load_model("resizable", config='{"max_batch_size": 2}')
    assert (await client.get_model_config("resizable")).config.max_batch_size == 2
    await client.unload_model("resizable")
    assert not await client.is_model_ready("resizable")
    await client.load_model("resizable")
    assert (await client.get_model_config("resizable")).config.max_batch_size == 8


async def test_log_and_trace_settings_round_trip(client, front_end, tmp_path):
    import logging

    settings = await client.update_log_settings({"log_verbose_level": 1})
    assert settings.settings["log_verbose_level"].uint32_param == 1
    assert logging.getLogger("engine").getEffectiveLevel() == logging.DEBUG
    await client.update_log_settings({"log_verbose_level": 0})
    assert logging.getLogger("engine").getEffectiveLevel() == logging.INFO
    import json

    from engine.monitoring.tracing import Tracer

    assert list((await client.get_trace_settings()).settings["trace_level"].value) == ["OFF"]
    front_end.server.tracer = Tracer(tmp_path)
    settings = {"trace_level": ["TIMESTAMPS"], "trace_rate": "1", "trace_file": "grpc.json"}
    await client.update_trace_settings(model_name="simple", settings=settings)
    for _ in range(3):
        await client.infer("simple", inputs_of(INPUT0=A, INPUT1=B))
    traces = [r for r in json.loads((tmp_path / "grpc.json").read_text()) if "timestamps" in r]
    assert len(traces) == 3
    await client.update_trace_settings(model_name="simple", settings={"trace_level": ["OFF"]})


async def test_grpc_health_answers_for_the_server_and_each_model(front_end):
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    async with grpc.aio.insecure_channel(f"127.0.0.1:{front_end.port}") as channel:
        health = health_pb2_grpc.HealthStub(channel)
        serving = health_pb2.HealthCheckResponse.SERVING
        assert (await health.Check(health_pb2.HealthCheckRequest(service=""))).status == serving
        assert (await health.Check(health_pb2.HealthCheckRequest(service="simple"))).status == serving
        not_serving = health_pb2.HealthCheckResponse.NOT_SERVING
        assert (await health.Check(health_pb2.HealthCheckRequest(service="broken"))).status == not_serving
        with pytest.raises(grpc.aio.AioRpcError) as unknown:
            await health.Check(health_pb2.HealthCheckRequest(service="nope"))
        assert unknown.value.code() == grpc.StatusCode.NOT_FOUND


async def test_reflection_describes_the_service(front_end):
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    async with grpc.aio.insecure_channel(f"127.0.0.1:{front_end.port}") as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)

        async def ask():
            yield reflection_pb2.ServerReflectionRequest(list_services="")
            yield reflection_pb2.ServerReflectionRequest(file_containing_symbol="inference.GRPCInferenceService")

        answers = [answer async for answer in stub.ServerReflectionInfo(ask())]
    services = {service.name for service in answers[0].list_services_response.service}
    assert {"inference.GRPCInferenceService", "grpc.health.v1.Health"} <= services
    assert answers[1].file_descriptor_response.file_descriptor_proto


async def test_gzip_requests_are_understood(front_end):
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{front_end.port}")
    try:
        result = await asyncio.to_thread(
            client.infer, "simple", inputs_of(INPUT0=A, INPUT1=B), compression_algorithm="gzip"
        )
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A + B)
    finally:
        client.close()


async def test_the_shared_memory_flow_over_grpc(client):
    import tritonclient.utils.shared_memory as shm

    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    handle = shm.create_shared_memory_region("grpc_io", "/infera_test_grpc_io", 256)
    try:
        shm.set_shared_memory_region(handle, [a])
        shm.set_shared_memory_region(handle, [B], offset=64)
        await client.register_system_shared_memory("grpc_io", "/infera_test_grpc_io", 256)
        status = await client.get_system_shared_memory_status()
        assert "grpc_io" in status.regions and status.regions["grpc_io"].byte_size == 256
        inputs = [grpcclient.InferInput("INPUT0", [1, 16], "INT32"), grpcclient.InferInput("INPUT1", [1, 16], "INT32")]
        inputs[0].set_shared_memory("grpc_io", 64)
        inputs[1].set_shared_memory("grpc_io", 64, offset=64)
        output = grpcclient.InferRequestedOutput("OUTPUT0")
        output.set_shared_memory("grpc_io", 64, offset=128)
        result = await client.infer("simple", inputs, outputs=[output])
        placed = result.get_output("OUTPUT0").parameters  # the answer is in shared memory, not in the response
        assert placed["shared_memory_byte_size"].int64_param == 64
        np.testing.assert_array_equal(shm.get_contents_as_numpy(handle, np.int32, [1, 16], offset=128), a + B)
        await client.unregister_system_shared_memory("grpc_io")
        assert not (await client.get_system_shared_memory_status()).regions
    finally:
        shm.destroy_shared_memory_region(handle)


async def test_it_accepts_calls_of_many_connections_on_every_acceptor_and_stops_them_all(front_end):
    """Several grpc.aio servers share the port (ACCEPTORS) so calls reach the loop several at a time: each connection
    lands on one of them, every one answers as the front end, and stop() closes all of them."""
    from engine.frontend import grpc_server

    extra = GrpcFrontEnd(front_end.server, GrpcSettings(port=0, shutdown_grace_seconds=1))
    port = await extra.start()
    assert grpc_server.ACCEPTORS > 1
    clients = [aioclient.InferenceServerClient(f"127.0.0.1:{port}") for _ in range(8 * grpc_server.ACCEPTORS)]
    try:
        rows = [np.full((1, 16), i, dtype=np.int32) for i in range(len(clients))]
        results = await asyncio.gather(
            *(c.infer("simple", inputs_of(INPUT0=row, INPUT1=B)) for c, row in zip(clients, rows, strict=True))
        )
        for row, result in zip(rows, results, strict=True):
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), row + B)
    finally:
        await asyncio.gather(*(c.close() for c in clients))
        await extra.stop()
    late = aioclient.InferenceServerClient(f"127.0.0.1:{port}")
    try:
        with pytest.raises(InferenceServerException, match="UNAVAILABLE|failed to connect|Connection refused"):
            await late.is_server_live()
    finally:
        await late.close()
