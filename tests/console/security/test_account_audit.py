"""User, role and token changes are in the audit log, with who made them and never a secret."""

from __future__ import annotations

import json

import pytest

from console.accounts.roles import Role
from console.accounts.tokens import issue_token
from console.accounts.user_admin import change_role, create_user, delete_user, reset_password, set_active
from console.audit.models import AuditEvent
from tests.console.accounts.conftest import make_user

pytestmark = pytest.mark.django_db


def trail() -> list[tuple[str, str, str]]:
    return [(e.actor_name, e.action, e.object) for e in AuditEvent.objects.order_by("id")]


def test_every_account_change_is_audited_with_its_actor(admin):
    created = create_user("carol", Role.VIEWER, actor=admin).user
    change_role(admin, created, Role.OPERATOR)
    set_active(admin, created, False)
    set_active(admin, created, True)
    generated = reset_password(created, actor=admin)
    token, key = issue_token(created, "laptop", actor=admin)
    token.revoke(actor=admin)
    delete_user(admin, created)
    assert trail() == [
        ("ada", "user.create", "carol"),
        ("ada", "user.role", "carol"),
        ("ada", "user.deactivate", "carol"),
        ("ada", "user.activate", "carol"),
        ("ada", "user.password_reset", "carol"),
        ("ada", "token.issue", "carol/laptop"),
        ("ada", "token.revoke", "carol/laptop"),
        ("ada", "user.delete", "carol"),
    ]
    role_change = AuditEvent.objects.get(action="user.role").detail
    assert role_change == {"from": "viewer", "to": "operator"}
    everything = json.dumps(list(AuditEvent.objects.values_list("detail", flat=True)))
    assert key not in everything and generated not in everything and key[:12] in everything  # the prefix only


def test_a_token_revoked_through_the_api_names_who_revoked_it(admin):
    from rest_framework.test import APIClient

    owner = make_user("owen", Role.OPERATOR)
    token, _ = issue_token(owner, "ci")
    client = APIClient()
    client.force_authenticate(owner)
    assert client.delete(f"/api/tokens/{token.pk}/").status_code in (200, 204)
    assert trail()[-1] == ("owen", "token.revoke", "owen/ci")
