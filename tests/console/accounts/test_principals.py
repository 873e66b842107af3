"""A user's role as the engine's Principal: who may change models through /v2, and who may load code."""

from __future__ import annotations

import pytest

from console.accounts.principals import anonymous_principal, principal_for
from console.accounts.roles import Role
from engine.config.model_config import ModelConfig
from engine.errors import CodeRefused
from engine.serving.admission import check_code
from engine.settings import EngineSettings
from tests.console.accounts.conftest import make_user

pytestmark = pytest.mark.django_db

PYTHON_MODEL = ModelConfig(name="adder", backend="python")
ALLOWED, DISALLOWED = EngineSettings(allow_code=True), EngineSettings(allow_code=False)


@pytest.mark.parametrize("role", [Role.INFERENCE, Role.VIEWER])
def test_it_refuses_model_changes_below_operator(role):
    principal = principal_for(make_user("someone", role))
    assert not principal.may_change_models and not principal.may_load_code
    assert principal.role == role.value and principal.authenticated


def test_it_lets_operators_change_models_but_not_load_code():
    operator = principal_for(make_user("op", Role.OPERATOR))
    assert operator.may_change_models
    with pytest.raises(CodeRefused, match="only admins may upload python-backend models"):
        check_code(PYTHON_MODEL, operator, ALLOWED)


def test_it_lets_admins_load_code_unless_the_server_forbids_it():
    admin = principal_for(make_user("root", Role.ADMIN))
    check_code(PYTHON_MODEL, admin, ALLOWED)
    with pytest.raises(CodeRefused, match="INFERA_ALLOW_PYTHON_MODELS=false"):
        check_code(PYTHON_MODEL, admin, DISALLOWED)


def test_an_open_connection_changes_nothing_unless_repository_control_is_opened():
    closed = anonymous_principal(False)
    assert not closed.may_change_models and not closed.authenticated
    with pytest.raises(CodeRefused):
        check_code(PYTHON_MODEL, closed, ALLOWED)
    opened = anonymous_principal(True)
    assert opened.may_change_models
    with pytest.raises(CodeRefused, match="INFERA_OPEN_REPOSITORY_CONTROL_ALLOWS_CODE"):
        check_code(PYTHON_MODEL, opened, ALLOWED)  # open control loads models without code only
    opened_to_code = anonymous_principal(True, may_load_code=True)
    check_code(PYTHON_MODEL, opened_to_code, ALLOWED)
    with pytest.raises(CodeRefused, match="disabled on this server"):
        check_code(PYTHON_MODEL, opened_to_code, DISALLOWED)
