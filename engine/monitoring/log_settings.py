"""Triton's logging extension: the server's log levels and format, read and changed live (HTTP and gRPC)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from engine.errors import InvalidArgument, Unsupported

# the loggers of the engine and of the console that serves it
SERVER_LOGGERS = ("engine", "infera", "console")
ISO8601 = "%Y-%m-%dT%H:%M:%SZ"


@dataclass
class LogSettings:
    """Triton's logging settings, applied to the server's loggers."""

    log_info: bool = True
    log_warning: bool = True
    log_error: bool = True
    log_verbose_level: int = 0
    log_format: str = "default"
    log_file: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "log_file": self.log_file,
            "log_info": self.log_info,
            "log_warning": self.log_warning,
            "log_error": self.log_error,
            "log_verbose_level": self.log_verbose_level,
            "log_format": self.log_format,
        }

    def update(self, changes: dict[str, Any]) -> dict[str, Any]:
        """Check every change, then apply them all; returns the settings now in force."""
        updated = dict(self.to_dict())
        for key, value in changes.items():
            if key not in updated:
                raise InvalidArgument(f"unknown logging setting '{key}' (known: {', '.join(updated)})")
            if value is None:
                continue
            if key in ("log_info", "log_warning", "log_error") and not isinstance(value, bool):
                raise InvalidArgument(f"logging setting '{key}' must be true or false")
            if key == "log_verbose_level" and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise InvalidArgument("logging setting 'log_verbose_level' must be a non-negative integer")
            if key == "log_format" and value not in ("default", "ISO8601"):
                raise InvalidArgument("logging setting 'log_format' must be 'default' or 'ISO8601'")
            if key == "log_file" and value:
                raise Unsupported("logging to a file is not supported: the server logs to its standard error")
            updated[key] = value
        for key, value in updated.items():
            setattr(self, key, value)
        self.apply()
        return self.to_dict()

    def level(self) -> int:
        if self.log_verbose_level > 0:
            return logging.DEBUG
        if self.log_info:
            return logging.INFO
        if self.log_warning:
            return logging.WARNING
        if self.log_error:
            return logging.ERROR
        return logging.CRITICAL + 1

    def apply(self) -> None:
        for name in SERVER_LOGGERS:
            logger = logging.getLogger(name)
            logger.setLevel(self.level())
            for handler in logger.handlers:
                formatter = handler.formatter
                if formatter is not None:
                    formatter.datefmt = ISO8601 if self.log_format == "ISO8601" else None
