"""The four roles, mapped onto Django groups: the one place that says who a user is.

admin manages users and everything else; operator uploads, activates, loads and unloads models; viewer sees pages
and charts; inference may only call /v2 with its tokens. A superuser is always an admin.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, Group, Permission
from django.db import transaction


class Role(StrEnum):
    """A user's role; the value is also the name of the Django group that carries it."""

    ADMIN = "admin"
    OPERATOR = "operator"
    VIEWER = "viewer"
    INFERENCE = "inference"


# highest first: a user left in several role groups (edited by hand in Django admin) counts as the highest
ROLE_RANK: tuple[Role, ...] = (Role.ADMIN, Role.OPERATOR, Role.VIEWER, Role.INFERENCE)

# roles that may sign into the console and read its pages and management API
CONSOLE_ROLES = frozenset({Role.ADMIN, Role.OPERATOR, Role.VIEWER})

# apps whose models operators manage and viewers read (labels that are not installed are skipped)
MANAGED_APP_LABELS = ("registry", "audit", "monitoring")

_UNSET: Any = object()


def role_rank(role: Role | None) -> int:
    """A number that grows with the rights of `role` (None, no role, is lowest)."""
    return -1 if role is None else len(ROLE_RANK) - ROLE_RANK.index(role)


def role_of(user: AbstractBaseUser | AnonymousUser | None) -> Role | None:
    """The role of `user`: admin for superusers, else its highest role group; None when it has none or is inactive."""
    if user is None or not getattr(user, "is_authenticated", False) or not user.is_active:
        return None
    return assigned_role(user)


def assigned_role(user: AbstractBaseUser) -> Role | None:
    """The role `user` holds, active or not (a deactivated user keeps it for when it is reactivated)."""
    if getattr(user, "is_superuser", False):
        return Role.ADMIN
    cached = user.__dict__.get("_infera_role", _UNSET)
    if cached is not _UNSET:
        return cached
    names = set(user.groups.filter(name__in=[role.value for role in Role]).values_list("name", flat=True))
    role = next((candidate for candidate in ROLE_RANK if candidate.value in names), None)
    user.__dict__["_infera_role"] = role  # one query per request object, not one per permission check
    return role


def set_role(user: AbstractBaseUser, role: Role | str) -> None:
    """Give `user` exactly one role: its group, and for admins the superuser and staff flags Django admin needs."""
    role = Role(role)
    groups = ensure_groups()
    with transaction.atomic():
        user.is_superuser = role is Role.ADMIN
        user.is_staff = role is Role.ADMIN
        user.save(update_fields=["is_superuser", "is_staff"])
        others = [group for name, group in groups.items() if name is not role]
        user.groups.remove(*others)
        user.groups.add(groups[role])
    user.__dict__.pop("_infera_role", None)


def ensure_groups(using: str = "default") -> dict[Role, Group]:
    """Create the role groups if missing and set their permissions; safe to call any number of times."""
    groups: dict[Role, Group] = {}
    managed = Permission.objects.using(using).filter(content_type__app_label__in=MANAGED_APP_LABELS)
    for role in Role:
        group, _ = Group.objects.using(using).get_or_create(name=role.value)
        groups[role] = group
    groups[Role.ADMIN].permissions.set(Permission.objects.using(using).all())
    groups[Role.OPERATOR].permissions.set(managed)
    groups[Role.VIEWER].permissions.set(managed.filter(codename__startswith="view_"))
    groups[Role.INFERENCE].permissions.set([])
    return groups
