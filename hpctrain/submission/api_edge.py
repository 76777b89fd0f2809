"""The Python API's edge: each argument checked for its type and value, so that a wrong one is a one-line
InputError naming it, never an AttributeError, TypeError or RecursionError from deep inside."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from hpctrain.errors import InputError

if TYPE_CHECKING:
    from hpctrain.submission.submit_path import JobSource

T = TypeVar("T")


def type_name(value: object) -> str:
    return type(value).__name__


def optional(check: Callable[[object, str], T], value: object, what: str) -> T | None:
    return None if value is None else check(value, what)


def text(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise InputError(f"{what}: expected a string, not {type_name(value)}")
    return value


def texts(value: object, what: str) -> list[str]:
    """A lone string is one key (never its characters); else a list of strings."""
    if isinstance(value, str):
        return [value]
    if not isinstance(value, Iterable) or isinstance(value, bytes | Mapping):
        raise InputError(f"{what}: expected a string or a list of strings, not {type_name(value)}")
    items = list(value)
    for item in items:
        if not isinstance(item, str):
            raise InputError(f"{what}: expected strings, not {type_name(item)} {item!r}")
    return items


def flag(value: object, what: str) -> bool:
    if not isinstance(value, bool):
        raise InputError(f"{what}: expected True or False, not {type_name(value)}")
    return value


def seconds(value: object, what: str) -> float:
    """A finite number of seconds, 0 or more (a NaN would never compare past a deadline)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InputError(f"{what}: expected a number of seconds, not {type_name(value)}")
    if not math.isfinite(value) or value < 0:
        raise InputError(f"{what}: expected a finite number of seconds, 0 or more, not {value!r}")
    return float(value)


def count(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InputError(f"{what}: expected a whole number, 0 or more, not {type_name(value)} {value!r}")
    return value


def function(value: object, what: str) -> None:
    if value is not None and not callable(value):
        raise InputError(f"{what}: expected a function or None, not {type_name(value)}")


def path(value: object, what: str) -> Path:
    if not isinstance(value, str | Path):
        raise InputError(f"{what}: expected a path, not {type_name(value)}")
    if "\x00" in str(value):
        raise InputError(f"{what}: a path cannot hold a NUL byte: {str(value)!r}")
    return Path(value)


def handles(value: object, cls: type[T], what: str) -> list[T]:
    """One handle or a list of them."""
    if isinstance(value, cls):
        return [value]
    if not isinstance(value, Iterable) or isinstance(value, str | bytes | Mapping):
        raise InputError(f"{what}: expected {cls.__name__} handles, not {type_name(value)}")
    items = list(value)
    for item in items:
        if not isinstance(item, cls):
            raise InputError(f"{what}: expected {cls.__name__} handles, not {type_name(item)} {item!r}")
    return items


def plain_data(value: object, what: str, depth: int = 0) -> None:
    """Data a spec can hold: strings, numbers, booleans, None, lists and string-keyed mappings, not
    nested past MAX_DEPTH (a mapping that holds itself would never end)."""
    if depth > MAX_DEPTH:
        raise InputError(f"{what}: nested more than {MAX_DEPTH} deep (does it contain itself?)")
    if value is None or isinstance(value, str | int | float | bool):
        return
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                raise InputError(f"{what}: a key must be a string, not {type_name(key)} {key!r}")
            plain_data(item, f"{what}.{key}", depth + 1)
        return
    if isinstance(value, list | tuple):
        for number, item in enumerate(value):
            plain_data(item, f"{what}[{number}]", depth + 1)
        return
    raise InputError(f"{what}: {type_name(value)} is not spec data (strings, numbers, lists, mappings)")


def site(value: object) -> str:
    """A site profile's name or path."""
    if not isinstance(value, str | Path):
        raise InputError(f"site: expected a site profile's name or path, not {type_name(value)}")
    return str(value)


def backend(value: object) -> str | None:
    return optional(text, value, "backend")


# Deeper than any spec nests: what passes this is data, not a cycle.
MAX_DEPTH = 64


def job(job: object) -> JobSource:
    """A path, an example's name, a JobSpec or a mapping of spec data."""
    from hpctrain import spec

    if isinstance(job, str | Path | spec.JobSpec):
        return job
    if isinstance(job, Mapping):
        plain_data(job, "job")
        return job
    raise InputError(f"job: expected a path, an example's name, a JobSpec or a mapping, not {type_name(job)}")
