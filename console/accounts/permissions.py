"""Who may do what: DRF permission classes and a page decorator built on the same role rules.

Pages and the management API both ask these functions, so a rule changes in one place.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from rest_framework.permissions import SAFE_METHODS, BasePermission

from console.accounts.roles import CONSOLE_ROLES, Role, role_of

MODEL_MANAGERS = frozenset({Role.ADMIN, Role.OPERATOR})


def can_view_models(user: Any) -> bool:
    """Viewers, operators and admins see models, versions and charts; inference clients do not."""
    return role_of(user) in CONSOLE_ROLES


def can_manage_models(user: Any) -> bool:
    """Operators and admins upload, activate, load and unload models."""
    return role_of(user) in MODEL_MANAGERS


def is_admin(user: Any) -> bool:
    """Admins manage users and everything else."""
    return role_of(user) is Role.ADMIN


def python_models_refusal(user: Any) -> str | None:
    """Why `user` may not upload a python-backend model (code that runs in the server), or None when allowed."""
    if not settings.INFERA.allow_python_models:
        return "python-backend models (model.py) are disabled on this server (INFERA_ALLOW_PYTHON_MODELS=false)"
    if not is_admin(user):
        return "only admins may upload python-backend models (model.py runs code inside the server)"
    return None


def can_upload_python_models(user: Any) -> bool:
    """True when `user` is an admin and the server allows python-backend models."""
    return python_models_refusal(user) is None


class CanViewModels(BasePermission):
    """Read access for the console roles; inference-only users are refused."""

    message = "this needs the viewer, operator or admin role"

    def has_permission(self, request: Any, view: Any) -> bool:
        return can_view_models(request.user)


class CanManageModels(BasePermission):
    """Viewers read; changes need the operator or admin role."""

    message = "changing models needs the operator or admin role"

    def has_permission(self, request: Any, view: Any) -> bool:
        if request.method in SAFE_METHODS:
            return can_view_models(request.user)
        return can_manage_models(request.user)


class IsAdmin(BasePermission):
    """Admins only (users, roles, other people's tokens)."""

    message = "this needs the admin role"

    def has_permission(self, request: Any, view: Any) -> bool:
        return is_admin(request.user)


class HasConsoleRole(BasePermission):
    """Any console role (viewer and up): managing one's own tokens, reading one's own account."""

    message = "this needs the viewer, operator or admin role"

    def has_permission(self, request: Any, view: Any) -> bool:
        return can_view_models(request.user)


def role_required(*roles: Role | str) -> Callable[[Callable[..., HttpResponse]], Callable[..., HttpResponse]]:
    """Page decorator: anonymous users go to the login page, signed-in users without one of `roles` get 403."""
    allowed = frozenset(Role(role) for role in roles) or CONSOLE_ROLES

    def decorate(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
        @wraps(view)
        def guarded(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if not request.user.is_authenticated:
                return redirect_to_login(request.get_full_path())
            if role_of(request.user) not in allowed:
                names = ", ".join(sorted(role.value for role in allowed))
                raise PermissionDenied(f"this page needs one of the roles: {names}")
            return view(request, *args, **kwargs)

        return guarded

    return decorate
