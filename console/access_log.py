"""Access logs without secrets: query-string values of credential-like keys are masked in both servers' logs.

A link such as `/accounts/reset/?token=...` or a client that puts `?password=` in a URL must not leave the secret in
uvicorn's or daphne's access log. API keys anywhere in the line are masked too (console.accounts.log_masking).
"""

from __future__ import annotations

import logging
import re
from typing import IO

from console.accounts.log_masking import mask_secrets

MASK = "***"
# query keys whose values are credentials
_SECRET_QUERY = re.compile(
    r"([?&](?:token|key|api_key|apikey|access_token|auth|password|passwd|secret|session|sessionid)=)[^&\s#\"]*",
    re.IGNORECASE,
)


def mask_query(text: str) -> str:
    """`text` with the values of credential-like query parameters (and any API key) replaced by ***."""
    return mask_secrets(_SECRET_QUERY.sub(rf"\1{MASK}", text))


class QueryMaskingFilter(logging.Filter):
    """For uvicorn.access records: (client, method, path with query, http version, status)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and len(record.args) >= 3 and isinstance(record.args[2], str):
            args = list(record.args)
            args[2] = mask_query(args[2])
            record.args = tuple(args)
        return True


def mask_uvicorn_access_log() -> None:
    """Mask the access log of uvicorn (call after uvicorn has configured its loggers)."""
    logger = logging.getLogger("uvicorn.access")
    if not any(isinstance(f, QueryMaskingFilter) for f in logger.filters):
        logger.addFilter(QueryMaskingFilter())


class MaskedAccessLog:
    """A text stream for daphne's AccessLogGenerator that masks each line before writing it."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        return self.stream.write(mask_query(text))

    def flush(self) -> None:
        self.stream.flush()
