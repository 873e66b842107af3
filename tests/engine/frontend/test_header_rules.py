"""Triton's restricted-API and header-forward settings: read and checked at start-up as Triton's parser checks them
(src/command_line_parser.cc ParseRestrictedFeatureOption), one category map for both front ends, and what a
request's headers give; then the settings from the environment, applied by a real server (uvicorn and its gRPC
front end, the standalone app) to tritonclient's requests."""

from __future__ import annotations

import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from engine.environment.headers import RESTRICTED_CATEGORIES, HeaderRules, Restriction, read_header_rules
from engine.environment.values import SettingError
from engine.errors import InvalidArgument
from engine.frontend.header_rules import CATEGORY, GRPC_REFUSAL, HTTP_REFUSAL, HeaderCheck
from engine.settings import read_engine_settings
from tests.engine.frontend.server_process import free_port, running_server
from tests.engine.frontend.test_header_rules_tritonclient import simple_inputs

KNOWN = ", ".join(RESTRICTED_CATEGORIES)


def test_it_reads_tritons_groups_with_the_grpc_prefix():
    env = {"INFERA_GRPC_RESTRICTED_PROTOCOL": "health,Inference:Admin-Key=a=b==;model-config:k2=v"}
    rules = read_header_rules(env, "grpc")
    assert rules == HeaderRules(
        (
            Restriction(frozenset({"health", "inference"}), "triton-grpc-protocol-admin-key", "a=b=="),
            Restriction(frozenset({"model-config"}), "triton-grpc-protocol-k2", "v"),
        )
    )
    http = read_engine_settings({"INFERA_HTTP_RESTRICTED_API": "trace,logging:x-admin=1"}).http_headers
    assert http.restrictions == (Restriction(frozenset({"trace", "logging"}), "x-admin", "1"),)
    assert read_engine_settings({}).grpc_headers == HeaderRules()


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("health", "--http-restricted-api option format is '<config name>:<setting>=<value>'. Got health"),
        ("health:key", "--http-restricted-api option format is '<config name>:<setting>=<value>'. Got health:key"),
        ("health:key=", "--http-restricted-api option format is '<config name>:<setting>=<value>'. Got health:key="),
        (":key=v", "--http-restricted-api option format is '<config name>:<setting>=<value>'. Got :key=v"),
        ("healthy:k=v", f"unknown restricted api 'healthy' in INFERA_HTTP_RESTRICTED_API (known: {KNOWN})"),
        ("health:a=1 health,trace:b=2", "restricted api 'health' can not be specified in multiple config groups"),
        ("health:authorization=Bearer", "the header 'authorization' carries API tokens"),
        ("health:a/b=1", "header 'a/b' must be"),
    ],
)
def test_it_refuses_what_triton_refuses_with_its_words(value, message):
    with pytest.raises(SettingError) as refused:
        read_engine_settings({"INFERA_HTTP_RESTRICTED_API": value})
    assert message in str(refused.value)
    if "format" in message or "unknown" in message or "multiple" in message:
        assert str(refused.value).startswith(message)  # Triton's exact text first


def test_grpc_says_protocol_and_a_flag_and_its_variable_are_not_both_taken():
    with pytest.raises(SettingError, match="^unknown restricted protocol 'x' in --grpc-restricted-protocol"):
        read_header_rules({}, "grpc", ["x:k=v"])
    with pytest.raises(SettingError, match="INFERA_GRPC_RESTRICTED_PROTOCOL and --grpc-restricted-protocol"):
        read_header_rules({"INFERA_GRPC_RESTRICTED_PROTOCOL": "health:k=v"}, "grpc", ["trace:k=v"])
    with pytest.raises(SettingError, match="INFERA_HTTP_HEADER_FORWARD_PATTERN is not a valid regular expression"):
        read_engine_settings({"INFERA_HTTP_HEADER_FORWARD_PATTERN": "(("})
    assert read_header_rules({}, "http", forward_pattern="^x-").forward_pattern == "^x-"


def test_the_restricted_value_may_come_from_a_file(tmp_path):
    secret = tmp_path / "restricted"
    secret.write_text("inference:x-key=from-a-file\n")
    rules = read_header_rules({"INFERA_HTTP_RESTRICTED_API_FILE": str(secret)}, "http")
    assert rules.restrictions[0].value == "from-a-file"


def test_one_category_map_holds_every_endpoint_and_every_method():
    from engine.frontend.grpc_health_service import HEALTH_METHODS
    from engine.frontend.handlers import ASYNC_HANDLERS, SYNC_HANDLERS
    from engine.proto import grpc_messages

    endpoints = set(SYNC_HANDLERS) | set(ASYNC_HANDLERS) | set(grpc_messages.method_types()) | set(HEALTH_METHODS)
    assert endpoints == set(CATEGORY)
    assert set(CATEGORY.values()) == set(RESTRICTED_CATEGORIES)


def test_a_check_refuses_a_missing_or_wrong_value_and_forwards_only_what_it_may():
    rules = HeaderRules((Restriction(frozenset({"inference"}), "x-key", "v"),), forward_pattern="(?-i)^x-")
    check = HeaderCheck(rules, HTTP_REFUSAL)
    assert check.refusal("infer", [(b"x-key", b"v")]) is None
    assert check.refusal("infer", [(b"x-key", b"V")]) == "This API is restricted, expecting header 'x-key'"
    assert check.refusal("infer", []) == "This API is restricted, expecting header 'x-key'"
    assert check.refusal("model_config", []) is None
    headers = [(b"x-key", b"v"), (b"x-a", "é".encode()), (b"y-b", b"1"), (b"authorization", b"Bearer t")]
    assert check.forwarded(headers) == {"x-a": "é"}
    assert HeaderCheck(HeaderRules(forward_pattern=".*"), GRPC_REFUSAL).forwarded([("x-bin", b"\0")]) == {}
    with pytest.raises(InvalidArgument, match="^Header 'sequence_id' is reserved for Triton usage"):
        HeaderCheck(HeaderRules(forward_pattern="seq"), HTTP_REFUSAL).forwarded([(b"sequence_id", b"1")])


@pytest.mark.server
def test_the_standalone_server_applies_the_environments_rules_to_both_front_ends(server_repository, tmp_path):
    grpc_port = free_port()
    env = {
        "INFERA_GRPC_PORT": str(grpc_port),
        "INFERA_HTTP_RESTRICTED_API": "model-config,inference:x-infer-key=h-secret",
        "INFERA_GRPC_RESTRICTED_PROTOCOL": "model-config,inference:infer-key=g-secret",
    }
    with running_server("uvicorn", server_repository, tmp_path / "server.log", env) as url:
        http = httpclient.InferenceServerClient(url)
        grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")
        try:
            with pytest.raises(InferenceServerException, match="This API is restricted, expecting header"):
                http.get_model_config("simple")
            with pytest.raises(InferenceServerException, match="This API is restricted, expecting header"):
                http.infer("simple", simple_inputs(httpclient), headers={"x-infer-key": "g-secret"})
            assert http.get_model_config("simple", headers={"x-infer-key": "h-secret"})["name"] == "simple"
            http.infer("simple", simple_inputs(httpclient), headers={"x-infer-key": "h-secret"})
            assert http.get_model_metadata("simple")["name"] == "simple"  # metadata is not restricted
            with pytest.raises(InferenceServerException) as refused:
                grpc.infer("simple", simple_inputs(grpcclient))
            assert refused.value.status() == "StatusCode.UNAVAILABLE"
            assert refused.value.message() == (
                "This protocol is restricted, expecting header 'triton-grpc-protocol-infer-key'"
            )
            grpc.infer("simple", simple_inputs(grpcclient), headers={"triton-grpc-protocol-infer-key": "g-secret"})
            assert grpc.is_server_live()
        finally:
            http.close()
            grpc.close()
