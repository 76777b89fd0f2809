"""A damaged index line that still decodes (an unknown backend, a time that is no date) never hides its
neighbours: the verbs show the other runs, `index check` flags it and `index compact` sets it aside."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from hpctrain.rundir import names
from hpctrain.tracking import index_lines
from tests.unit.tracked_runs import cli, home_env, track


@pytest.fixture
def home(hpctrain_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setattr(index_lines, "_warned", False)
    with home_env(hpctrain_home):
        yield hpctrain_home


def damage(home: Path, **fields: object) -> None:
    """A copy of the journal's first run line, under another run id, with `fields` changed."""
    journal = home / names.INDEX_JOURNAL
    line = json.loads(journal.read_text().splitlines()[0])
    line.update(run_id="20260101-000000-damaged-000000", job_id="666", **fields)
    with journal.open("a") as out:
        out.write(json.dumps(line) + "\n")


DAMAGE = [{"backend": "bogus"}, {"submitted_at": 1e308}, {"state_at": -1.0}]


@pytest.mark.parametrize("fields", DAMAGE, ids=["backend", "1e308", "-1"])
def test_a_damaged_line_is_skipped_flagged_and_set_aside(fields: dict[str, object], home: Path) -> None:
    track(home, "101", "COMPLETED", name="good")
    damage(home, **fields)
    first = cli("status")
    assert "skipped 1 unreadable line(s)" in first.stderr  # once per process
    for verb in (["status"], ["list"], ["status", "--all"]):
        shown = cli(*verb)
        assert shown.code == 0, (verb, shown.stderr)
        assert "good" in shown.stdout and "666" not in shown.stdout, verb
    checked = cli("index", "check")
    assert checked.code == 1 and "unreadable line" in checked.stdout and "666" in checked.stdout
    compacted = cli("index", "compact")
    assert compacted.code == 0 and "1 unreadable lines set aside" in compacted.stdout
    assert "666" not in (home / names.INDEX_JOURNAL).read_text()
    assert "666" in (home / names.INDEX_REJECTED).read_text()
    assert cli("index", "check").code == 0
