"""The bench's model builders make valid ONNX and Triton repository folders."""

from __future__ import annotations

import numpy as np
import onnx

from bench.direct import cpu_session
from bench.models import (
    MLP_SMALL,
    SIMPLE,
    build_onnx,
    config_pbtxt,
    sample_inputs,
    uploaded_config_pbtxt,
    write_repository,
)


def test_it_builds_simple_as_the_triton_quickstart_model(tmp_path):
    path = tmp_path / "simple.onnx"
    onnx.save(build_onnx(SIMPLE), path)
    onnx.checker.check_model(str(path))
    inputs = sample_inputs(SIMPLE, 3)
    sum_, diff = cpu_session(path).run(["OUTPUT0", "OUTPUT1"], inputs)
    np.testing.assert_array_equal(sum_, inputs["INPUT0"] + inputs["INPUT1"])
    np.testing.assert_array_equal(diff, inputs["INPUT0"] - inputs["INPUT1"])


def test_it_builds_the_mlp_with_a_dynamic_batch_and_fixed_seeds(tmp_path):
    first, again = build_onnx(MLP_SMALL), build_onnx(MLP_SMALL)
    assert first.SerializeToString() == again.SerializeToString()
    path = tmp_path / "mlp.onnx"
    onnx.save(first, path)
    for batch in (1, 64):
        (out,) = cpu_session(path).run(None, sample_inputs(MLP_SMALL, batch))
        assert out.shape == (batch, 10) and out.dtype == np.float32


def test_it_writes_a_triton_repository_with_the_batcher_on(tmp_path):
    write_repository(tmp_path, ["simple", "mlp_small"])
    config = (tmp_path / "mlp_small" / "config.pbtxt").read_text()
    assert "max_batch_size: 64" in config
    assert "dynamic_batching { max_queue_delay_microseconds:" in config
    assert "kind: KIND_CPU" in config and '"intra_op_thread_count" value: { string_value: "1" }' in config
    assert (tmp_path / "mlp_small" / "1" / "model.onnx").exists() and (
        tmp_path / "mlp_small" / "2" / "model.onnx"
    ).exists()
    assert "max_batch_size: 8" in config_pbtxt(SIMPLE)


def test_it_writes_the_configs_a_user_uploads_untuned_for_the_default_profile(tmp_path):
    write_repository(tmp_path, ["mlp_small"], uploaded=True)
    config = (tmp_path / "mlp_small" / "config.pbtxt").read_text()
    assert config == uploaded_config_pbtxt(MLP_SMALL) and "dynamic_batching { }" in config
    assert not any(word in config for word in ("instance_group", "thread_count", "max_queue_delay"))
