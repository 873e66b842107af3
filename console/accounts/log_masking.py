"""A logging filter that masks API keys, Authorization header values and passwords before anything is written."""

from __future__ import annotations

import logging
import re

MASK = "***"

_PATTERNS = (
    # our own keys wherever they appear
    (re.compile(r"ifr_[A-Za-z0-9_\-]{6,}"), f"ifr_{MASK}"),
    # an Authorization header value in any rendering: 'Authorization: Bearer x', "authorization": "Token x", ...
    (
        re.compile(r"(?i)(authorization['\"]?\s*[:=,]\s*\(?\s*b?['\"]?\s*)(token|bearer|basic)\s+[^\s'\"),]+"),
        rf"\1\2 {MASK}",
    ),
    (re.compile(r"(?i)\b(token|bearer)\s+[A-Za-z0-9_\-\.=+/]{20,}"), rf"\1 {MASK}"),
    (re.compile(r"(?i)(password['\"]?\s*[:=]\s*['\"]?)[^\s'\"&,}]+"), rf"\1{MASK}"),
)


def mask_secrets(text: str) -> str:
    """`text` with keys, credentials in Authorization values and passwords replaced by ***."""
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text


class SecretMaskingFilter(logging.Filter):
    """Rewrites each record's message (and traceback) with secrets masked; never drops a record."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a broken format string is the logger's problem; do not hide the record
            return True
        masked = mask_secrets(message)
        if masked != message:
            record.msg, record.args = masked, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = mask_secrets(record.exc_text)
        return True


class QuietClientErrors(logging.Filter):
    """Django logs a refused request (403, 404, ...) with the exception's traceback; a refusal is no crash."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "status_code", 500) < 500:
            record.exc_info = None
            record.exc_text = None
        return True
