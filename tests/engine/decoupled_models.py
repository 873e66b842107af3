"""Decoupled python models in Triton's style (0..N responses per request, sent from the model's own threads), for
the engine, HTTP (generate, generate_stream) and gRPC (ModelStreamInfer) tests."""

from __future__ import annotations

import textwrap
from pathlib import Path

from engine.config.model_config import ModelConfig
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


# A text generator in the shape the OpenAI endpoints expect: it "generates" `echo: <prompt>` a character per
# response, at most max_tokens of them (16 when not given); optional inputs are the ones Triton's vLLM models take.
TEXT_ECHO = textwrap.dedent(
    """
    import threading

    import numpy as np
    import triton_python_backend_utils as pb_utils

    FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


    def value(request, name, default):
        tensor = pb_utils.get_input_tensor_by_name(request, name)
        return default if tensor is None else tensor.as_numpy().reshape(-1)[0]


    class TritonPythonModel:
        def execute(self, requests):
            for request in requests:
                threading.Thread(target=self.generate, args=(request,), daemon=True).start()
            return None

        def generate(self, request):
            sender = request.get_response_sender()
            prompt = value(request, "text_input", b"").decode()
            limit = int(value(request, "max_tokens", 16))
            for character in ("echo: " + prompt)[:limit]:
                if request.is_cancelled():
                    break
                text = np.array([character.encode()], dtype=np.object_)
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("text_output", text)]))
            sender.send(flags=FINAL)
    """
)
TEXT_ECHO_CONFIG = """\
name: "text_echo"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [
  { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "max_tokens" data_type: TYPE_INT32 dims: [ 1 ] optional: true },
  { name: "temperature" data_type: TYPE_FP32 dims: [ 1 ] optional: true },
  { name: "stream" data_type: TYPE_BOOL dims: [ 1 ] optional: true }
]
output [ { name: "text_output" data_type: TYPE_STRING dims: [ -1 ] } ]
parameters { key: "openai_text_input" value { string_value: "text_input" } }
parameters { key: "openai_text_output" value { string_value: "text_output" } }
"""


PLUS_ONE = textwrap.dedent(
    """
    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        def execute(self, requests):
            return [
                pb_utils.InferenceResponse(
                    [pb_utils.Tensor("Y", pb_utils.get_input_tensor_by_name(request, "X").as_numpy() + 1)]
                )
                for request in requests
            ]
    """
)


def ensemble_config(name: str, second: str, second_inputs: str, extra_input: str = "") -> str:
    """repeat's every element through a second model: RESULT and its INDEX per response."""
    return textwrap.dedent(
        f"""\
        name: "{name}"
        platform: "ensemble"
        max_batch_size: 0
        input [ {{ name: "IN" data_type: TYPE_INT32 dims: [ -1 ] }} ]
        {extra_input}
        output [
          {{ name: "RESULT" data_type: TYPE_INT32 dims: [ 1 ] }},
          {{ name: "INDEX" data_type: TYPE_UINT32 dims: [ 1 ] }}
        ]
        ensemble_scheduling {{ step [
          {{ model_name: "repeat" model_version: -1 input_map {{ key: "IN" value: "IN" }}
            output_map {{ key: "OUT" value: "ELEMENT" }} output_map {{ key: "IDX" value: "INDEX" }} }},
          {{ model_name: "{second}" model_version: -1 {second_inputs}
            output_map {{ key: "Y" value: "RESULT" }} }}
        ] }}
        """
    )


def make_decoupled_ensemble(repo: Path, extra_config: str = "") -> Path:
    """`plus_one` and `each_plus_one`, an ensemble of repeat then plus_one (repeat must be in the repository)."""
    config = python_config("plus_one", [("X", "TYPE_INT32", [1])], [("Y", "TYPE_INT32", [1])], max_batch_size=0)
    make_python_model(repo, "plus_one", PLUS_ONE, config, extra_config=extra_config)
    folder = repo / "each_plus_one"
    (folder / "1").mkdir(parents=True)
    (folder / "config.pbtxt").write_text(
        ensemble_config("each_plus_one", "plus_one", 'input_map { key: "X" value: "ELEMENT" }')
    )
    return folder


def repeat_config(name: str) -> ModelConfig:
    """IN [-1] -> OUT [1], IDX [1], no batching (the decoupled policy is written beside it: DECOUPLED)."""
    return python_config(
        name, [("IN", "TYPE_INT32", [-1])], [("OUT", "TYPE_INT32", [1]), ("IDX", "TYPE_UINT32", [1])], 0
    )


def build_decoupled_repository(repo: Path) -> Path:
    """`repeat` (in its stub process), `repeat_in_process`, `raises` and `text_echo`, all decoupled."""
    make_python_model(repo, "repeat", REPEAT, repeat_config("repeat"), extra_config=DECOUPLED)
    in_process = repeat_config("repeat_in_process")
    make_python_model(repo, "repeat_in_process", REPEAT, in_process, extra_config=DECOUPLED + IN_PROCESS)
    make_python_model(repo, "raises", RAISES, repeat_config("raises"), extra_config=DECOUPLED)
    (repo / "text_echo" / "1").mkdir(parents=True)
    (repo / "text_echo" / "config.pbtxt").write_text(TEXT_ECHO_CONFIG)
    (repo / "text_echo" / "1" / "model.py").write_text(TEXT_ECHO)
    return repo
