"""Trace settings at start-up (Triton's `--trace-config`), and clearing a setting: a global one returns to its start-up
value, a model's to the global one; the rate and count as Triton counts them. Read against Triton's
src/command_line_parser.cc (ParseTraceConfigOption, SetGlobalTraceArgs, SetTritonTraceArgs) and src/tracer.cc
(TraceManager::UpdateTraceSettingInternal, TraceSetting::SampleTrace)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from engine.environment.trace import TraceStartUp
from engine.environment.values import SettingError
from engine.errors import Unsupported
from engine.monitoring.tracing import Tracer
from engine.settings import read_engine_settings
from tests.engine.frontend.server_process import free_port, running_server
from tests.engine.model_factory import make_simple_onnx

START_UP = "triton,file=global_trace.log level=TIMESTAMPS rate=6 mode=triton"


def start_up_of(tmp_path: Path, **env: str) -> TraceStartUp:
    return read_engine_settings({"INFERA_TRACE_DIR": str(tmp_path), **env}).trace_start_up


# ---- reading the start-up settings


def test_it_reads_tritons_trace_config_form(tmp_path):
    start_up = start_up_of(tmp_path, INFERA_TRACE_CONFIG=START_UP + " count=5 triton,log-frequency=2")
    assert start_up == TraceStartUp(level=("TIMESTAMPS",), rate=6, count=5, log_frequency=2, file="global_trace.log")


def test_it_reads_the_single_variables_and_defaults_as_triton(tmp_path):
    assert start_up_of(tmp_path) == TraceStartUp(level=("OFF",), rate=1000, count=-1, log_frequency=0, file="")
    single = start_up_of(
        tmp_path,
        INFERA_TRACE_LEVEL="timestamps,TENSORS",
        INFERA_TRACE_RATE="1",
        INFERA_TRACE_COUNT="10",
        INFERA_TRACE_LOG_FREQUENCY="100",
        INFERA_TRACE_FILE="t.json",
    )
    assert single == TraceStartUp(level=("TIMESTAMPS", "TENSORS"), rate=1, count=10, log_frequency=100, file="t.json")


@pytest.mark.parametrize(
    ("config", "level"),
    [
        ("level=TIMESTAMPS level=TENSORS", ("TIMESTAMPS", "TENSORS")),  # each level= adds one, as Triton's
        ("level=max", ("TIMESTAMPS",)),
        ("level=TENSORS level=OFF", ("OFF",)),  # an OFF anywhere turns tracing off
    ],
)
def test_it_combines_levels_as_triton_does(tmp_path, config, level):
    assert start_up_of(tmp_path, INFERA_TRACE_CONFIG=config).level == level


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"INFERA_TRACE_CONFIG": "rate"}, "--trace-config option format is '<trace mode>,<setting>=<value>'. Got rate"),
        ({"INFERA_TRACE_CONFIG": "jaeger,file=x"}, "invalid value for trace mode option: jaeger"),
        ({"INFERA_TRACE_CONFIG": "mode=opentelemetry"}, "writes Triton's trace files only"),
        ({"INFERA_TRACE_CONFIG": "opentelemetry,url=localhost:4318"}, "writes Triton's trace files only"),
        ({"INFERA_TRACE_CONFIG": "file=t.json"}, "unknown setting 'file'"),
        ({"INFERA_TRACE_CONFIG": "level=loud"}, "invalid value for trace level option"),
        ({"INFERA_TRACE_CONFIG": "rate=0"}, "INFERA_TRACE_RATE must be between 1 and"),
        ({"INFERA_TRACE_CONFIG": "count=-2"}, "INFERA_TRACE_COUNT must be between -1 and"),
        ({"INFERA_TRACE_CONFIG": "rate=6 rate=7"}, "rate= is given twice"),
        ({"INFERA_TRACE_CONFIG": "rate=6", "INFERA_TRACE_RATE": "7"}, "INFERA_TRACE_RATE and INFERA_TRACE_CONFIG"),
        ({"INFERA_TRACE_LOG_FREQUENCY": "often"}, "INFERA_TRACE_LOG_FREQUENCY must be a whole number"),
    ],
)
def test_it_refuses_a_bad_start_up_setting_naming_it(tmp_path, env, message):
    with pytest.raises(SettingError) as refused:
        start_up_of(tmp_path, **env)
    assert message in str(refused.value)


def test_it_refuses_a_trace_file_without_a_trace_folder_or_outside_it(tmp_path):
    named = read_engine_settings({"INFERA_TRACE_CONFIG": "triton,file=t.json"}).trace_start_up.as_trace_settings()
    with pytest.raises(SettingError, match=r"no trace folder \(INFERA_TRACE_DIR\)"):
        Tracer(None, start_up=named)
    outside = TraceStartUp(file="../t.json").as_trace_settings()
    with pytest.raises(SettingError, match="must be a file in the trace folder"):
        Tracer(tmp_path, start_up=outside)


# ---- the tracer: fallbacks, rate and count as Triton's TraceManager


def test_clearing_falls_back_to_start_up_then_global_values(tmp_path):
    tracer = Tracer(tmp_path, start_up=TraceStartUp(level=("TIMESTAMPS",), rate=6, file="g.log").as_trace_settings())
    tracer.update({"trace_rate": "1", "trace_level": ["TENSORS"], "log_frequency": "3"})
    cleared = tracer.update({"trace_rate": None, "trace_level": None})
    assert (cleared["trace_rate"], cleared["trace_level"], cleared["log_frequency"]) == ("6", ["TIMESTAMPS"], "3")
    with pytest.raises(Unsupported, match="can not be updated through network protocol"):
        tracer.update({"trace_file": None})  # set at start-up, it stays, as Triton's
    unfixed = Tracer(tmp_path, start_up=TraceStartUp(level=("TIMESTAMPS",)).as_trace_settings())
    assert unfixed.update({"trace_file": "mine.log"})["trace_file"] == "mine.log"  # a file in the trace folder
    assert unfixed.update({"trace_file": None})["trace_file"] == ""
    tracer.update({"trace_rate": "2", "trace_level": ["OFF"]}, model="simple")
    assert tracer.update({"trace_level": None}, model="simple")["trace_level"] == ["TIMESTAMPS"]
    assert tracer.update({"trace_rate": None}, model="simple")["trace_rate"] == "6"


def test_it_traces_the_nth_request_and_reads_back_the_count_left(tmp_path):
    tracer = Tracer(tmp_path, start_up=TraceStartUp(level=("TIMESTAMPS",), rate=3, file="g.log").as_trace_settings())
    assert [tracer.start("simple", 1) is not None for _ in range(6)] == [False, False, True, False, False, True]
    tracer.update({"trace_count": "2", "trace_rate": "1"})
    assert sum(tracer.start("simple", 1) is not None for _ in range(5)) == 2
    assert tracer.settings()["trace_count"] == tracer.settings("simple")["trace_count"] == "0"
    assert tracer.update({"trace_count": None})["trace_count"] == "-1"  # the start-up count, anew


def test_traces_under_a_count_go_to_a_numbered_file_as_tritons(tmp_path):
    """Triton's L0_trace "Update trace count": 20 traces without a count in <file>, the 5 of count 5 in <file>.0."""
    start_up = TraceStartUp(level=("TIMESTAMPS",), rate=1, file="count.log")
    tracer = Tracer(tmp_path, start_up=start_up.as_trace_settings())

    def requests(count: int) -> None:
        for _ in range(count):
            trace = tracer.start("simple", 1)
            if trace is not None:
                tracer.submit(trace).result(timeout=60)

    requests(20)
    assert tracer.update({"trace_count": "5"})["trace_count"] == "5"
    requests(20)
    assert tracer.settings("simple")["trace_count"] == "0"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["count.log", "count.log.0"]
    assert len(json.loads((tmp_path / "count.log").read_text())) == 2 * 20  # a model record and timestamps each
    assert len(json.loads((tmp_path / "count.log.0").read_text())) == 2 * 5


# ---- through a real server with tritonclient, HTTP and gRPC


@dataclass
class Served:
    http_url: str
    grpc_url: str
    trace_dir: Path


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    repo = tmp_path_factory.mktemp("trace-repository")
    for name in ("simple", "other"):
        make_simple_onnx(repo, name=name)
    trace_dir = tmp_path_factory.mktemp("traces")
    grpc_port = free_port()
    log = tmp_path_factory.mktemp("trace-logs") / "uvicorn.log"
    env = {"INFERA_GRPC_PORT": str(grpc_port), "INFERA_TRACE_DIR": str(trace_dir), "INFERA_TRACE_CONFIG": START_UP}
    with running_server("uvicorn", repo, log, extra_env=env) as url:
        yield Served(url, f"127.0.0.1:{grpc_port}", trace_dir)


def _inputs(module) -> list:
    data = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = [module.InferInput(name, [1, 16], "INT32") for name in ("INPUT0", "INPUT1")]
    for entry in inputs:
        entry.set_data_from_numpy(data)
    return inputs


@pytest.mark.server
def test_a_server_starts_with_its_trace_config_on_both_protocols(served):
    expected = {
        "trace_level": ["TIMESTAMPS"],
        "trace_rate": "6",
        "trace_count": "-1",
        "log_frequency": "0",
        "trace_file": "global_trace.log",
        "trace_mode": "triton",
    }
    assert httpclient.InferenceServerClient(served.http_url).get_trace_settings() == expected
    answer = grpcclient.InferenceServerClient(served.grpc_url).get_trace_settings(as_json=True)
    assert {key: value["value"] for key, value in answer["settings"].items()} == {
        key: value if isinstance(value, list) else [value] for key, value in expected.items()
    }


@pytest.mark.server
def test_a_cleared_global_setting_returns_to_its_start_up_value(served):
    http = httpclient.InferenceServerClient(served.http_url)
    grpc = grpcclient.InferenceServerClient(served.grpc_url)
    changed = http.update_trace_settings(settings={"trace_rate": "1", "trace_level": ["TENSORS"]})
    assert (changed["trace_rate"], changed["trace_level"]) == ("1", ["TENSORS"])
    cleared = http.update_trace_settings(settings={"trace_rate": None})
    assert (cleared["trace_rate"], cleared["trace_level"]) == ("6", ["TENSORS"])
    over_grpc = grpc.update_trace_settings(settings={"trace_level": None}, as_json=True)["settings"]
    assert over_grpc["trace_level"]["value"] == ["TIMESTAMPS"] and over_grpc["trace_rate"]["value"] == ["6"]


@pytest.mark.server
def test_a_cleared_model_setting_returns_to_the_global_one(served):
    http = httpclient.InferenceServerClient(served.http_url)
    grpc = grpcclient.InferenceServerClient(served.grpc_url)
    own = http.update_trace_settings("simple", settings={"trace_rate": "1", "trace_level": ["OFF"]})
    assert (own["trace_rate"], own["trace_level"]) == ("1", ["OFF"])
    assert http.get_trace_settings()["trace_level"] == ["TIMESTAMPS"]  # the global ones untouched
    cleared = grpc.update_trace_settings("simple", settings={"trace_level": None}, as_json=True)["settings"]
    assert cleared["trace_level"]["value"] == ["TIMESTAMPS"] and cleared["trace_rate"]["value"] == ["1"]
    assert http.update_trace_settings("simple", settings={"trace_rate": None})["trace_rate"] == "6"


@pytest.mark.server
def test_the_start_up_rate_traces_every_sixth_request_and_a_count_reads_back_what_is_left(served):
    http = httpclient.InferenceServerClient(served.http_url)
    grpc = grpcclient.InferenceServerClient(served.grpc_url)
    http.update_trace_settings(settings={"trace_rate": None, "trace_level": None})  # the start-up values, counted anew
    for _ in range(6):
        http.infer("other", _inputs(httpclient))
        grpc.infer("other", _inputs(grpcclient))
    assert _traces_of("other", served) == 2  # the 6th and the 12th, as Triton samples
    assert http.update_trace_settings("other", settings={"trace_count": "1", "trace_rate": "1"})["trace_count"] == "1"
    http.infer("other", _inputs(httpclient))
    grpc.infer("other", _inputs(grpcclient))
    assert http.get_trace_settings("other")["trace_count"] == "0"
    assert http.get_trace_settings()["trace_count"] == "-1"  # the global count is its own
    assert _traces_of("other", served) == 2
    assert _traces_of("other", served, "global_trace.log.0") == 1  # a counted trace: a numbered file, as Triton's


def _traces_of(model: str, served: Served, file: str = "global_trace.log") -> int:
    records = json.loads((served.trace_dir / file).read_text())
    return sum(record.get("model_name") == model for record in records)


@pytest.mark.server
def test_a_trace_file_set_at_start_up_cannot_be_changed_over_the_network(served):
    words = "trace file location can not be updated through network protocol"
    http = httpclient.InferenceServerClient(served.http_url)
    with pytest.raises(InferenceServerException, match=words) as refused:
        http.update_trace_settings("simple", settings={"trace_file": "model.log"})
    assert refused.value.status() == "501"
    with pytest.raises(InferenceServerException, match=words) as refused:
        grpcclient.InferenceServerClient(served.grpc_url).update_trace_settings(settings={"trace_file": None})
    assert refused.value.status() == "StatusCode.UNIMPLEMENTED"
    assert (
        http.get_trace_settings("simple")["trace_file"]
        == http.get_trace_settings()["trace_file"]
        == ("global_trace.log")
    )


@pytest.mark.server
def test_an_unknown_models_trace_settings_are_refused_in_tritons_words(served):
    words = "Request for unknown model : does-not-exist"
    with pytest.raises(InferenceServerException, match=words) as refused:
        httpclient.InferenceServerClient(served.http_url).get_trace_settings("does-not-exist")
    assert refused.value.status() == "400"
    grpc = grpcclient.InferenceServerClient(served.grpc_url)
    with pytest.raises(InferenceServerException, match=words) as refused:
        grpc.update_trace_settings("does-not-exist", settings={"trace_rate": "1"})
    assert refused.value.status() == "StatusCode.INVALID_ARGUMENT"


# ---- manage.py serve --trace-config


@pytest.mark.server
@pytest.mark.slow
def test_serve_takes_tritons_trace_config_flags(tmp_path):
    from tests.conftest import serve_process

    entries = ("triton,file=serve.json", "level=TIMESTAMPS", "rate=3")
    flags = [flag for entry in entries for flag in ("--trace-config", entry)]
    with serve_process(tmp_path / "var", "--no-seed", *flags) as server:
        assert server.wait_for("/v2/health/ready") == 200
        status, body = server.get("/v2/trace/setting")
    assert status == 200
    settings = json.loads(body)
    assert settings["trace_file"] == "serve.json"  # in the console's trace folder, var/traces
    assert (settings["trace_level"], settings["trace_rate"]) == (["TIMESTAMPS"], "3")


def test_serve_passes_its_trace_config_flags_to_each_worker(worker_commands, tmp_path):
    from console.config import read_settings
    from console.hosting import workers

    infera = read_settings({"INFERA_VAR_DIR": str(tmp_path)})
    options = {"server": "uvicorn", "no_access_log": False, "trace_config": ["level=TIMESTAMPS", "triton,file=t.json"]}
    workers.run_workers("127.0.0.1", 8000, 2, infera, options)
    command = " ".join(worker_commands[0])
    assert "--trace-config level=TIMESTAMPS --trace-config triton,file=t.json" in command
