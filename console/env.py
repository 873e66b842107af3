"""Strict readers of environment variables for settings: a wrong value stops start-up and names the variable.

Every reader also accepts `<NAME>_FILE`, the path of a file holding the value (Docker and Kubernetes secrets);
setting both is an error, because which one wins would be a guess.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from engine.api import SettingError, parse_bool, read_text


class EnvError(ImproperlyConfigured):
    """A setting's environment variable holds a value Infera cannot use."""


def env_str(name: str, default: str | None = None, *, environ: Mapping[str, str] | None = None) -> str | None:
    """The variable's text (or the content of the file `<name>_FILE` points at), else `default`."""
    try:
        value = read_text(name, os.environ if environ is None else environ)
    except SettingError as exc:
        raise EnvError(str(exc)) from None
    return default if value is None else value


def env_bool(name: str, default: bool, *, environ: Mapping[str, str] | None = None) -> bool:
    """A strict boolean: 1/0, true/false, yes/no, on/off (any case); anything else is an error."""
    raw = env_str(name, environ=environ)
    if raw is None or raw.strip() == "":
        return default
    try:
        return parse_bool(name, raw)
    except SettingError as exc:
        raise EnvError(str(exc)) from None


def env_int(
    name: str,
    default: int,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
    environ: Mapping[str, str] | None = None,
) -> int:
    """A whole number within [minimum, maximum]."""
    raw = env_str(name, environ=environ)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise EnvError(f"{name} must be a whole number, got {raw!r}") from None
    if minimum is not None and value < minimum:
        raise EnvError(f"{name} must be at least {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise EnvError(f"{name} must be at most {maximum}, got {value}")
    return value


def env_list(name: str, default: list[str], *, environ: Mapping[str, str] | None = None) -> list[str]:
    """A comma-separated list; blanks around items are dropped, an empty value gives the default."""
    raw = env_str(name, environ=environ)
    if raw is None or raw.strip() == "":
        return list(default)
    items = [item.strip() for item in raw.split(",")]
    if any(item == "" for item in items):
        raise EnvError(f"{name} has an empty item in {raw!r} (items are separated by single commas)")
    return items


def env_choice(name: str, default: str, choices: tuple[str, ...], *, environ: Mapping[str, str] | None = None) -> str:
    """One of a fixed set of words (compared case-insensitively, returned as listed)."""
    raw = env_str(name, environ=environ)
    if raw is None or raw.strip() == "":
        return default
    by_lower = {choice.lower(): choice for choice in choices}
    try:
        return by_lower[raw.strip().lower()]
    except KeyError:
        raise EnvError(f"{name} must be one of {', '.join(choices)}, got {raw!r}") from None


def env_path(name: str, default: Path, *, base: Path, environ: Mapping[str, str] | None = None) -> Path:
    """A filesystem path; a relative one is taken from `base` (the project folder)."""
    raw = env_str(name, environ=environ)
    if raw is None or raw.strip() == "":
        return default
    if "\x00" in raw:
        raise EnvError(f"{name} is not a usable path: it contains a NUL character")
    path = Path(raw.strip()).expanduser()
    return path if path.is_absolute() else base / path


def env_url(name: str, schemes: tuple[str, ...], *, environ: Mapping[str, str] | None = None) -> str | None:
    """A URL whose scheme is one of `schemes`, or None when unset."""
    raw = env_str(name, environ=environ)
    if raw is None or raw.strip() == "":
        return None
    url = raw.strip()
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme not in schemes:
        raise EnvError(f"{name} must be a URL starting with {' or '.join(s + '://' for s in schemes)}")
    return url


def secret_from_file(path: Path) -> str:
    """The secret stored at `path`, created there (owner-only) on first use so restarts keep sessions valid."""
    try:
        return path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        pass
    import secrets

    path.parent.mkdir(parents=True, exist_ok=True)
    secret = secrets.token_urlsafe(50)
    # O_EXCL: when two processes start at once, the second reads what the first wrote
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_text(encoding="utf-8").strip()
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(secret + "\n")
    return secret
