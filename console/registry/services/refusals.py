"""The registry's refusals: each carries its HTTP status and a message naming the problem."""

from __future__ import annotations

from typing import Any


class RegistryError(Exception):
    """A refused registry action; `status` is the HTTP answer and the message names the problem."""

    status = 400

    def __init__(self, message: str, status: int | None = None, **extra: Any) -> None:
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status
        self.extra = extra


class NotFound(RegistryError):
    status = 404


class Conflict(RegistryError):
    status = 409


def in_use(subject: str, ensembles: list[str]) -> Conflict:
    """The refusal to remove what registered ensembles call, naming them (the API also lists them)."""
    named = ", ".join(f"'{name}'" for name in ensembles)
    which = f"the ensemble {named}" if len(ensembles) == 1 else f"the ensembles {named}"
    return Conflict(
        f"{subject} is used by {which}: change or delete {'it' if len(ensembles) == 1 else 'them'} first",
        ensembles=ensembles,
    )
