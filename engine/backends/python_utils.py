"""`triton_python_backend_utils` for a user's model.py: Triton's python-backend API, backed by numpy arrays.

The python backend registers this module in sys.modules under that name, so `import triton_python_backend_utils
as pb_utils` in a Triton model.py finds it. It runs in two places: inside a model's stub process (the default,
engine.backends.python_stub) and inside the server for models that opt in to in-process execution. What reaches
outside the model (BLS requests, custom metrics, log lines) goes through the `ModelHost` of the calling model,
which the runner sets around every call into model code.

This module is the API model code sees; its parts live in the python_api_* modules beside it: errors, host,
tensors, requests (and responses), config, metrics (and the logger).
"""

from __future__ import annotations

from engine.backends.python_api_config import (
    ModelConfig,
    get_input_config_by_name,
    get_output_config_by_name,
    triton_string_to_numpy,
    using_decoupled_model_transaction_policy,
)
from engine.backends.python_api_errors import TritonError, TritonModelException
from engine.backends.python_api_host import (
    ModelHost,
    current_host,
    reset_host,
    run_coroutine,
    set_host,
    set_process_host,
)
from engine.backends.python_api_metrics import Logger, LogLevel, Metric, MetricFamily
from engine.backends.python_api_requests import (
    TRITONSERVER_MEMORY_CPU,
    TRITONSERVER_MEMORY_CPU_PINNED,
    TRITONSERVER_MEMORY_GPU,
    TRITONSERVER_REQUEST_FLAG_SEQUENCE_END,
    TRITONSERVER_REQUEST_FLAG_SEQUENCE_START,
    TRITONSERVER_REQUEST_RELEASE_ALL,
    TRITONSERVER_REQUEST_RELEASE_RESCHEDULE,
    TRITONSERVER_RESPONSE_COMPLETE_FINAL,
    InferenceRequest,
    InferenceResponse,
    InferenceResponseSender,
    ResponseIterator,
    get_input_tensor_by_name,
    get_output_tensor_by_name,
)
from engine.backends.python_api_tensors import BF16_AS_NUMPY, Tensor

MODULE_NAME = "triton_python_backend_utils"

__all__ = [
    "BF16_AS_NUMPY",
    "MODULE_NAME",
    "TRITONSERVER_MEMORY_CPU",
    "TRITONSERVER_MEMORY_CPU_PINNED",
    "TRITONSERVER_MEMORY_GPU",
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_END",
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_START",
    "TRITONSERVER_REQUEST_RELEASE_ALL",
    "TRITONSERVER_REQUEST_RELEASE_RESCHEDULE",
    "TRITONSERVER_RESPONSE_COMPLETE_FINAL",
    "InferenceRequest",
    "InferenceResponse",
    "InferenceResponseSender",
    "LogLevel",
    "Logger",
    "Metric",
    "MetricFamily",
    "ModelConfig",
    "ModelHost",
    "ResponseIterator",
    "Tensor",
    "TritonError",
    "TritonModelException",
    "current_host",
    "get_input_config_by_name",
    "get_input_tensor_by_name",
    "get_output_config_by_name",
    "get_output_tensor_by_name",
    "reset_host",
    "run_coroutine",
    "set_host",
    "set_process_host",
    "triton_string_to_numpy",
    "using_decoupled_model_transaction_policy",
]
