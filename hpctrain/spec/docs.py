"""Field documentation of the spec structs: the help text of `hpctrain explain` and docs/job-spec.md.

A field is documented by the string right below it (an attribute docstring, as torchtitan's config
does), so that the declaration reads as plain Python and its text is written once.
"""

import functools
import itertools
import typing
from typing import Annotated, Any, Literal

import msgspec


def field_docs(kind: type[msgspec.Struct], prefix: str = "") -> list[tuple[str, str, str]]:
    """(dotted field, type, description) for every field: the help text and the reference docs."""
    rows: list[tuple[str, str, str]] = []
    hints = typing.get_type_hints(kind, include_extras=True)
    docs = attribute_docs(kind)
    for name in kind.__struct_fields__:
        hint = hints[name]
        rows.append((prefix + name, _type_name(hint), docs.get(name, "")))
        for arg in _members(hint):
            if isinstance(arg, type) and issubclass(arg, msgspec.Struct):
                rows.extend(field_docs(arg, prefix + name + "."))
    return rows


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
