"""Signal receivers of the accounts app."""

from __future__ import annotations

from typing import Any

from console.accounts.roles import ensure_groups


def ensure_groups_after_migrate(sender: Any, using: str = "default", **kwargs: Any) -> None:
    """Create or refresh the role groups once the auth tables exist."""
    ensure_groups(using=using)
