"""INFERA_REPLICA_NAME: each serving process's name among replicas, checked at start-up."""

from __future__ import annotations

import socket

import pytest

from console.config import read_settings
from console.env import EnvError


def test_it_names_the_replica_after_the_host_by_default(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(socket, "gethostname", lambda: "infera-7d9f-abcde")
    assert read_settings({}).replica_name == "infera-7d9f-abcde"


def test_it_keeps_the_usable_part_of_an_odd_host_name(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(socket, "gethostname", lambda: "-box one!")
    assert read_settings({}).replica_name == "box-one"


def test_it_takes_the_name_it_is_given():
    assert read_settings({"INFERA_REPLICA_NAME": " replica-2 "}).replica_name == "replica-2"


@pytest.mark.parametrize("value", ["-leading", "has space", "x" * 64, "a/b"])
def test_it_refuses_a_name_that_cannot_label_a_replica(value: str):
    with pytest.raises(EnvError, match="INFERA_REPLICA_NAME must be 1 to 63"):
        read_settings({"INFERA_REPLICA_NAME": value})
