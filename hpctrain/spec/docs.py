"""Field documentation of the spec structs: the help text of `hpctrain explain` and docs/job-spec.md.

A field is documented by the string right below it (an attribute docstring, as torchtitan's config
does), so that the declaration reads as plain Python and its text is written once.
"""

import functools
import itertools
import typing
from typing import Annotated, Any, Literal, NamedTuple

import msgspec

REQUIRED = "required"


class FieldDoc(NamedTuple):
    """One field's entry in the reference: what `hpctrain explain` prints and docs/ tabulate."""

    name: str
    """Dotted field name (train.steps)."""
    type: str
    """The type as a reader writes it (int, ddp|fsdp, str or int (optional))."""
    default: str
    """The default as YAML writes it ("unset" for null), "required" when the field must be given, "" for a
    section."""
    description: str
    """The string below the field's declaration, on one line."""


def field_docs(kind: type[msgspec.Struct], prefix: str = "") -> list[FieldDoc]:
    """Every field of `kind`, nested sections' fields after their section's: the help text and the docs."""
    rows: list[FieldDoc] = []
    hints = typing.get_type_hints(kind, include_extras=True)
    docs = attribute_docs(kind)
    for info in msgspec.structs.fields(kind):
        name, hint = info.name, hints[info.name]
        rows.append(FieldDoc(prefix + name, _type_name(hint), default_text(info), docs.get(name, "")))
        for arg in _members(hint):
            if isinstance(arg, type) and issubclass(arg, msgspec.Struct):
                rows.extend(field_docs(arg, prefix + name + "."))
    return rows


def default_text(info: msgspec.structs.FieldInfo) -> str:
    """The field's default as a YAML file would write it ("unset" for null); "required" without one, "" for
    a section (its own fields show theirs)."""
    if info.required:
        return REQUIRED
    value = info.default_factory() if info.default is msgspec.NODEFAULT else info.default
    if isinstance(value, msgspec.Struct):
        return ""
    return "unset" if value is None else _yaml_text(value)


def _yaml_text(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(_yaml_text(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{key}: {_yaml_text(item)}" for key, item in value.items()) + "}"
    return str(value)


@functools.cache
def attribute_docs(kind: type) -> dict[str, str]:
    """{field: the string literal below its declaration, on one line}, over the class and its bases."""
    # Imported here: only `explain` and the docs read sources; every verb that loads the spec (submit
    # first) imports this module, and inspect with its tokenize/dis is a start-up cost it does not need.
    import ast
    import inspect
    import textwrap

    docs: dict[str, str] = {}
    for cls in reversed(kind.__mro__):
        try:
            source = textwrap.dedent(inspect.getsource(cls))
        except (OSError, TypeError):  # a builtin base, or no source installed: no help text, no error
            continue
        body = ast.parse(source).body[0]
        if not isinstance(body, ast.ClassDef):
            continue
        for field, below in itertools.pairwise(body.body):
            if (
                isinstance(field, ast.AnnAssign)
                and isinstance(field.target, ast.Name)
                and isinstance(below, ast.Expr)
                and isinstance(below.value, ast.Constant)
                and isinstance(below.value.value, str)
            ):
                docs[field.target.id] = " ".join(below.value.value.split())
    return docs


def _members(hint: Any) -> tuple[Any, ...]:
    """The hint without Annotated, and the types inside it (the struct of `X | None`)."""
    if typing.get_origin(hint) is Annotated:
        hint = typing.get_args(hint)[0]
    return (hint, *typing.get_args(hint))


def _type_name(hint: Any) -> str:
    args = typing.get_args(hint)
    origin = typing.get_origin(hint)
    if origin is Annotated:
        return _type_name(args[0])
    if origin is Literal:
        return "|".join(str(a) for a in args)
    if args:
        names = [_type_name(a) for a in args if a is not type(None)]
        if origin in (list, dict):
            return f"{origin.__name__}[{', '.join(names)}]"
        return " or ".join(names) + (" (optional)" if type(None) in args else "")
    return getattr(hint, "__name__", str(hint))
