"""Who may change models through Triton's /v2 repository endpoints in the console, and load which code.

A request reaches these endpoints only after the /v2 token check, so a request without a token comes from a
connection the server leaves open (INFERA_INFERENCE_AUTH=none, or loopback in auto mode): it is trusted as the
operator chose. A token's user needs the operator or admin role to load or unload, and loads that carry code
(a python-backend model) follow the same rule as uploads: admins only, and never with INFERA_ALLOW_PYTHON_MODELS off.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
from channels.db import database_sync_to_async
from django.conf import settings

from console.accounts.inference_auth import authorization_from_scope
from console.accounts.permissions import can_manage_models, python_models_refusal
from console.accounts.roles import role_of
from console.accounts.tokens import TokenRefused, find_token, key_from_authorization
from engine.errors import Forbidden

V2_ACTOR = "v2 API"


@dataclass(frozen=True)
class V2Caller:
    """The user behind a /v2 request, or nobody on an open connection."""

    user: Any = None

    @property
    def actor(self) -> str:
        return f"{self.user.get_username()} (v2 API)" if self.user is not None else V2_ACTOR


def _user_of(scope: Any) -> Any:
    header = authorization_from_scope(scope or {})
    if header is None:
        return None
    try:
        key = key_from_authorization(header)
        return find_token(key).user if key else None
    except TokenRefused:
        return None  # the /v2 check already refused bad keys; a key revoked since then is no one


def _authorize(scope: Any, model: str, code: bool) -> V2Caller:
    caller = V2Caller(_user_of(scope))
    check_change(caller, model, code=code)
    return caller


async def authorize_change(scope: Any, model: str, *, code: bool = False) -> V2Caller:
    """The caller of a v2 load/unload, once allowed to change `model`; Forbidden otherwise (roles hit the DB)."""
    return await database_sync_to_async(_authorize)(scope, model, code)


def carries_code(config: Any, files: dict[str, bytes] | None) -> bool:
    """True when a v2 load would run code in the server: a .py file, or a python-backend config."""
    if files and any(path.endswith(".py") for path in files):
        return True
    if isinstance(config, str | bytes):
        try:
            config = orjson.loads(config)
        except orjson.JSONDecodeError:
            return False  # the engine refuses it with the parse error
    return isinstance(config, dict) and "python" in (str(config.get("backend", "")), str(config.get("platform", "")))


def check_change(caller: V2Caller, model: str, *, code: bool = False) -> None:
    """Raise Forbidden unless `caller` may load or unload `model` (with code, when `code`)."""
    if caller.user is not None and not can_manage_models(caller.user):
        role = role_of(caller.user)
        raise Forbidden(
            f"role '{role or 'none'}' may not load or unload models ('{model}'): it needs operator or admin"
        )
    if not code:
        return
    if caller.user is None:
        if not getattr(settings, "INFERA_ALLOW_PYTHON_MODELS", True):
            raise Forbidden(
                f"failed to load '{model}': python-backend models are disabled on this server "
                "(INFERA_ALLOW_PYTHON_MODELS=false)"
            )
        return
    refusal = python_models_refusal(caller.user)
    if refusal is not None:
        raise Forbidden(f"failed to load '{model}': {refusal}")
