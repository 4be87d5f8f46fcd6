"""Typed reads of a parsed ``config.json`` (hostile JSON): a value of the wrong type is a ConfigError (exit 2)
that names the model and the key, never a TypeError deep in a rule."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sgpatch.errors import ConfigError

MAX_INT = 1 << 62  # beyond any real count; keeps arithmetic on hostile numbers bounded


def _fail(label: str, key: str, value: Any, expected: str) -> ConfigError:
    shown = type(value).__name__ if not isinstance(value, str | int | float | bool) else repr(value)[:40]
    return ConfigError(
        f"{label}: {key!r} is {shown}, expected {expected}",
        hint="SGLang would fail on it too; fix the model's config.json",
    )


def sub(config: Mapping[str, Any], key: str, label: str) -> Mapping[str, Any] | None:
    value = config.get(key)
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise _fail(label, key, value, "an object")
    return value


def opt_int(config: Mapping[str, Any], key: str, label: str, *, minimum: int = 0) -> int | None:
    value = config.get(key)
    if value is None:
        return None
    if type(value) is not int or not minimum <= value <= MAX_INT:
        raise _fail(label, key, value, f"an integer >= {minimum}")
    return value


def opt_number(config: Mapping[str, Any], key: str, label: str) -> int | float | None:
    value = config.get(key)
    if value is None:
        return None
    if type(value) not in (int, float) or not -MAX_INT <= value <= MAX_INT:
        raise _fail(label, key, value, "a number")
    return value  # type: ignore[no-any-return]


def opt_str(config: Mapping[str, Any], key: str, label: str) -> str | None:
    value = config.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise _fail(label, key, value, "a string")
    return value


def opt_int_list(config: Mapping[str, Any], key: str, label: str) -> list[int] | None:
    value = config.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or not all(type(v) is int and abs(v) <= MAX_INT for v in value):
        raise _fail(label, key, value, "a list of integers")
    return value


def architectures(config: Mapping[str, Any], label: str) -> list[str] | None:
    value = config.get("architectures")
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _fail(label, "architectures", value, "a list of strings")
    return value
