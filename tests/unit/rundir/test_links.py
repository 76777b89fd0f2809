"""Symbolic links planted in a run directory: readers do not follow them; logs, status and report refuse."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hpctrain.rundir import (
    NOT_FOLLOWED,
    RunDir,
    Unreadable,
    leaves,
    read_at,
    read_json,
    tail_lines,
    whole_lines,
)
from hpctrain.rundir.structs import Result
from hpctrain.scheduler.base import JobState
from tests.unit.tracked_runs import track

REPO = Path(__file__).resolve().parents[3]
SECRET = "TOPSECRET-0123456789"


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    path = tmp_path / "shadow"
    path.write_text(f'{{"{SECRET}": 1}}\n{SECRET}\n')
    return path


def test_the_readers_do_not_follow_a_link(tmp_path: Path, secret: Path) -> None:
    link = tmp_path / "result.json"
    link.symlink_to(secret)
    found = read_json(link, Result)
    assert isinstance(found, Unreadable) and found.reason == NOT_FOLLOWED
    assert tail_lines(link, 5) == [] and list(whole_lines(link)) == [] and read_at(link, 0, 100) is None
    assert read_at(secret, 0, 100) is not None  # the file itself reads


def test_leaves_names_links_and_linked_folders_wherever_they_lead(tmp_path: Path, secret: Path) -> None:
    run = RunDir(tmp_path / "run")
    run.logs.mkdir(parents=True)
    run.batch_log.write_text("ok\n")
    assert leaves(run.root, run.batch_log) is None and leaves(run.root, run.rank_log(0)) is None
    run.rank_log(1).symlink_to(secret)
    assert leaves(run.root, run.rank_log(1)) == NOT_FOLLOWED
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "batch.log").write_text(SECRET)
    (run.root / "array-0").mkdir()
    (run.root / "array-0" / "logs").symlink_to(outside)
    assert leaves(run.root, run.root / "array-0" / "logs" / "batch.log") == f"array-0/logs/ is {NOT_FOLLOWED}"
    (run.root / "array-1").symlink_to(run.root / "array-0")  # a link that stays inside is refused too
    assert leaves(run.root, run.root / "array-1" / "spec.json") == f"array-1/ is {NOT_FOLLOWED}"
    assert "outside the run directory" in (leaves(run.root, secret) or "")


def test_the_readers_follow_no_linked_folder_below_the_run_directory(tmp_path: Path, secret: Path) -> None:
    """Issue 23: O_NOFOLLOW guards only the last part of a path; `logs -> /etc` was still followed."""
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "rank-0.log").write_text(f"{SECRET}\n")
    (outside / "rank-0.json").write_text(secret.read_text())
    run = RunDir(tmp_path / "home" / "run")
    run.root.mkdir(parents=True)
    run.logs.symlink_to(outside)
    run.failures.symlink_to(outside)
    assert tail_lines(run.rank_log(0), 5, below=run.root) == []
    assert read_at(run.rank_log(0), 0, 100, below=run.root) is None
    assert list(whole_lines(run.rank_log(0), below=run.root)) == []
    found = read_json(run.failure(0), Result, below=run.root)
    assert isinstance(found, Unreadable) and found.reason == f"failures/ is {NOT_FOLLOWED}"
    assert run.log_files() == [] and run.read_failures() == []
    # The run directory may itself be reached through a link: only what lies below it is checked.
    (tmp_path / "linked-home").symlink_to(tmp_path / "home")
    (run.root / "logs").unlink()
    run.logs.mkdir()
    (run.logs / "rank-0.log").write_text("fine\n")
    through = RunDir(tmp_path / "linked-home" / "run")
    assert tail_lines(through.rank_log(0), 5, below=through.root) == ["fine"]


def tracked(home: Path, secret: Path, links: list[str]) -> RunDir:
    """A failed run in the index under `home` whose files `links` are links to `secret`."""
    run = track(home, "999997", JobState.FAILED, name="linked")
    for name in links:
        (run.root / name).symlink_to(secret)
    return run


def hpctrain(home: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hpctrain.cli.main", *argv],
        capture_output=True,
        text=True,
        env={**os.environ, "HPCTRAIN_HOME": str(home), "PYTHONPATH": str(REPO)},
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("argv", [["logs"], ["logs", "-n", "5"], ["logs", "--all-ranks"]])
def test_logs_refuses_a_linked_log_in_one_line(tmp_path: Path, secret: Path, argv: list[str]) -> None:
    run = tracked(tmp_path / "home", secret, ["logs/batch.log", "logs/rank-0.log"])
    done = hpctrain(tmp_path / "home", *argv, run.root.name)
    assert SECRET not in done.stdout + done.stderr
    assert done.returncode == 1 and done.stderr.count("\n") == 1 and NOT_FOLLOWED in done.stderr


@pytest.mark.parametrize("argv", [["logs"], ["logs", "--all-ranks"]])
def test_logs_refuses_a_linked_folder(tmp_path: Path, argv: list[str]) -> None:
    run = linked_folders(tmp_path)
    done = hpctrain(tmp_path / "home", *argv, run.root.name)
    assert SECRET not in done.stdout + done.stderr
    assert done.returncode == 1 and NOT_FOLLOWED in done.stderr and done.stderr.count("\n") == 1, done.stderr


def linked_folders(tmp_path: Path) -> RunDir:
    """A tracked failed run whose logs/ and failures/ are links to a folder of secrets (`logs -> /etc`)."""
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    for name in ("batch.log", "rank-0.log", "rank-1.log"):
        (outside / name).write_text(f"{SECRET}\n")
    hang = {"time": 1.0, "summary": f"rank 0 on {SECRET} hung at step 3 (backward)"}
    (outside / "hang.json").write_text(json.dumps(hang))
    (outside / "rank-0.json").write_text(
        json.dumps({"rank": 0, "hostname": SECRET, "message": SECRET, "time": 1.0})
    )
    run = tracked(tmp_path / "home", outside, [])
    for folder in (run.logs, run.failures):
        if folder.exists():
            shutil.rmtree(folder)
        folder.symlink_to(outside)
    return run


@pytest.mark.parametrize("verb", ["status", "report"])
def test_status_and_report_read_nothing_through_a_linked_folder(tmp_path: Path, verb: str) -> None:
    """Issue 23: `failures -> elsewhere` made status print the planted hang.json's summary."""
    run = linked_folders(tmp_path)
    done = hpctrain(tmp_path / "home", verb, run.root.name)
    assert done.returncode == 0, done.stderr
    written = "".join(p.read_text() for p in (run.root / "report").glob("*.md")) if verb == "report" else ""
    assert SECRET not in done.stdout + done.stderr + written


@pytest.mark.parametrize("verb", ["status", "report"])
def test_status_and_report_name_the_link_and_show_nothing_of_its_target(
    tmp_path: Path, secret: Path, verb: str
) -> None:
    links = ["logs/batch.log", "logs/rank-0.log", "metrics.jsonl", "result.json", "spec.json"]
    run = tracked(tmp_path / "home", secret, links)
    done = hpctrain(tmp_path / "home", verb, run.root.name)
    assert done.returncode == 0, done.stderr
    written = "".join(p.read_text() for p in (run.root / "report").glob("*.md")) if verb == "report" else ""
    assert SECRET not in done.stdout + done.stderr + written
    assert f"result.json: unreadable ({NOT_FOLLOWED})" in done.stdout or NOT_FOLLOWED in written
