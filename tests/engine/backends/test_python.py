"""The python backend: real model.py files written by the test, loaded and run in process."""

from __future__ import annotations

import json
import sys
import textwrap

import numpy as np
import pytest

from engine.backends import Device, get_backend
from engine.backends.python import PythonBackend
from engine.config import ModelConfig
from engine.errors import BackendError, LoadError
from tests.engine.model_factory import (
    make_python_model,
    make_simple_string,
    python_config,
    simple_string_config,
)

FP32_ADD_ONE = textwrap.dedent(
    """
    import numpy as np
    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        def execute(self, requests):
            responses = []
            for request in requests:
                x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
                responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", (x + 1).astype(np.float32))]))
            return responses
    """
)


def fp32_config(name: str) -> ModelConfig:
    return python_config(name, [("X", "TYPE_FP32", [4])], [("Y", "TYPE_FP32", [4])])


def loaded(model_dir, config: ModelConfig, device: Device | None = None) -> PythonBackend:
    backend = PythonBackend(config, model_dir / "1", device or Device())
    backend.load()
    return backend


def run(backend: PythonBackend, requests: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
    return backend.split(backend.execute(backend.prepare(requests)), [len(next(iter(r.values()))) for r in requests])


def numbers(values) -> np.ndarray:
    return np.array([str(v).encode() for v in values], dtype=object).reshape(1, -1)


def test_it_is_the_registered_python_backend():
    assert get_backend("python") is PythonBackend


def test_it_round_trips_bytes_as_decimal_strings(tmp_path):
    backend = loaded(make_simple_string(tmp_path), simple_string_config())
    requests = [{"INPUT0": numbers(range(i, i + 16)), "INPUT1": numbers([i] * 16)} for i in (1, 40)]
    results = run(backend, requests)
    for i, result in zip((1, 40), results, strict=True):
        assert result["OUTPUT0"].dtype == object
        assert result["OUTPUT0"].tolist() == numbers(range(2 * i, 2 * i + 16)).tolist()
        assert result["OUTPUT1"].tolist() == numbers(range(16)).tolist()


def test_it_gives_each_request_its_own_outputs(tmp_path):
    backend = loaded(
        make_python_model(tmp_path, "add_one", FP32_ADD_ONE, fp32_config("add_one")), fp32_config("add_one")
    )
    requests = [{"X": np.full((size, 4), size, np.float32)} for size in (1, 3)]
    results = run(backend, requests)
    assert [r["Y"].shape for r in results] == [(1, 4), (3, 4)]
    np.testing.assert_array_equal(results[1]["Y"], np.full((3, 4), 4, np.float32))


def test_it_passes_tritons_initialize_args(tmp_path):
    source = textwrap.dedent(
        """
        import json
        import triton_python_backend_utils as pb_utils

        SEEN = {}


        class TritonPythonModel:
            def initialize(self, args):
                SEEN.update(args)
                config = json.loads(args["model_config"])
                SEEN["output_type"] = pb_utils.get_output_config_by_name(config, "Y")["data_type"]
                SEEN["numpy_type"] = pb_utils.triton_string_to_numpy(SEEN["output_type"])

            def execute(self, requests):
                return [pb_utils.InferenceResponse([]) for _ in requests]
        """
    )
    backend = loaded(make_python_model(tmp_path, "args", source, fp32_config("args")), fp32_config("args"))
    seen = backend.module.SEEN
    assert json.loads(seen["model_config"])["name"] == "args"
    assert (seen["model_name"], seen["model_version"], seen["model_instance_kind"]) == ("args", "1", "CPU")
    assert seen["model_instance_device_id"] == "0"
    assert seen["model_repository"] == str(tmp_path / "args")
    assert (seen["output_type"], seen["numpy_type"]) == ("TYPE_FP32", np.float32)


def test_it_shows_requests_their_inputs_and_requested_outputs(tmp_path):
    source = textwrap.dedent(
        """
        import numpy as np
        import triton_python_backend_utils as pb_utils


        class TritonPythonModel:
            def execute(self, requests):
                responses = []
                for request in requests:
                    inputs = ",".join(t.name() for t in request.inputs())
                    names = inputs + "|" + ",".join(request.requested_output_names())
                    out = np.array([[names.encode()] * 16], dtype=object)
                    responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", out)]))
                return responses
        """
    )
    backend = loaded(make_python_model(tmp_path, "names", source), simple_string_config("names"))
    [result] = run(backend, [{"INPUT0": numbers(range(16)), "INPUT1": numbers(range(16))}])
    assert result["OUTPUT0"][0, 0] == b"INPUT0,INPUT1|OUTPUT0,OUTPUT1"


def test_it_turns_str_outputs_into_bytes(tmp_path):
    source = textwrap.dedent(
        """
        import numpy as np
        import triton_python_backend_utils as pb_utils


        class TritonPythonModel:
            def execute(self, requests):
                out = np.array([["é"] * 16])
                return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", out)]) for _ in requests]
        """
    )
    backend = loaded(make_python_model(tmp_path, "text", source), simple_string_config("text"))
    [result] = run(backend, [{"INPUT0": numbers(range(16)), "INPUT1": numbers(range(16))}])
    assert result["OUTPUT0"].dtype == object and result["OUTPUT0"][0, 0] == "é".encode()


def test_it_turns_an_exception_in_execute_into_a_backend_error(tmp_path):
    source = "class TritonPythonModel:\n    def execute(self, requests):\n        raise ValueError('bad numbers')\n"
    backend = loaded(make_python_model(tmp_path, "raises", source), simple_string_config("raises"))
    with pytest.raises(BackendError, match="model 'raises' raised ValueError: bad numbers"):
        run(backend, [{"INPUT0": numbers(range(16)), "INPUT1": numbers(range(16))}])


def test_it_fails_the_batch_when_a_response_carries_an_error(tmp_path):
    source = textwrap.dedent(
        """
        import triton_python_backend_utils as pb_utils


        class TritonPythonModel:
            def execute(self, requests):
                error = pb_utils.TritonError("INPUT0 must be positive")
                return [pb_utils.InferenceResponse(error=error) for _ in requests]
        """
    )
    backend = loaded(make_python_model(tmp_path, "refuses", source), simple_string_config("refuses"))
    with pytest.raises(BackendError, match="model 'refuses' failed: INPUT0 must be positive"):
        run(backend, [{"INPUT0": numbers(range(16)), "INPUT1": numbers(range(16))}])


def test_it_insists_on_one_response_per_request(tmp_path):
    source = "class TritonPythonModel:\n    def execute(self, requests):\n        return []\n"
    backend = loaded(make_python_model(tmp_path, "none", source), simple_string_config("none"))
    with pytest.raises(BackendError, match=r"must return one response per request \(1\), got 0"):
        run(backend, [{"INPUT0": numbers(range(16)), "INPUT1": numbers(range(16))}])


def test_it_checks_output_types_against_the_config(tmp_path):
    source = FP32_ADD_ONE.replace(".astype(np.float32)", ".astype(np.float64)")
    backend = loaded(make_python_model(tmp_path, "wide", source, fp32_config("wide")), fp32_config("wide"))
    with pytest.raises(BackendError, match="output 'Y' of model 'wide' is float64, the config says TYPE_FP32"):
        run(backend, [{"X": np.zeros((1, 4), np.float32)}])


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("import no_such_module_here\n", "importing 'model.py' raised ModuleNotFoundError"),
        ("class Model:\n    pass\n", "defines no class TritonPythonModel"),
        (
            "class TritonPythonModel:\n    def initialize(self, args):\n        raise RuntimeError('no weights')\n",
            "initialize\\(\\) of model 'broken' raised RuntimeError: no weights",
        ),
    ],
)
def test_it_fails_the_load_with_the_reason(tmp_path, source, message):
    model_dir = make_python_model(tmp_path, "broken", source)
    with pytest.raises(LoadError, match=message):
        loaded(model_dir, simple_string_config("broken"))
    assert not [name for name in sys.modules if name.startswith("infera_model_broken_")]


def test_it_keeps_instances_apart_and_finalizes_on_unload(tmp_path):
    source = textwrap.dedent(
        """
        FINALIZED = []


        class TritonPythonModel:
            def execute(self, requests):
                return []

            def finalize(self):
                FINALIZED.append(True)
        """
    )
    model_dir = make_python_model(tmp_path, "twice", source)
    first, second = loaded(model_dir, simple_string_config("twice")), loaded(model_dir, simple_string_config("twice"))
    assert first.module is not second.module
    finalized = first.module.FINALIZED
    first.unload()
    assert finalized == [True] and second.module.FINALIZED == []
    assert first.module_name not in sys.modules and second.module_name in sys.modules
    second.unload()


def test_it_tells_a_gpu_instance_its_kind_and_device(tmp_path):
    source = "class TritonPythonModel:\n    def initialize(self, args):\n        self.args = args\n"
    backend = loaded(make_python_model(tmp_path, "gpu", source), simple_string_config("gpu"), Device("GPU", 1))
    assert (backend.model.args["model_instance_kind"], backend.model.args["model_instance_device_id"]) == ("GPU", "1")
