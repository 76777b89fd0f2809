"""The string constants of a module's code, docstrings left out: what the source-scanning guards read."""

from __future__ import annotations

import ast


def code_strings(source: str) -> list[tuple[int, str]]:
    """(line, text) of each string constant that is not a module, class or function docstring."""
    tree = ast.parse(source)
    docstrings = {
        id(node.body[0].value)  # type: ignore[attr-defined]
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]
