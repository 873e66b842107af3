"""The errors of Triton's python-backend API: `TritonError` a model puts in a response, `TritonModelException`
raised into model code."""

from __future__ import annotations


class TritonError:
    """An error a model puts in a response; `code` uses Triton's names."""

    UNKNOWN = 0
    INTERNAL = 1
    NOT_FOUND = 2
    INVALID_ARG = 3
    UNAVAILABLE = 4
    UNSUPPORTED = 5
    ALREADY_EXISTS = 6
    CANCELLED = 7

    def __init__(self, message: str, code: int = INTERNAL) -> None:
        self._message = message
        self._code = code

    def message(self) -> str:
        return self._message

    def code(self) -> int:
        return self._code

    def __str__(self) -> str:
        return self._message

    def __repr__(self) -> str:
        return f"TritonError({self._message!r})"


class TritonModelException(Exception):
    """What Triton raises into model code for failures the model may catch."""

    def message(self) -> str:
        return str(self)
