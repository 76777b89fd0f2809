"""docs/python-api.md is current: the pipeline script is its worked example, the docstrings its reference."""

from __future__ import annotations

from hpctrain import api
from tests.unit.doc_generators import load_generator

GENERATOR = load_generator("gen-api-docs.py")


def test_the_python_api_doc_is_current() -> None:
    assert GENERATOR.main(["--check"]) == 0  # its stderr says what to run


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


def test_every_field_of_the_structures_the_api_returns_is_documented() -> None:
    import msgspec

    from hpctrain.sweep.status import SweepStatus
    from hpctrain.tracking.status import RunStatus

    reference = GENERATOR.reference()
    for struct in (RunStatus, SweepStatus):
        heading = f"### `{struct.__name__}` (structure"
        assert heading in reference, struct
        section = reference.split(heading, 1)[1].split("\n### ", 1)[0]
        for field in msgspec.structs.fields(struct):
            assert f"- `{field.name}: " in section, (struct.__name__, field.name)
