"""scripts/docgen_check.py: the docs generators' generated sections and their --check."""

from __future__ import annotations

from pathlib import Path

import pytest

from scripts import docgen_check
from scripts.docgen_check import sync, with_section


def test_a_section_is_replaced_in_place_and_appended_when_missing() -> None:
    first = with_section("# Doc\n", "table", "gen.py", "src/", "old\n")
    assert first == "# Doc\n\n<!-- BEGIN GENERATED: table, by scripts/gen.py from src/ -->\n\nold\n\n" + (
        "<!-- END GENERATED: table -->\n"
    )
    kept = first + "\nhand-written text\n"
    second = with_section(kept, "table", "gen.py", "src/", "new\n")
    assert second == kept.replace("old", "new")
    assert with_section(second, "table", "gen.py", "src/", "new\n") == second


def test_a_moved_source_replaces_its_section_not_appends_one() -> None:
    current = with_section("# Doc\n", "table", "gen.py", "src/", "rows\n")
    moved = with_section(current, "table", "gen.py", "elsewhere/", "rows\n")
    assert moved.count("<!-- END GENERATED:") == 1
    assert "from elsewhere/ -->" in moved and "from src/ -->" not in moved


def test_check_names_each_stale_file_writes_nothing_and_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(docgen_check, "ROOT", tmp_path)
    current, stale, missing = tmp_path / "current.md", tmp_path / "stale.md", tmp_path / "docs" / "new.md"
    current.write_text("same\n")
    stale.write_text("old\n")
    wanted = {current: "same\n", stale: "new\n", missing: "made\n"}
    assert sync(wanted, "gen.py", check=True) == 1
    assert capsys.readouterr().err == (
        "stale.md is stale: run python scripts/gen.py\ndocs/new.md is stale: run python scripts/gen.py\n"
    )
    assert stale.read_text() == "old\n" and not missing.exists()
    assert sync(wanted, "gen.py", check=False) == 0
    assert (stale.read_text(), missing.read_text()) == ("new\n", "made\n")
    assert capsys.readouterr().err == "wrote stale.md\nwrote docs/new.md\n"
    assert sync(wanted, "gen.py", check=True) == 0
