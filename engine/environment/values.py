"""Strict readers of environment variables (booleans, numbers, choices, `_FILE` secrets) and the error naming one."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

TRUE_WORDS = frozenset({"1", "true", "yes", "on"})
FALSE_WORDS = frozenset({"0", "false", "no", "off"})


class SettingError(ValueError):
    """An environment variable holds a value the engine cannot use; the message names the variable."""


def parse_bool(name: str, raw: str) -> bool:
    """A strict boolean: 1/0, true/false, yes/no, on/off in any case; anything else names `name` in the error."""
    value = raw.strip().lower()
    if value in TRUE_WORDS:
        return True
    if value in FALSE_WORDS:
        return False
    raise SettingError(f"{name} must be a boolean (true/false, 1/0, yes/no, on/off), got {raw!r}")


def read_text(name: str, environ: Mapping[str, str]) -> str | None:
    """The variable's value, or the content of the file `<name>_FILE` names (Docker and Kubernetes secrets)."""
    file_name = f"{name}_FILE"
    direct, file_path = environ.get(name), environ.get(file_name)
    if direct is not None and file_path is not None:
        raise SettingError(f"{name} and {file_name} are both set; set only one of them")
    if file_path is not None:
        try:
            # one trailing newline is how editors and `echo` save a secret; it is never part of it
            return Path(file_path).read_text(encoding="utf-8").removesuffix("\n").removesuffix("\r")
        except OSError as exc:
            raise SettingError(f"{file_name}: cannot read '{file_path}': {exc.strerror or exc}") from exc
    return direct


def read_bool(name: str, default: bool, environ: Mapping[str, str]) -> bool:
    raw = read_text(name, environ)
    return default if raw is None or not raw.strip() else parse_bool(name, raw)


def read_int(
    name: str, default: int, environ: Mapping[str, str], *, minimum: int = 0, maximum: int | None = None
) -> int:
    raw = read_text(name, environ)
    if raw is None or not raw.strip():
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise SettingError(f"{name} must be a whole number, got {raw!r}") from None
    if value < minimum:
        raise SettingError(f"{name} must be at least {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise SettingError(f"{name} must be at most {maximum}, got {value}")
    return value


def read_choice(name: str, default: str, choices: tuple[str, ...], environ: Mapping[str, str]) -> str:
    raw = read_text(name, environ)
    if raw is None or not raw.strip():
        return default
    value = raw.strip().lower()
    if value not in choices:
        raise SettingError(f"{name} must be one of {', '.join(choices)}, got {raw!r}")
    return value


def int_value(name: str, raw: str) -> int:
    try:
        return int(raw.strip())
    except ValueError:
        raise SettingError(f"{name} must be a whole number, got {raw!r}") from None
