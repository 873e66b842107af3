"""Model configs and request builders shared by the codec tests."""

from __future__ import annotations

import pytest

from engine.config.model_config import ModelConfig, TensorConfig


@pytest.fixture
def simple_config() -> ModelConfig:
    """Triton's `simple` model: two INT32 [16] inputs, two outputs, batching up to 8."""
    return ModelConfig(
        name="simple",
        platform="onnxruntime_onnx",
        max_batch_size=8,
        input=[TensorConfig("INPUT0", "TYPE_INT32", [16]), TensorConfig("INPUT1", "TYPE_INT32", [16])],
        output=[TensorConfig("OUTPUT0", "TYPE_INT32", [16]), TensorConfig("OUTPUT1", "TYPE_INT32", [16])],
    )


@pytest.fixture
def mixed_config() -> ModelConfig:
    """A non-batching model with one input of each kind the codec treats differently."""
    return ModelConfig(
        name="mixed",
        input=[
            TensorConfig("F32", "TYPE_FP32", [2, -1]),
            TensorConfig("F16", "TYPE_FP16", [3]),
            TensorConfig("TEXT", "TYPE_STRING", [-1]),
            TensorConfig("FLAG", "TYPE_BOOL", [2]),
            TensorConfig("SMALL", "TYPE_UINT8", [2], optional=True),
            TensorConfig("FLAT", "TYPE_FP32", [4], reshape=[2, 2], optional=True),
        ],
        output=[TensorConfig("OUT", "TYPE_FP32", [-1])],
    )
