"""model.py files in Triton's style for the python-backend API tests, and the repository that holds them."""

from __future__ import annotations

import textwrap
from pathlib import Path

from tests.engine.decoupled_models import DECOUPLED, REPEAT, repeat_config
from tests.engine.model_factory import make_python_model, make_simple_onnx, python_config

IN_PROCESS = 'parameters { key: "EXECUTION_MODE" value { string_value: "in_process" } }\n'
INT32_PAIR = [("INPUT0", "TYPE_INT32", [16]), ("INPUT1", "TYPE_INT32", [16])]
INT32_SUMS = [("OUTPUT0", "TYPE_INT32", [16]), ("OUTPUT1", "TYPE_INT32", [16])]

ADD_SUB = textwrap.dedent(
    """
    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        def execute(self, requests):
            responses = []
            for request in requests:
                a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
                b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
                outputs = [pb_utils.Tensor("OUTPUT0", a + b), pb_utils.Tensor("OUTPUT1", a - b)]
                responses.append(pb_utils.InferenceResponse(outputs))
            return responses
    """
)

# BLS from a plain execute: the target model comes from the request's "target" parameter
BLS_SYNC = textwrap.dedent(
    """
    import json

    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        def execute(self, requests):
            responses = []
            for request in requests:
                parameters = json.loads(request.parameters())
                target = parameters.get("target", "simple")
                call = pb_utils.InferenceRequest(
                    model_name=target,
                    inputs=[
                        pb_utils.get_input_tensor_by_name(request, "INPUT0"),
                        pb_utils.get_input_tensor_by_name(request, "INPUT1"),
                    ],
                    requested_output_names=["OUTPUT0", "OUTPUT1"],
                )
                if parameters.get("decoupled"):
                    answers = list(call.exec(decoupled=True))
                    answer = answers[-1]
                else:
                    answer = call.exec()
                if answer.has_error():
                    responses.append(pb_utils.InferenceResponse(error=answer.error()))
                    continue
                responses.append(
                    pb_utils.InferenceResponse(
                        [
                            pb_utils.get_output_tensor_by_name(answer, "OUTPUT0"),
                            pb_utils.get_output_tensor_by_name(answer, "OUTPUT1"),
                        ]
                    )
                )
            return responses
    """
)

# async execute: both targets called at once for every request, their sums added
BLS_ASYNC = textwrap.dedent(
    """
    import asyncio

    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        async def execute(self, requests):
            calls = []
            for request in requests:
                inputs = [
                    pb_utils.get_input_tensor_by_name(request, "INPUT0"),
                    pb_utils.get_input_tensor_by_name(request, "INPUT1"),
                ]
                for target in ("simple", "add_sub"):
                    call = pb_utils.InferenceRequest(
                        model_name=target, inputs=inputs, requested_output_names=["OUTPUT0", "OUTPUT1"]
                    )
                    calls.append(call.async_exec())
            answers = await asyncio.gather(*calls)
            responses = []
            for index in range(len(requests)):
                onnx, python = answers[2 * index], answers[2 * index + 1]
                for answer in (onnx, python):
                    if answer.has_error():
                        raise pb_utils.TritonModelException(answer.error().message())
                total = [
                    pb_utils.get_output_tensor_by_name(onnx, name).as_numpy()
                    + pb_utils.get_output_tensor_by_name(python, name).as_numpy()
                    for name in ("OUTPUT0", "OUTPUT1")
                ]
                responses.append(
                    pb_utils.InferenceResponse(
                        [pb_utils.Tensor("OUTPUT0", total[0]), pb_utils.Tensor("OUTPUT1", total[1])]
                    )
                )
            return responses
    """
)

# async execute under dynamic batching: each response says how many requests its execute call received
ASYNC_BATCH = textwrap.dedent(
    """
    import asyncio

    import numpy as np
    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        async def execute(self, requests):
            await asyncio.sleep(0)
            count = np.array([[len(requests)]], dtype=np.int32)
            return [pb_utils.InferenceResponse([pb_utils.Tensor("COUNT", count)]) for _ in requests]
    """
)

# no config file: the model says what it takes
AUTO_COMPLETE = textwrap.dedent(
    """
    import json

    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        @staticmethod
        def auto_complete_config(auto_complete_model_config):
            auto_complete_model_config.set_max_batch_size(4)
            auto_complete_model_config.add_input({"name": "X", "data_type": "TYPE_FP32", "dims": [3]})
            auto_complete_model_config.add_output({"name": "Y", "data_type": "TYPE_FP32", "dims": [3]})
            auto_complete_model_config.set_dynamic_batching()
            return auto_complete_model_config

        def initialize(self, args):
            self.config = json.loads(args["model_config"])
            self.scale = float(len(self.config["input"]) + 1)

        def execute(self, requests):
            responses = []
            for request in requests:
                x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
                responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x * self.scale)]))
            return responses
    """
)

# custom metrics and log lines
METRICS = textwrap.dedent(
    """
    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        def initialize(self, args):
            self.requests = pb_utils.MetricFamily(
                name="requests_seen", description="Requests this model executed", kind=pb_utils.MetricFamily.COUNTER
            )
            self.last = pb_utils.MetricFamily(
                name="last_input_sum", description="Sum of the last input", kind=pb_utils.MetricFamily.GAUGE
            )
            self.sizes = pb_utils.MetricFamily(
                name="input_sum", description="Input sums", kind=pb_utils.MetricFamily.HISTOGRAM
            )
            labels = {"model": args["model_name"], "instance": args["model_instance_name"]}
            self.seen = self.requests.Metric(labels=labels)
            self.gauge = self.last.Metric(labels=labels)
            self.histogram = self.sizes.Metric(labels=labels, buckets=[10.0, 100.0])
            pb_utils.Logger.log_info("metrics model initialized")

        def execute(self, requests):
            responses = []
            for request in requests:
                x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
                self.seen.increment(1)
                self.gauge.set(float(x.sum()))
                self.histogram.observe(float(x.sum()))
                out = x * 0 + self.seen.value()
                responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", out)]))
            return responses
    """
)

# BF16 in and out through DLPack and torch
BF16_DOUBLE = textwrap.dedent(
    """
    import torch
    import triton_python_backend_utils as pb_utils
    from torch.utils.dlpack import from_dlpack, to_dlpack


    class TritonPythonModel:
        def execute(self, requests):
            responses = []
            for request in requests:
                x = from_dlpack(pb_utils.get_input_tensor_by_name(request, "X").to_dlpack())
                assert x.dtype == torch.bfloat16, x.dtype
                y = pb_utils.Tensor.from_dlpack("Y", to_dlpack(x * 2))
                responses.append(pb_utils.InferenceResponse([y]))
            return responses
    """
)

# what initialize and each request were given, as JSON text
ECHO_ARGS = textwrap.dedent(
    """
    import json

    import numpy as np
    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        def initialize(self, args):
            self.args = args

        def execute(self, requests):
            responses = []
            for request in requests:
                seen = {
                    "args": self.args,
                    "parameters": json.loads(request.parameters()),
                    "request_id": request.request_id(),
                    "requested": request.requested_output_names(),
                }
                text = np.array([[json.dumps(seen).encode()]], dtype=object)
                responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("TEXT", text)]))
            return responses
    """
)

# a model whose stub dies on 13, and says which process answered otherwise
CRASHER = textwrap.dedent(
    """
    import os
    import time

    import numpy as np
    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        def execute(self, requests):
            responses = []
            for request in requests:
                x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
                if (x == 13).any():
                    os._exit(1)
                if (x == 7).any():
                    time.sleep(600)
                pid = np.full(x.shape, os.getpid(), dtype=np.int64)
                responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("PID", pid)]))
            return responses
    """
)


# BLS into a decoupled model (`repeat`: a response per element of IN): the request parameter "mode" says how.
# "collect": exec(decoupled=True), every response read; "async": the same through async_exec; "cancel": the first
# response, then cancel() (repeat, asked to wait for it, answers -1 once it sees it); "plain": exec() without
# decoupled, which the server refuses. OUT: the OUT of every response that had one; COUNT: responses read;
# EMPTY_LAST: 1 when the last one carried the final flag alone.
BLS_DECOUPLED = textwrap.dedent(
    """
    import json

    import numpy as np
    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        async def execute(self, requests):
            return [await self.answer(request) for request in requests]

        async def answer(self, request):
            mode = json.loads(request.parameters()).get("mode", "collect")
            parameters = {"until_cancelled": True} if mode == "cancel" else {}
            call = pb_utils.InferenceRequest(
                model_name="repeat",
                inputs=[pb_utils.get_input_tensor_by_name(request, "IN")],
                requested_output_names=["OUT"],
                parameters=parameters,
            )
            if mode == "plain":
                answer = call.exec()
                return pb_utils.InferenceResponse(error=answer.error()) if answer.has_error() else answer
            responses = await call.async_exec(decoupled=True) if mode == "async" else call.exec(decoupled=True)
            read = []
            for response in responses:
                read.append(response)
                if mode == "cancel" and len(read) == 1:
                    responses.cancel()
                if response.has_error():
                    return pb_utils.InferenceResponse(error=response.error())
            values = [
                int(pb_utils.get_output_tensor_by_name(response, "OUT").as_numpy()[0])
                for response in read
                if response.output_tensors()
            ]
            return pb_utils.InferenceResponse(
                [
                    pb_utils.Tensor("OUT", np.array(values, dtype=np.int32)),
                    pb_utils.Tensor("COUNT", np.array([len(read)], dtype=np.int32)),
                    pb_utils.Tensor("EMPTY_LAST", np.array([int(not read[-1].output_tensors())], dtype=np.int32)),
                ]
            )
    """
)
BLS_DECOUPLED_OUTPUTS = [("OUT", "TYPE_INT32", [-1]), ("COUNT", "TYPE_INT32", [1]), ("EMPTY_LAST", "TYPE_INT32", [1])]


def build_python_repository(repo: Path) -> Path:
    """Every model the python-backend API tests call."""
    make_simple_onnx(repo, name="simple")
    make_python_model(repo, "add_sub", ADD_SUB, python_config("add_sub", INT32_PAIR, INT32_SUMS))
    make_python_model(repo, "bls_sync", BLS_SYNC, python_config("bls_sync", INT32_PAIR, INT32_SUMS))
    make_python_model(
        repo,
        "bls_in_process",
        BLS_SYNC,
        python_config("bls_in_process", INT32_PAIR, INT32_SUMS),
        extra_config=IN_PROCESS,
    )
    make_python_model(repo, "bls_async", BLS_ASYNC, python_config("bls_async", INT32_PAIR, INT32_SUMS))
    make_python_model(
        repo,
        "async_batch",
        ASYNC_BATCH,
        python_config("async_batch", [("X", "TYPE_INT32", [1])], [("COUNT", "TYPE_INT32", [1])], max_batch_size=4),
        extra_config="dynamic_batching { max_queue_delay_microseconds: 5000000 }\n",
    )
    make_python_model(repo, "auto_complete", AUTO_COMPLETE, write_config=False)
    fp32 = [("X", "TYPE_FP32", [4])], [("Y", "TYPE_FP32", [4])]
    make_python_model(repo, "metrics", METRICS, python_config("metrics", *fp32))
    bf16 = [("X", "TYPE_BF16", [4])], [("Y", "TYPE_BF16", [4])]
    make_python_model(repo, "bf16_double", BF16_DOUBLE, python_config("bf16_double", *bf16))
    text = [("X", "TYPE_FP32", [1])], [("TEXT", "TYPE_STRING", [1])]
    make_python_model(repo, "echo_args", ECHO_ARGS, python_config("echo_args", *text))
    crash = [("X", "TYPE_INT32", [1])], [("PID", "TYPE_INT64", [1])]
    make_python_model(repo, "crasher", CRASHER, python_config("crasher", *crash))
    make_python_model(repo, "repeat", REPEAT, repeat_config("repeat"), extra_config=DECOUPLED)
    for name, extra in (("bls_decoupled", ""), ("bls_decoupled_in_process", IN_PROCESS)):
        config = python_config(name, [("IN", "TYPE_INT32", [-1])], BLS_DECOUPLED_OUTPUTS, max_batch_size=0)
        make_python_model(repo, name, BLS_DECOUPLED, config, extra_config=extra)
    return repo
