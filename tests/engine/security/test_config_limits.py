"""A small config cannot ask for unbounded work: limits on warm-ups, threads, instances and dims, named by field."""

from __future__ import annotations

import asyncio
import re
import textwrap

import pytest

from engine.config.model_config import InstanceGroup, ModelWarmup, WarmupInput
from engine.errors import InvalidArgument, LoadError
from engine.serving.admission import check_limits
from engine.serving.server import InferenceServer
from engine.settings import ConfigLimits
from tests.engine.model_factory import make_python_model, python_config, simple_config
from tests.engine.security import warmup_gate

LIMITS = ConfigLimits()


def warmup(count: int = 1, dims: list[int] | None = None, batch: int = 1) -> ModelWarmup:
    return ModelWarmup("w", batch, {"INPUT0": WarmupInput("TYPE_INT32", dims or [16], zero_data=True)}, count)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda c: c.model_warmup.append(warmup(count=10**9)), "model_warmup 'w': count 1000000000 is over"),
        (lambda c: c.model_warmup.append(warmup(dims=[16000, 16000])), "model_warmup 'w': its inputs take 977 MB"),
        (lambda c: c.parameters.update(intra_op_thread_count="1500"), "'intra_op_thread_count' asks for 1500"),
        (lambda c: c.instance_group.append(InstanceGroup(count=1000)), "asks for 1000 instances"),
        (lambda c: setattr(c.input[0], "dims", [2**40]), "input 'INPUT0': dims [1099511627776] has a dimension"),
    ],
)
def test_it_refuses_a_config_past_a_limit_naming_the_field(change, message):
    config = simple_config()
    change(config)
    with pytest.raises(InvalidArgument, match=re.escape(message)):
        check_limits(config, LIMITS)


def test_it_keeps_ordinary_configs(tmp_path):
    config = simple_config()
    config.model_warmup.append(warmup(count=100, batch=8))
    config.instance_group.append(InstanceGroup(count=4))
    check_limits(config, LIMITS)


async def test_the_engine_refuses_such_a_config_before_loading(tmp_path):
    from tests.engine.model_factory import make_simple_onnx

    make_simple_onnx(
        tmp_path,
        name="simple",
        extra_config='parameters { key: "intra_op_thread_count" value: { string_value: "1500" } }\n',
    )
    server = InferenceServer(tmp_path, gpu_count=0)
    with pytest.raises(LoadError, match="over the limit of 256 \\(INFERA_MAX_THREADS\\)"):
        await server.load_model("simple")
    await server.stop()


SLOW_WARMUP = textwrap.dedent(
    """
    import numpy as np
    import triton_python_backend_utils as pb_utils

    from tests.engine.security import warmup_gate


    class TritonPythonModel:
        def execute(self, requests):
            warmup_gate.calls += 1
            warmup_gate.entered.set()
            warmup_gate.release.wait(30)
            out = pb_utils.Tensor("OUTPUT0", np.zeros((1, 1), dtype=np.float32))
            return [pb_utils.InferenceResponse(output_tensors=[out]) for _ in requests]
    """
)


async def test_an_unload_stops_a_long_warm_up(tmp_path):
    warmup_gate.reset()
    config = python_config("slow", [("INPUT0", "TYPE_FP32", [1])], [("OUTPUT0", "TYPE_FP32", [1])])
    many_warmups = (
        'model_warmup { name: "w" batch_size: 1 count: 1000 '
        'inputs { key: "INPUT0" value: { data_type: TYPE_FP32 dims: [1] zero_data: true } } }\n'
        'parameters { key: "EXECUTION_MODE" value { string_value: "in_process" } }\n'  # the gate is in this process
    )
    make_python_model(tmp_path, "slow", SLOW_WARMUP, config, extra_config=many_warmups)
    server = InferenceServer(tmp_path, gpu_count=0)
    try:
        load = asyncio.create_task(server.load_model("slow"))
        assert await asyncio.to_thread(warmup_gate.entered.wait, 30)
        unload = asyncio.create_task(server.unload_model("slow"))
        await asyncio.sleep(0)  # one turn of the loop: the unload marks the loading version cancelled at once
        assert all(version.cancelled for version in server.manager.models["slow"].loading)
        warmup_gate.release.set()
        with pytest.raises(LoadError, match="unloaded while this version was loading"):
            await load
        await unload
        assert warmup_gate.calls == 1 and not server.model_ready("slow")
    finally:
        warmup_gate.release.set()
        await server.stop()
