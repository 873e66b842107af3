"""Account changes in the audit log: users created, given a role, (de)activated, deleted, passwords reset, tokens
issued and revoked. The log itself is the registry's (AuditEvent); secrets never enter it."""

from __future__ import annotations

from typing import Any


def record(actor: Any, action: str, obj: str, **detail: Any) -> None:
    """One audit event about an account; `actor` is a user, a name, or None for the system (the shell)."""
    from console.audit.models import AuditEvent

    AuditEvent.record(actor if actor is not None else "system", action, obj, **detail)
