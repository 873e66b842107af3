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


class Unauthorized(InferaError):
    """The request carries no acceptable credentials (HTTP 401)."""

    status = 401


class Forbidden(InferaError):
    """The caller is known but may not do this (HTTP 403)."""

    status = 403


class NotFound(InferaError):
    """A named thing (a shared-memory region, a setting) that does not exist (HTTP 404)."""

    status = 404


class Unsupported(InferaError):
    """A protocol feature this server does not provide (HTTP 501, gRPC UNIMPLEMENTED)."""

    status = 501


class Unavailable(InferaError):
    """The model is not ready or its queue is full (HTTP 503)."""

    status = 503


class QueueFull(Unavailable):
    """A model's queue holds `max_queue_size` requests already (Triton's queue policy): shed, retry later (HTTP 503).

    The message starts as Triton's does ("Exceeds maximum queue size"), which clients written for Triton look for.
    """

    def __init__(self, model: str, max_queue_size: int) -> None:
        self.model = model
        self.max_queue_size = max_queue_size
        waiting = f"{max_queue_size} request" + ("s" if max_queue_size != 1 else "")
        super().__init__(
            f"Exceeds maximum queue size: model '{model}' already has {waiting} waiting (its max_queue_size); "
            "retry later"
        )


class PayloadTooLarge(InferaError):
    """A request body over the configured limit (HTTP 413)."""

    status = 413


class BackendError(InferaError):
    """The runtime failed while executing a batch (HTTP 500)."""

    status = 500


class LoadError(InferaError):
    """A model (or one of its versions) failed to load: `reason` says why, `model` and `version` say what.

    A backend raises it with the reason only; the engine adds the model and the version that failed, so callers
    (the reconciler, the console) read fields and never parse the message.
    """

    status = 400

    def __init__(self, reason: str, *, model: str = "", version: int | None = None) -> None:
        self.reason = reason
        self.model = model
        self.version = version
        if not model:
            message = reason
        elif version is None:
            message = f"failed to load '{model}': {reason}"
        else:
            message = f"failed to load '{model}' version {version}: {reason}"
        super().__init__(message)

    @property
    def about_model(self) -> bool:
        """True once the engine has said which model failed (a backend's raw reason is not yet)."""
        return bool(self.model)


class CodeRefused(Forbidden):
    """A load that would run code (a python model, a pickle) from a caller or on a server that does not allow it."""


class DecoupledOnly(InferaError):
    """A decoupled model asked for exactly one response (HTTP /infer, gRPC ModelInfer): Triton's UNSUPPORTED, 400."""

    status = 400


class IncompatibleVersion(InvalidArgument):
    """A traffic policy's version whose inputs or outputs differ from the active version's (HTTP 400).

    `tensor` names the input or output that differs (`kind` says which), `version` the candidate and `active` the
    version it was compared with; `difference` says what differs in the client's words.
    """

    def __init__(self, model: str, version: int, active: int, kind: str, tensor: str, difference: str) -> None:
        self.model = model
        self.version = version
        self.active = active
        self.kind = kind
        self.tensor = tensor
        self.difference = difference
        super().__init__(
            f"traffic policy of model '{model}': version {version} does not take the requests of the active "
            f"version {active}: {kind} '{tensor}' {difference}"
        )
