"""Decoupled python models in Triton's style (0..N responses per request, sent from the model's own threads), for
the engine, HTTP (generate, generate_stream) and gRPC (ModelStreamInfer) tests."""

from __future__ import annotations

import textwrap
from pathlib import Path

from engine.config import ModelConfig
from tests.engine.model_factory import make_python_model, python_config

IN_PROCESS = 'parameters { key: "EXECUTION_MODE" value { string_value: "in_process" } }\n'
DECOUPLED = "model_transaction_policy { decoupled: true }\n"

# Each element of IN comes back as its own response (OUT, with its index IDX), from a thread the model starts,
# after execute returned. Request parameters: "fail_at" (an error response ends the stream at that index),
# "until_cancelled" (after the elements, wait for the client to go away, then send "cancelled": OUT = -1).
REPEAT = textwrap.dedent(
    """
    import json
    import threading

    import numpy as np
    import triton_python_backend_utils as pb_utils

    FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


    class TritonPythonModel:
        def initialize(self, args):
            self.decoupled = pb_utils.using_decoupled_model_transaction_policy(json.loads(args["model_config"]))

        def execute(self, requests):
            for request in requests:
                threading.Thread(target=self.respond, args=(request,), daemon=True).start()
            return None

        def respond(self, request):
            sender = request.get_response_sender()
            values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy().reshape(-1)
            parameters = json.loads(request.parameters())
            fail_at = parameters.get("fail_at", -1)
            for index, value in enumerate(values):
                if index == fail_at:
                    error = pb_utils.TritonError(f"element {index} failed on purpose")
                    sender.send(pb_utils.InferenceResponse(error=error), flags=FINAL)
                    return
                outputs = [
                    pb_utils.Tensor("OUT", np.array([value], dtype=np.int32)),
                    pb_utils.Tensor("IDX", np.array([index], dtype=np.uint32)),
                ]
                sender.send(pb_utils.InferenceResponse(outputs))
            if parameters.get("until_cancelled"):
                while not request.is_cancelled():
                    threading.Event().wait(0.005)  # the model polls, as Triton's models do
                seen = [pb_utils.Tensor("OUT", np.array([-1], dtype=np.int32))]
                sender.send(pb_utils.InferenceResponse(seen), flags=FINAL)
                return
            sender.send(flags=FINAL)
    """
)

# Decoupled, but execute raises: every request gets the error as its one and last response
RAISES = textwrap.dedent(
    """
    class TritonPythonModel:
        def execute(self, requests):
            raise RuntimeError("this decoupled model cannot run")
    """
)


def repeat_config(name: str) -> ModelConfig:
    """IN [-1] -> OUT [1], IDX [1], no batching (the decoupled policy is written beside it: DECOUPLED)."""
    return python_config(
        name, [("IN", "TYPE_INT32", [-1])], [("OUT", "TYPE_INT32", [1]), ("IDX", "TYPE_UINT32", [1])], 0
    )


def build_decoupled_repository(repo: Path) -> Path:
    """`repeat` (in its stub process), `repeat_in_process`, and `raises`, all decoupled."""
    make_python_model(repo, "repeat", REPEAT, repeat_config("repeat"), extra_config=DECOUPLED)
    in_process = repeat_config("repeat_in_process")
    make_python_model(repo, "repeat_in_process", REPEAT, in_process, extra_config=DECOUPLED + IN_PROCESS)
    make_python_model(repo, "raises", RAISES, repeat_config("raises"), extra_config=DECOUPLED)
    return repo
