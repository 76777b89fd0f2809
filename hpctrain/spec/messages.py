"""msgspec's validation errors as one-line messages: the field by name, the choices, a near miss.

msgspec says where a value failed as a path (`$.env[...]`) and what it wanted in its own terms
(`Invalid enum value 'fsdp2'`, a regex). Here the path is walked through the struct types and the
data the user wrote, so that a message names the key (`env.FOO`), lists the choices and suggests
the closest known name for a typo, for every field of every spec struct at once.
"""

from __future__ import annotations

import difflib
import re
import types
import typing
from typing import Annotated, Any, Literal

import msgspec

from hpctrain.spec.slurm_values import PATTERN_WORDS

_STEP = re.compile(r"\.([^.\[]+)|\[(\d+)\]|\[\.\.\.\]")
_ABSENT = object()


def _field_path(message: str) -> tuple[str, str]:
    """Split msgspec's 'problem - at `$.a.b`' into ('$.a.b', 'problem'); ('', message) without a path."""
    problem, sep, where = message.rpartition(" - at `")
    return (where.rstrip("`"), problem) if sep else ("", message)


def describe(kind: type[msgspec.Struct], data: Any, message: str) -> tuple[str, str]:
    """(dotted field, problem) for msgspec's error `message` on converting `data` into `kind`."""
    raw_path, problem = _field_path(message)
    hint, value, names = _walk(kind, data, raw_path.removeprefix("$"))
    # A __post_init__ ValueError reads "field: problem" at its struct's path.
    inner = re.match(r"^(\w+): (.*)$", problem)
    if inner and not problem.startswith("Expected"):
        names.append(inner.group(1))
        problem = inner.group(2)
    return ".".join(names), _reword(problem, hint, value)


def _walk(kind: type, data: Any, path: str) -> tuple[Any, Any, list[str]]:
    """The type hint and the written value at msgspec's `path`, and the path's names (dict keys named)."""
    hint: Any = kind
    value = data
    names: list[str] = []
    for match in _STEP.finditer(path):
        name, index = match.group(1), match.group(2)
        if name is not None:
            struct = _struct_in(hint)
            hints = typing.get_type_hints(struct, include_extras=True) if struct else {}
            hint = hints.get(name, Any)
            value = value.get(name, _ABSENT) if isinstance(value, dict) else _ABSENT
            names.append(name)
        elif index is not None:
            hint = _args_of(hint, list)[0] if _args_of(hint, list) else Any
            position = int(index)
            value = value[position] if isinstance(value, list) and position < len(value) else _ABSENT
            names[-1:] = [f"{names[-1] if names else ''}[{index}]"]
        else:
            key_hint, hint = _args_of(hint, dict) or (Any, Any)
            key, value = _failing_entry(value, key_hint, hint)
            names.append("[...]" if key is _ABSENT else str(key))
    return hint, value, names


def _failing_entry(mapping: Any, key_hint: Any, value_hint: Any) -> tuple[Any, Any]:
    """The first (key, value) of `mapping` that does not convert; a bad key is itself the value."""
    if not isinstance(mapping, dict):
        return _ABSENT, _ABSENT
    for key, value in mapping.items():
        for part, hint in ((key, key_hint), (value, value_hint)):
            try:
                msgspec.convert(part, hint, strict=False)
            except (msgspec.ValidationError, TypeError):
                return key, part
    return _ABSENT, _ABSENT


def _reword(problem: str, hint: Any, value: Any) -> str:
    unknown = re.fullmatch(r"Object contains unknown field `(.*)`", problem)
    if unknown:
        struct = _struct_in(hint)
        return unknown_key(unknown.group(1), struct.__struct_fields__ if struct else ())
    enum = re.fullmatch(r"Invalid enum value (.*)", problem)
    if enum:
        choices = [str(choice) for choice in _literals(hint)]
        written = value if value is not _ABSENT else enum.group(1)
        also = ", or a mapping of its fields" if _struct_in(hint) else ""
        near = _near(str(written), choices)
        return f"{written!r} is not one of {', '.join(choices)}{also}{near}"
    pattern = re.fullmatch(r"Expected `str` matching regex (.*)", problem)
    if pattern:
        regex = pattern.group(1)
        words = next((w for p, w in PATTERN_WORDS.items() if regex == repr(p)), f"text matching {regex}")
        got = f", got {value!r}" if value is not _ABSENT else ""
        return f"expected {words}{got}"
    return problem


def unknown_key(key: str, known: typing.Iterable[str]) -> str:
    """'unknown field `gpu_per_node`; did you mean `gpus_per_node`?' (else the known names)."""
    known = list(known)
    near = difflib.get_close_matches(key, known, n=1)
    if near:
        return f"unknown field `{key}`; did you mean `{near[0]}`?"
    return f"unknown field `{key}` (known: {', '.join(known)})" if known else f"unknown field `{key}`"


def _near(written: str, choices: list[str]) -> str:
    near = difflib.get_close_matches(written, choices, n=1)
    return f"; did you mean {near[0]!r}?" if near else ""


def _members(hint: Any) -> tuple[Any, ...]:
    """The hint without Annotated, and its union members."""
    if typing.get_origin(hint) is Annotated:
        hint = typing.get_args(hint)[0]
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return tuple(m for arg in typing.get_args(hint) for m in _members(arg))
    return (hint,)


def _struct_in(hint: Any) -> type[msgspec.Struct] | None:
    return next((m for m in _members(hint) if isinstance(m, type) and issubclass(m, msgspec.Struct)), None)


def _literals(hint: Any) -> list[Any]:
    return [arg for m in _members(hint) if typing.get_origin(m) is Literal for arg in typing.get_args(m)]


def _args_of(hint: Any, container: type) -> tuple[Any, ...]:
    """The type arguments of the `container` (list, dict) among the hint's members."""
    for member in _members(hint):
        if typing.get_origin(member) is container:
            return typing.get_args(member)
    return ()
