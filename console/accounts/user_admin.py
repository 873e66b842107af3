"""What an admin may do to accounts, with the rules that keep the server manageable.

A user cannot raise their own role; the last active admin cannot be demoted, deactivated or deleted. Pages, the
API, Django admin and the shell commands all go through these functions.
"""

from __future__ import annotations

import secrets
from typing import Any, NamedTuple

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Q

from console.accounts import audit
from console.accounts.roles import Role, assigned_role, role_of, role_rank, set_role


class AccountRuleError(Exception):
    """An account change the rules refuse; the message says which rule, in words for the person who tried."""


class CreatedUser(NamedTuple):
    """A user just created; `generated_password` is set when Infera chose it (shown once)."""

    user: AbstractBaseUser
    generated_password: str | None


def active_admins() -> Any:
    """The active users whose role is admin (superusers and members of the admin group)."""
    users = get_user_model().objects.filter(is_active=True)
    return users.filter(Q(is_superuser=True) | Q(groups__name=Role.ADMIN.value)).distinct()


def is_last_active_admin(user: AbstractBaseUser) -> bool:
    """True when `user` is the only active admin left."""
    return role_of(user) is Role.ADMIN and not active_admins().exclude(pk=user.pk).exists()


def generate_password() -> str:
    """A random password for a new or reset account, shown once."""
    return secrets.token_urlsafe(15)


def _check_password(password: str, user: AbstractBaseUser | None = None) -> None:
    try:
        validate_password(password, user)
    except ValidationError as invalid:
        raise AccountRuleError(" ".join(invalid.messages)) from None


def create_user(
    username: str, role: Role | str, password: str | None = None, email: str = "", *, actor: Any = None
) -> CreatedUser:
    """Create an account with one role; without a password, console roles get a generated one, inference none."""
    role = Role(role)
    users = get_user_model()
    username = username.strip()
    if not username:
        raise AccountRuleError("a user needs a name")
    try:
        users.username_validator(username)
    except ValidationError as invalid:
        raise AccountRuleError(f"'{username}' is not a valid user name: {' '.join(invalid.messages)}") from None
    if users.objects.filter(username__iexact=username).exists():
        raise AccountRuleError(f"a user named '{username}' already exists")
    generated = None
    if password is None and role is not Role.INFERENCE:
        generated = password = generate_password()
    with transaction.atomic():
        user = users(username=username, email=email)
        if password is None:
            user.set_unusable_password()  # inference clients sign in with tokens only
        else:
            _check_password(password, user)
            user.set_password(password)
        user.save()
        set_role(user, role)
        audit.record(actor, "user.create", username, role=role.value)
    return CreatedUser(user, generated)


def change_role(actor: AbstractBaseUser, target: AbstractBaseUser, role: Role | str) -> None:
    """Give `target` the role `role`, as `actor` asked."""
    role = Role(role)
    current = assigned_role(target)
    if actor.pk == target.pk and role_rank(role) > role_rank(current):
        raise AccountRuleError("you cannot raise your own role; ask another admin")
    if role is not Role.ADMIN and target.is_active and is_last_active_admin(target):
        raise AccountRuleError(f"'{target.get_username()}' is the last active admin; make another admin first")
    with transaction.atomic():
        set_role(target, role)
        audit.record(
            actor, "user.role", target.get_username(), **{"from": current.value if current else None, "to": role.value}
        )


def set_active(actor: AbstractBaseUser, target: AbstractBaseUser, active: bool) -> None:
    """Activate or deactivate `target`; nobody deactivates themselves or the last active admin."""
    if not active:
        if actor.pk == target.pk:
            raise AccountRuleError("you cannot deactivate your own account")
        if is_last_active_admin(target):
            raise AccountRuleError(f"'{target.get_username()}' is the last active admin and cannot be deactivated")
    with transaction.atomic():
        target.is_active = active
        target.save(update_fields=["is_active"])
        audit.record(actor, "user.activate" if active else "user.deactivate", target.get_username())
    target.__dict__.pop("_infera_role", None)


def check_deletable(target: AbstractBaseUser) -> None:
    """Refuse to delete the last active admin."""
    if is_last_active_admin(target):
        raise AccountRuleError(f"'{target.get_username()}' is the last active admin and cannot be deleted")


def delete_user(actor: AbstractBaseUser, target: AbstractBaseUser) -> None:
    """Delete `target` (and its tokens); not oneself, not the last active admin."""
    if actor.pk == target.pk:
        raise AccountRuleError("you cannot delete your own account")
    check_deletable(target)
    with transaction.atomic():
        name = target.get_username()
        target.delete()
        audit.record(actor, "user.delete", name)


def reset_password(target: AbstractBaseUser, password: str | None = None, *, actor: Any = None) -> str | None:
    """Set `password`, or a generated one which is returned to be shown once."""
    generated = None
    if password is None:
        generated = password = generate_password()
    else:
        _check_password(password, target)
    with transaction.atomic():
        target.set_password(password)
        target.save(update_fields=["password"])
        audit.record(actor, "user.password_reset", target.get_username())
    return generated
