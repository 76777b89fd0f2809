"""`hpctrain logs`: a missing log names those that are there; the last N lines."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.tracked_runs import cli, home_env, track


@pytest.fixture
def home(hpctrain_home: Path) -> Path:
    with home_env(hpctrain_home):
        yield hpctrain_home


def test_logs_of_a_missing_log_name_what_is_there(home: Path) -> None:
    run = track(home, "509", "FAILED")
    run.rank_log(0).write_text("hello\n")
    outcome = cli("logs", "509", "--rank", "3")
    assert (
        outcome.code == 1
        and "no log logs/rank-3.log" in outcome.stderr
        and "logs/rank-0.log" in outcome.stderr
    )
    assert cli("logs", "509", "--rank", "0", "-n", "1").stdout == "hello\n"
