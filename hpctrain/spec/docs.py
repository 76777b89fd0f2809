"""Field documentation of the spec structs: the help text of `hpctrain explain` and docs/job-spec.md."""

from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta


def field_docs(kind: type[msgspec.Struct], prefix: str = "") -> list[tuple[str, str, str]]:
    """(dotted field, type, description) for every field: the help text and the reference docs."""
    import typing

    rows: list[tuple[str, str, str]] = []
    hints = typing.get_type_hints(kind, include_extras=True)
    for name in kind.__struct_fields__:
        hint = hints[name]
        description = ""
        for meta in getattr(hint, "__metadata__", ()):
            if isinstance(meta, Meta) and meta.description:
                description = meta.description
        base = typing.get_args(hint)[0] if getattr(hint, "__metadata__", None) else hint
        rows.append((prefix + name, _type_name(base), description))
        for arg in (base, *typing.get_args(base)):
            if isinstance(arg, type) and issubclass(arg, msgspec.Struct):
                rows.extend(field_docs(arg, prefix + name + "."))
    return rows


def _type_name(hint: Any) -> str:
    import typing

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
