"""Errors the engine raises, each carrying the HTTP status a front end answers with."""


class InferaError(Exception):
    """Base of every engine error; `status` is the HTTP status Triton would send."""

    status: int = 500

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidArgument(InferaError):
    """The request or configuration is malformed (HTTP 400)."""

    status = 400


class ModelNotFound(InvalidArgument):
    """An unknown model or version (Triton answers 400, not 404)."""


class Forbidden(InferaError):
    """The caller is known but may not do this (HTTP 403)."""

    status = 403


class Unavailable(InferaError):
    """The model is not ready or its queue is full (HTTP 503)."""

    status = 503


class PayloadTooLarge(InferaError):
    """A request body over the configured limit (HTTP 413)."""

    status = 413


class BackendError(InferaError):
    """The runtime failed while executing a batch (HTTP 500)."""

    status = 500


class LoadError(InferaError):
    """A model version failed to load; the message is the reason."""

    status = 400
