"""The python backend: real model.py files written by the test, run in a stub process and (opted in) in process."""

from __future__ import annotations

import json
import os
import sys
import textwrap

import numpy as np
import pytest

from engine.backends import Device, get_backend
from engine.backends.python import PythonBackend
from engine.config.model_config import ModelConfig
from engine.errors import BackendError, InvalidArgument, LoadError
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


@pytest.fixture(params=["process", "in_process"])
def mode(request) -> str:
    return request.param


def loaded(model_dir, config: ModelConfig, device: Device | None = None, mode: str = "process") -> PythonBackend:
    config.parameters["EXECUTION_MODE"] = mode
    backend = PythonBackend(config, model_dir / "1", device or Device())
    backend.load()
    return backend


@pytest.fixture
def unload_after():
    backends: list[PythonBackend] = []
    yield backends.append
    for backend in backends:
        backend.unload()


def run(backend: PythonBackend, requests: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
    return backend.split(backend.execute(backend.prepare(requests)), [len(next(iter(r.values()))) for r in requests])


def numbers(values) -> np.ndarray:
    return np.array([str(v).encode() for v in values], dtype=object).reshape(1, -1)


def test_it_is_the_registered_python_backend():
    assert get_backend("python") is PythonBackend


def test_it_round_trips_bytes_as_decimal_strings(tmp_path, mode, unload_after):
    backend = loaded(make_simple_string(tmp_path), simple_string_config(), mode=mode)
    unload_after(backend)
    requests = [{"INPUT0": numbers(range(i, i + 16)), "INPUT1": numbers([i] * 16)} for i in (1, 40)]
    results = run(backend, requests)
    for i, result in zip((1, 40), results, strict=True):
        assert result["OUTPUT0"].dtype == object
        assert result["OUTPUT0"].tolist() == numbers(range(2 * i, 2 * i + 16)).tolist()
        assert result["OUTPUT1"].tolist() == numbers(range(16)).tolist()


def test_it_gives_each_request_its_own_outputs(tmp_path, mode, unload_after):
    config = fp32_config("add_one")
    backend = loaded(make_python_model(tmp_path, "add_one", FP32_ADD_ONE, config), config, mode=mode)
    unload_after(backend)
    requests = [{"X": np.full((size, 4), size, np.float32)} for size in (1, 3)]
    results = run(backend, requests)
    assert [r["Y"].shape for r in results] == [(1, 4), (3, 4)]
    np.testing.assert_array_equal(results[1]["Y"], np.full((3, 4), 4, np.float32))


WRITES_ITS_ARGS = textwrap.dedent(
    """
    import json
    import os
    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        def initialize(self, args):
            seen = dict(args)
            config = json.loads(args["model_config"])
            seen["output_type"] = pb_utils.get_output_config_by_name(config, "Y")["data_type"]
            seen["numpy_type"] = pb_utils.triton_string_to_numpy(seen["output_type"]).__name__
            seen["pid"] = os.getpid()
            with open(os.path.join(args["model_repository"], "seen.json"), "w") as file:
                json.dump(seen, file)

        def execute(self, requests):
            return [pb_utils.InferenceResponse([]) for _ in requests]

        def finalize(self):
            with open(os.path.join(os.path.dirname(__file__), "..", "finalized"), "a") as file:
                file.write("yes")
    """
)


def test_it_passes_tritons_initialize_args(tmp_path, mode, unload_after):
    model_dir = make_python_model(tmp_path, "args", WRITES_ITS_ARGS, fp32_config("args"))
    unload_after(loaded(model_dir, fp32_config("args"), mode=mode))
    seen = json.loads((model_dir / "seen.json").read_text())
    assert json.loads(seen["model_config"])["name"] == "args"
    assert (seen["model_name"], seen["model_version"], seen["model_instance_kind"]) == ("args", "1", "CPU")
    assert (seen["model_instance_device_id"], seen["model_instance_name"]) == ("0", "args_0_0")
    assert seen["model_repository"] == str(tmp_path / "args")
    assert (seen["output_type"], seen["numpy_type"]) == ("TYPE_FP32", "float32")


def test_it_runs_each_instance_in_a_process_of_its_own_unless_told_otherwise(tmp_path, mode):
    model_dir = make_python_model(tmp_path, "where", WRITES_ITS_ARGS, fp32_config("where"))
    backend = loaded(model_dir, fp32_config("where"), mode=mode)
    pid = json.loads((model_dir / "seen.json").read_text())["pid"]
    assert (pid != os.getpid()) == (mode == "process")
    backend.unload()
    assert (model_dir / "finalized").read_text() == "yes"
    if mode == "process":
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)  # the stub is gone with its instance


def test_it_shows_requests_their_inputs_and_requested_outputs(tmp_path, mode, unload_after):
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
    backend = loaded(make_python_model(tmp_path, "names", source), simple_string_config("names"), mode=mode)
    unload_after(backend)
    [result] = run(backend, [{"INPUT0": numbers(range(16)), "INPUT1": numbers(range(16))}])
    assert result["OUTPUT0"][0, 0] == b"INPUT0,INPUT1|OUTPUT0,OUTPUT1"


def test_it_turns_str_outputs_into_bytes(tmp_path, mode, unload_after):
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
    backend = loaded(make_python_model(tmp_path, "text", source), simple_string_config("text"), mode=mode)
    unload_after(backend)
    [result] = run(backend, [{"INPUT0": numbers(range(16)), "INPUT1": numbers(range(16))}])
    assert result["OUTPUT0"].dtype == object and result["OUTPUT0"][0, 0] == "é".encode()


def test_it_turns_an_exception_in_execute_into_a_backend_error(tmp_path, mode, unload_after):
    source = "class TritonPythonModel:\n    def execute(self, requests):\n        raise ValueError('bad numbers')\n"
    backend = loaded(make_python_model(tmp_path, "raises", source), simple_string_config("raises"), mode=mode)
    unload_after(backend)
    with pytest.raises(BackendError, match="model 'raises' raised ValueError: bad numbers"):
        run(backend, [{"INPUT0": numbers(range(16)), "INPUT1": numbers(range(16))}])


def test_it_fails_only_the_request_whose_response_carries_an_error(tmp_path, mode, unload_after):
    source = textwrap.dedent(
        """
        import numpy as np
        import triton_python_backend_utils as pb_utils


        class TritonPythonModel:
            def execute(self, requests):
                responses = []
                for request in requests:
                    x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
                    if (x < 0).any():
                        error = pb_utils.TritonError("X must be positive", pb_utils.TritonError.INVALID_ARG)
                        responses.append(pb_utils.InferenceResponse(error=error))
                    else:
                        responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x)]))
                return responses
        """
    )
    config = fp32_config("refuses")
    backend = loaded(make_python_model(tmp_path, "refuses", source, config), config, mode=mode)
    unload_after(backend)
    good, bad = run(backend, [{"X": np.ones((1, 4), np.float32)}, {"X": -np.ones((1, 4), np.float32)}])
    np.testing.assert_array_equal(good["Y"], np.ones((1, 4), np.float32))
    assert isinstance(bad, InvalidArgument) and bad.message == "X must be positive"


def test_it_insists_on_one_response_per_request(tmp_path, mode, unload_after):
    source = "class TritonPythonModel:\n    def execute(self, requests):\n        return []\n"
    backend = loaded(make_python_model(tmp_path, "none", source), simple_string_config("none"), mode=mode)
    unload_after(backend)
    with pytest.raises(BackendError, match=r"must return one response per request \(1\), got 0"):
        run(backend, [{"INPUT0": numbers(range(16)), "INPUT1": numbers(range(16))}])


def test_it_passes_an_output_of_another_type_than_the_configs_through_as_triton(tmp_path, mode, unload_after):
    source = FP32_ADD_ONE.replace(".astype(np.float32)", ".astype(np.float64)")
    config = fp32_config("wide")
    backend = loaded(make_python_model(tmp_path, "wide", source, config), config, mode=mode)
    unload_after(backend)
    [result] = run(backend, [{"X": np.zeros((1, 4), np.float32)}])
    assert result["Y"].dtype == np.float64  # tests/engine/backends/test_python_triton_parity.py (issue 36)


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
def test_it_fails_the_load_with_the_reason(tmp_path, source, message, mode):
    model_dir = make_python_model(tmp_path, "broken", source)
    with pytest.raises(LoadError, match=message):
        loaded(model_dir, simple_string_config("broken"), mode=mode)
    assert not [name for name in sys.modules if name.startswith("infera_model_broken_")]


def test_it_keeps_in_process_instances_apart_and_forgets_their_modules(tmp_path):
    source = "class TritonPythonModel:\n    def execute(self, requests):\n        return []\n"
    model_dir = make_python_model(tmp_path, "twice", source)
    first = loaded(model_dir, simple_string_config("twice"), mode="in_process")
    second = loaded(model_dir, simple_string_config("twice"), mode="in_process")
    assert first.runner.module is not second.runner.module
    first.unload()
    assert first.runner.module_name not in sys.modules and second.runner.module_name in sys.modules
    second.unload()


def test_it_tells_a_gpu_instance_its_kind_and_device(tmp_path, mode, unload_after):
    model_dir = make_python_model(tmp_path, "gpu", WRITES_ITS_ARGS, fp32_config("gpu"))
    unload_after(loaded(model_dir, fp32_config("gpu"), Device("GPU", 1), mode=mode))
    seen = json.loads((model_dir / "seen.json").read_text())
    assert (seen["model_instance_kind"], seen["model_instance_device_id"]) == ("GPU", "1")


REPORTS_ITS_PYTHON = textwrap.dedent(
    """
    import os
    import sys

    import numpy as np


    class TritonPythonModel:
        def initialize(self, args):
            with open(os.path.join(args["model_repository"], "prefix.txt"), "w") as file:
                file.write(sys.prefix)

        def execute(self, requests):
            return []
    """
)


def unpacked_environment(folder) -> None:
    """A venv-shaped folder that reuses this test run's interpreter and packages (as an unpacked conda-pack would)."""
    venv = os.path.dirname(os.path.dirname(sys.executable))
    (folder / "bin").mkdir(parents=True)
    (folder / "bin" / "python").symlink_to(os.path.realpath(sys.executable))
    (folder / "lib").symlink_to(os.path.join(venv, "lib"))
    base = os.path.dirname(os.path.realpath(sys.executable))
    (folder / "pyvenv.cfg").write_text(f"home = {base}\ninclude-system-site-packages = false\n")


def test_it_runs_the_stub_on_the_models_own_environment(tmp_path):
    model_dir = make_python_model(tmp_path, "own_env", REPORTS_ITS_PYTHON, fp32_config("own_env"))
    unpacked_environment(model_dir / "env")
    config = fp32_config("own_env")
    config.parameters["EXECUTION_ENV_PATH"] = "$$TRITON_MODEL_DIRECTORY/env"
    backend = loaded(model_dir, config)
    backend.unload()
    assert (model_dir / "prefix.txt").read_text() == str(model_dir / "env")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("/usr", "must name a folder inside the model's folder"),
        ("$$TRITON_MODEL_DIRECTORY/../..", "must name a folder inside the model's folder"),
        ("$$TRITON_MODEL_DIRECTORY/env.tar.gz", "is an archive; unpack the environment into a folder"),
        ("$$TRITON_MODEL_DIRECTORY/1", "holds no bin/python"),
    ],
)
def test_it_refuses_an_environment_it_cannot_run(tmp_path, value, message):
    model_dir = make_python_model(tmp_path, "bad_env", REPORTS_ITS_PYTHON, fp32_config("bad_env"))
    (model_dir / "env.tar.gz").write_bytes(b"not really")
    config = fp32_config("bad_env")
    config.parameters["EXECUTION_ENV_PATH"] = value
    with pytest.raises(LoadError, match=message):
        loaded(model_dir, config)


def test_it_writes_the_models_log_lines_to_the_servers_log(tmp_path, mode, unload_after, caplog):
    source = textwrap.dedent(
        """
        import triton_python_backend_utils as pb_utils


        class TritonPythonModel:
            def initialize(self, args):
                pb_utils.Logger.log_warn("weights are stale")
                pb_utils.Logger.log("warming up", pb_utils.LogLevel.INFO)

            def execute(self, requests):
                return []
        """
    )
    with caplog.at_level("INFO", logger="infera.model"):
        unload_after(loaded(make_python_model(tmp_path, "talks", source), simple_string_config("talks"), mode=mode))
    lines = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "infera.model"]
    assert lines == [("WARNING", "[talks] weights are stale"), ("INFO", "[talks] warming up")]
