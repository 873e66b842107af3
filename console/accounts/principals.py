"""Users and tokens as the engine's Principal: the one place a role becomes what a caller may do to models."""

from __future__ import annotations

from typing import Any

from console.accounts.budgets import budgets_for
from console.accounts.permissions import can_manage_models, is_admin
from console.accounts.roles import role_of
from engine.api import ANONYMOUS, Principal


def principal_for(user: Any, token: Any = None) -> Principal:
    """The principal of a signed-in user (or the user behind an API token), with the budgets of both."""
    role = role_of(user)
    return Principal(
        name=user.get_username(),
        may_change_models=can_manage_models(user),
        may_load_code=is_admin(user),
        role=role.value if role is not None else "",
        user_id=user.pk,
        token_id=getattr(token, "pk", None),
        budgets=budgets_for(user, token),
    )


def anonymous_principal(may_change_models: bool, may_load_code: bool = False) -> Principal:
    """A caller without credentials on a connection the server leaves open.

    With INFERA_OPEN_REPOSITORY_CONTROL it may load and unload models without code; models that run code only
    with INFERA_OPEN_REPOSITORY_CONTROL_ALLOWS_CODE too (the engine still checks INFERA_ALLOW_PYTHON_MODELS).
    """
    return Principal(
        ANONYMOUS.name, may_change_models=may_change_models, may_load_code=may_change_models and may_load_code
    )


def user_of(principal: Principal) -> Any:
    """The user a principal stands for, or None (anonymous, or deleted since)."""
    if principal.user_id is None:
        return None
    from django.contrib.auth import get_user_model

    return get_user_model().objects.filter(pk=principal.user_id).first()
