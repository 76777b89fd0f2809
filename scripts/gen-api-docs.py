#!/usr/bin/env python3
"""Write the Python API reference and the worked example into docs/python-api.md (--check: verify).

The reference is read off hpctrain.api: every name of its `__all__`, with its signature and docstring
(a constant or alias: the docstring under its assignment). The worked example is the text of
hpctrain/examples/pipeline.py, the script tests/integration/test_python_api.py runs on the local cluster.
"""

from __future__ import annotations

import ast
import inspect
import itertools
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hpctrain import api  # noqa: E402 - needs ROOT on sys.path
from scripts.docgen_check import checking, read, sync, with_section  # noqa: E402

DOC = ROOT / "docs" / "python-api.md"
EXAMPLE = ROOT / "hpctrain" / "examples" / "pipeline.py"
SCRIPT = "gen-api-docs.py"
PREAMBLE = "# Python API\n"
SPEC = "hpctrain.spec"
"""Structures of the spec, which gen-spec-docs.py describes field by field, are not repeated here."""


def assigned_docs(path: Path) -> dict[str, str]:
    """The docstring written under each module-level assignment (`NAME = ...` then a string)."""
    body = ast.parse(path.read_text(encoding="utf-8")).body
    out = {}
    for node, after in itertools.pairwise(body):
        targets = node.targets if isinstance(node, ast.Assign) else []
        if isinstance(node, ast.AnnAssign):
            targets = [node.target]
        if (
            targets
            and isinstance(targets[0], ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            out[targets[0].id] = after.value.value
    return out


def text(doc: str | None) -> str:
    return inspect.cleandoc(doc or "").strip()


def signature(name: str, thing: Any) -> str:
    """`name(param: annotation = default, ...) -> annotation`, the annotations as the source spells them."""
    found = inspect.signature(thing)
    params = []
    for param in found.parameters.values():
        shown = "**" if param.kind is param.VAR_KEYWORD else "*" if param.kind is param.VAR_POSITIONAL else ""
        shown += param.name
        if param.annotation is not param.empty:
            shown += f": {param.annotation}"
        if param.default is not param.empty:
            shown += f" = {param.default!r}"
        params.append(shown)
    returns = "" if found.return_annotation is found.empty else f" -> {found.return_annotation}"
    return f"{name}({', '.join(params)}){returns}"


def entry(name: str, thing: Any, assigned: dict[str, str]) -> str:
    """One name's reference: a heading, its signature, its docstring; a class with its public members."""
    if name in assigned:  # a constant or an alias (`JobSource = Any` is no class of the API's)
        value = f"\n\nValue: `{thing!r}`" if isinstance(thing, tuple | str | int) else ""
        return f"### `{name}`\n\n{text(assigned[name])}{value}\n"
    if inspect.isclass(thing):
        if issubclass(thing, BaseException):
            return f"### `{name}` (exception)\n\n{text(thing.__doc__)}\n"
        parts = [f"### `{name}`\n\n{text(thing.__doc__)}\n"]
        for member, value in vars(thing).items():
            if member.startswith("_"):
                continue
            if isinstance(value, property):
                parts.append(f"- `{name}.{member}` (property): {text(value.__doc__) or member}")
            elif inspect.isfunction(value):
                doc = text(value.__doc__).replace("\n", " ")
                parts.append(f"- `{name}.{signature(member, value)}`: {doc}")
        return "\n".join(parts) + "\n"
    return f"### `{signature(name, thing)}`\n\n{text(thing.__doc__)}\n"


def reference() -> str:
    # The API's own constants and aliases, and those it takes from where they are defined.
    sources = [
        ROOT / "hpctrain" / "scheduler" / "base.py",
        ROOT / "hpctrain" / "submission" / "submit_path.py",
    ]
    defined = {name: doc for path in sources for name, doc in assigned_docs(path).items()}
    assigned = {**defined, **assigned_docs(Path(api.__file__))}
    assigned = {name: doc for name, doc in assigned.items() if name in api.__all__}

    def place(name: str) -> tuple[bool, bool, str]:  # classes, then functions, then constants
        return name in assigned, not inspect.isclass(getattr(api, name)), name.lower()

    order = sorted(api.__all__, key=place)
    entries = "\n".join(entry(name, getattr(api, name), assigned) for name in order)
    return entries + "\n## Structures the API returns\n\n" + structure_reference()


def handed_out() -> list[type]:
    """The classes the API hands out but does not export: those api.py imports for its annotations
    (its `if TYPE_CHECKING:` block)."""
    import importlib

    tree = ast.parse(Path(api.__file__).read_text(encoding="utf-8"))
    found: list[type] = []
    for node in tree.body:
        if not (
            isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
        ):
            continue
        for imported in node.body:
            if isinstance(imported, ast.ImportFrom) and imported.module:
                module = importlib.import_module(imported.module)
                found += [getattr(module, alias.name) for alias in imported.names]
    return [thing for thing in found if inspect.isclass(thing)]


def is_structure(thing: Any) -> bool:
    import dataclasses

    import msgspec

    return inspect.isclass(thing) and (issubclass(thing, msgspec.Struct) or dataclasses.is_dataclass(thing))


def field_types(cls: type) -> list[Any]:
    import dataclasses
    import typing

    import msgspec

    if issubclass(cls, msgspec.Struct):
        return [f.type for f in msgspec.structs.fields(cls)]
    hints = typing.get_type_hints(cls)
    return [hints[f.name] for f in dataclasses.fields(cls)]


def structures() -> list[type]:
    """Every structure a user of the API meets: those it hands out, and every structure their fields
    hold, in the order they are met."""
    import typing

    seen: list[type] = []
    todo = [cls for cls in handed_out() if is_structure(cls) and not cls.__module__.startswith(SPEC)]
    while todo:
        cls = todo.pop(0)
        if cls in seen:
            continue
        seen.append(cls)
        types = field_types(cls)
        while types:
            one = types.pop()
            types += list(typing.get_args(one))
            if is_structure(one) and one not in seen and not one.__module__.startswith(SPEC):
                todo.append(one)
    return seen


def field_lines(cls: type) -> list[str]:
    """`- `name: annotation` = default: doc` for each field, base classes' first, as the source has them."""
    lines: list[str] = []
    for klass in reversed(
        [k for k in cls.__mro__ if is_structure(k) and k.__module__.startswith("hpctrain")]
    ):
        body = ast.parse(inspect.cleandoc("\n" + inspect.getsource(klass))).body[0]
        assert isinstance(body, ast.ClassDef)
        nodes = body.body
        for node, after in itertools.zip_longest(nodes, nodes[1:]):
            if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
                continue
            if ast.unparse(node.annotation).startswith("ClassVar"):
                continue
            shown = f"`{node.target.id}: {ast.unparse(node.annotation)}`"
            if node.value is not None:
                shown += f" (default `{ast.unparse(node.value)}`)"
            doc = ""
            if isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant):
                doc = ": " + text(str(after.value.value)).replace("\n", " ")
            lines.append(f"- {shown}{doc}")
    return lines


def structure_reference() -> str:
    """Each structure's docstring and fields (`RunStatus`, its `Progress`...)."""
    parts = [
        "Each is a msgspec struct or a dataclass; `msgspec.to_builtins(value)` gives plain data (as "
        "`status --json` prints). The job and site specs (`JobSpec`, `Site`, `Resolved`) are described "
        "in [job-spec.md](job-spec.md) and [site-config.md](site-config.md).\n"
    ]
    for cls in structures():
        parts.append(f"### `{cls.__name__}` (structure, `{cls.__module__}`)\n\n{text(cls.__doc__)}\n")
        parts.append("\n".join(field_lines(cls)) + "\n")
    return "\n".join(parts)


def example() -> str:
    return "```python\n" + EXAMPLE.read_text(encoding="utf-8") + "```\n"


SECTIONS = {
    "worked example": ("hpctrain/examples/pipeline.py", example),
    "reference": ("hpctrain/api.py", reference),
}


def updated(current: str | None) -> str:
    """The file's text with each generated section replaced (or appended when it has none yet)."""
    out = current or PREAMBLE
    for name, (source, make) in SECTIONS.items():
        out = with_section(out, name, SCRIPT, source, make())
    return out


def main(argv: list[str] | None = None) -> int:
    return sync({DOC: updated(read(DOC))}, SCRIPT, checking(__doc__, argv))


if __name__ == "__main__":
    sys.exit(main())
