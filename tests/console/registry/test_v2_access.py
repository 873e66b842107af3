"""Who may load and unload models through /v2 in the console, and who may load code."""

from __future__ import annotations

import pytest

from console.accounts.roles import Role
from console.registry.v2_access import V2Caller, carries_code, check_change
from engine.errors import Forbidden
from tests.console.accounts.conftest import make_user

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("role", [Role.INFERENCE, Role.VIEWER])
def test_it_refuses_model_changes_below_operator(role):
    with pytest.raises(Forbidden, match=f"role '{role.value}' may not load or unload models"):
        check_change(V2Caller(make_user("someone", role)), "simple")


def test_it_lets_operators_change_models_but_not_load_code():
    operator = V2Caller(make_user("op", Role.OPERATOR))
    check_change(operator, "simple")
    with pytest.raises(Forbidden, match="only admins may upload python-backend models"):
        check_change(operator, "adder", code=True)


def test_it_lets_admins_load_code_unless_the_server_forbids_it(settings):
    admin = V2Caller(make_user("root", Role.ADMIN))
    check_change(admin, "adder", code=True)
    settings.INFERA_ALLOW_PYTHON_MODELS = False
    with pytest.raises(Forbidden, match="INFERA_ALLOW_PYTHON_MODELS=false"):
        check_change(admin, "adder", code=True)


def test_it_trusts_an_open_connection_but_still_honours_the_python_switch(settings):
    check_change(V2Caller(None), "adder", code=True)
    settings.INFERA_ALLOW_PYTHON_MODELS = False
    with pytest.raises(Forbidden, match="python-backend models are disabled"):
        check_change(V2Caller(None), "adder", code=True)


def test_it_recognises_code_in_files_and_in_a_python_config():
    assert carries_code(None, {"1/model.py": b""})
    assert carries_code('{"backend": "python"}', None)
    assert not carries_code('{"max_batch_size": 8}', {"1/model.onnx": b""})
