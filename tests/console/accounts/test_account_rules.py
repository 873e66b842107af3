"""The account rules themselves: no raising one's own role, the last active admin stays."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from console.accounts.roles import Role, role_of
from console.accounts.user_admin import (
    AccountRuleError,
    change_role,
    create_user,
    delete_user,
    reset_password,
    set_active,
)
from tests.console.accounts.conftest import make_user

pytestmark = pytest.mark.django_db


def test_it_refuses_to_raise_ones_own_role(operator):
    with pytest.raises(AccountRuleError, match="cannot raise your own role"):
        change_role(operator, operator, Role.ADMIN)
    assert role_of(operator) is Role.OPERATOR


def test_it_lets_a_user_lower_their_own_role(admin, operator):
    change_role(operator, operator, Role.VIEWER)
    assert role_of(get_user_model().objects.get(pk=operator.pk)) is Role.VIEWER


def test_it_keeps_the_last_active_admin(admin):
    with pytest.raises(AccountRuleError, match="last active admin"):
        change_role(admin, admin, Role.OPERATOR)
    other = make_user("other", Role.VIEWER)
    with pytest.raises(AccountRuleError, match="last active admin"):
        set_active(other, admin, False)
    with pytest.raises(AccountRuleError, match="last active admin"):
        delete_user(other, admin)
    assert get_user_model().objects.get(pk=admin.pk).is_active


def test_it_does_not_count_a_deactivated_admin(admin):
    spare = make_user("spare", Role.ADMIN)
    set_active(admin, spare, False)
    with pytest.raises(AccountRuleError, match="last active admin"):
        change_role(admin, admin, Role.VIEWER)


def test_it_lets_an_admin_step_down_when_another_remains(admin):
    make_user("second", Role.ADMIN)
    change_role(admin, admin, Role.OPERATOR)
    assert role_of(get_user_model().objects.get(pk=admin.pk)) is Role.OPERATOR


def test_it_refuses_to_deactivate_or_delete_oneself(admin):
    make_user("second", Role.ADMIN)
    with pytest.raises(AccountRuleError, match="your own account"):
        set_active(admin, admin, False)
    with pytest.raises(AccountRuleError, match="your own account"):
        delete_user(admin, admin)


def test_it_creates_inference_users_without_a_password(db):
    created = create_user("cam", Role.INFERENCE)
    assert created.generated_password is None and not created.user.has_usable_password()


@pytest.mark.parametrize("name", ["", "bad name!", "a/b"])
def test_it_refuses_bad_user_names(db, name):
    with pytest.raises(AccountRuleError):
        create_user(name, Role.VIEWER)


def test_it_refuses_duplicate_names_in_any_case(viewer):
    with pytest.raises(AccountRuleError, match="already exists"):
        create_user("VERA", Role.VIEWER)


def test_it_checks_a_chosen_password(viewer):
    with pytest.raises(AccountRuleError, match="too common|too short"):
        reset_password(viewer, "password")
