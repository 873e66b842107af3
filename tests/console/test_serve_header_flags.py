"""`serve`'s flags for Triton's restricted APIs and header forwarding: each in place of its variable, checked before
anything starts, and handed on to the workers as given."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.management import CommandError, call_command

from console.hosting import workers
from console.management.commands.serve import header_rules
from engine.api import read_header_rules


def options(**given: Any) -> dict[str, Any]:
    flags = ("http_restricted_api", "grpc_restricted_protocol", "http_header_forward_pattern")
    return {flag: None for flag in (*flags, "grpc_header_forward_pattern")} | given


def test_serve_refuses_a_bad_group_with_tritons_words() -> None:
    with pytest.raises(CommandError, match="^unknown restricted api 'bogus' in --http-restricted-api"):
        call_command("serve", "--http-restricted-api", "bogus:k=v")
    with pytest.raises(CommandError, match="^--grpc-restricted-protocol option format is"):
        call_command("serve", "--grpc-restricted-protocol", "health")


def test_the_flags_set_the_engines_rules_in_place_of_the_variables(monkeypatch) -> None:
    monkeypatch.delenv("INFERA_HTTP_RESTRICTED_API", raising=False)
    changes = header_rules(options(http_restricted_api=["inference:x-k=v"], grpc_header_forward_pattern="^x-"))
    assert changes["http_headers"] == read_header_rules({"INFERA_HTTP_RESTRICTED_API": "inference:x-k=v"}, "http")
    assert changes["grpc_headers"].forward_pattern == "^x-"
    assert header_rules(options()) == {}


def test_the_workers_get_the_flags_as_given(worker_commands, settings) -> None:
    given = options(
        server="uvicorn",
        no_access_log=False,
        http_restricted_api=["inference:x-k=v", "trace:x-t=w"],
        grpc_restricted_protocol=["health:k=v"],
        http_header_forward_pattern="^x-",
    )
    workers.run_workers("127.0.0.1", 8000, 2, settings.INFERA, given)
    command = " ".join(worker_commands[0])
    assert "--http-restricted-api inference:x-k=v --http-restricted-api trace:x-t=w" in command
    assert "--grpc-restricted-protocol health:k=v --http-header-forward-pattern ^x-" in command
    assert "--grpc-header-forward-pattern" not in command
