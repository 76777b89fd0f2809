"""docs/python-api.md is current: the pipeline script is its worked example, the docstrings its reference."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from hpctrain import api

ROOT = Path(__file__).resolve().parents[2]


def load_generator() -> ModuleType:
    # scripts/gen-api-docs.py is a script (hyphenated name), not a module of the package.
    spec = importlib.util.spec_from_file_location("gen_api_docs", ROOT / "scripts" / "gen-api-docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GENERATOR = load_generator()


def test_the_python_api_doc_is_current() -> None:
    current = GENERATOR.DOC.read_text(encoding="utf-8")
    assert GENERATOR.updated(current) == current, (
        "docs/python-api.md is stale: run python scripts/gen-api-docs.py"
    )


def test_regenerating_changes_nothing() -> None:
    once = GENERATOR.updated(GENERATOR.DOC.read_text(encoding="utf-8"))
    assert GENERATOR.updated(once) == once


def test_every_public_name_is_documented_with_a_docstring() -> None:
    reference = GENERATOR.reference()
    for name in api.__all__:
        assert f"### `{name}" in reference, name
    undocumented = [line for line in reference.split("### ")[1:] if not line.split("\n\n", 1)[1].strip()]
    assert not undocumented, undocumented


def test_a_changed_docstring_makes_the_doc_stale() -> None:
    current = GENERATOR.DOC.read_text(encoding="utf-8")
    original = api.find_run.__doc__
    try:
        api.find_run.__doc__ = "Something else."
        assert GENERATOR.updated(current) != current
    finally:
        api.find_run.__doc__ = original
