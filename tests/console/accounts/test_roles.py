"""Roles on Django groups: role_of, set_role, ensure_groups and the permission matrix."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from rest_framework.test import APIRequestFactory

from console.accounts.permissions import (
    CanManageModels,
    CanViewModels,
    IsAdmin,
    can_upload_python_models,
    python_models_refusal,
)
from console.accounts.roles import Role, ensure_groups, role_of, set_role
from tests.console.accounts.conftest import make_user

pytestmark = pytest.mark.django_db


def test_it_creates_one_group_per_role_idempotently():
    ensure_groups()
    ensure_groups()
    assert sorted(Group.objects.values_list("name", flat=True)) == sorted(role.value for role in Role)


def test_it_treats_a_superuser_as_admin():
    root = get_user_model().objects.create_superuser("root", password="x")
    assert role_of(root) is Role.ADMIN


def test_it_gives_exactly_one_role():
    user = make_user("sam", Role.VIEWER)
    set_role(user, Role.OPERATOR)
    fresh = get_user_model().objects.get(pk=user.pk)
    assert role_of(fresh) is Role.OPERATOR
    assert list(fresh.groups.values_list("name", flat=True)) == ["operator"]
    set_role(fresh, "admin")
    fresh = get_user_model().objects.get(pk=user.pk)
    assert fresh.is_superuser and fresh.is_staff
    set_role(fresh, Role.VIEWER)
    fresh = get_user_model().objects.get(pk=user.pk)
    assert role_of(fresh) is Role.VIEWER and not fresh.is_superuser and not fresh.is_staff


def test_it_gives_no_role_to_anonymous_inactive_or_groupless_users():
    from django.contrib.auth.models import AnonymousUser

    assert role_of(AnonymousUser()) is None
    assert role_of(make_user("nobody", None)) is None
    assert role_of(make_user("gone", Role.OPERATOR, active=False)) is None


MATRIX = [
    # role, view GET, manage GET, manage POST, admin GET
    (Role.ADMIN, True, True, True, True),
    (Role.OPERATOR, True, True, True, False),
    (Role.VIEWER, True, True, False, False),
    (Role.INFERENCE, False, False, False, False),
    (None, False, False, False, False),
]


@pytest.mark.parametrize(("role", "view", "manage_read", "manage_write", "admin_only"), MATRIX)
def test_it_applies_the_permission_matrix(role, view, manage_read, manage_write, admin_only):
    user = make_user(f"user-{role}", role)
    factory = APIRequestFactory()

    def allowed(permission, method):
        request = getattr(factory, method)("/")
        request.user = user
        return permission().has_permission(request, None)

    assert allowed(CanViewModels, "get") is view
    assert allowed(CanManageModels, "get") is manage_read
    assert allowed(CanManageModels, "post") is manage_write
    assert allowed(CanManageModels, "delete") is manage_write
    assert allowed(IsAdmin, "get") is admin_only


def test_it_lets_only_admins_upload_python_models(settings):
    settings.INFERA = settings.INFERA.replace(allow_python_models=True)
    assert can_upload_python_models(make_user("a", Role.ADMIN))
    operator = make_user("o", Role.OPERATOR)
    assert not can_upload_python_models(operator)
    assert "only admins" in python_models_refusal(operator)


def test_it_refuses_python_models_to_everyone_when_disabled(settings):
    settings.INFERA = settings.INFERA.replace(allow_python_models=False)
    admin = make_user("a", Role.ADMIN)
    assert not can_upload_python_models(admin)
    assert "INFERA_ALLOW_PYTHON_MODELS=false" in python_models_refusal(admin)
