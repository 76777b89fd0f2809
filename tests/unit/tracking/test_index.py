"""The run index: concurrent writers, torn and garbage lines, compaction; record.json under concurrency."""

from __future__ import annotations

import json
import multiprocessing
import os
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpctrain import rundir
from hpctrain.scheduler.base import JobState
from hpctrain.tracking import index as records
from hpctrain.tracking import index_lines
from hpctrain.tracking.index import Index, RunRecord, write_record

DAY = 24 * 3600


def make_run(
    index: Index, name: str, job_id: str | None, state: str = "PENDING", age_s: float = 0.0
) -> RunRecord:
    run_id, run_dir = index.new_run_dir(name)
    at = time.time() - age_s
    run = RunRecord(
        run_id=run_id,
        job_id=job_id,
        name=name,
        site="local",
        backend="slurm",
        run_dir=run_dir,
        submitted_at=at,
        state=state,
        state_at=at,
    )
    index.add(run)
    return run


def _add_many(root: str, worker: int, count: int) -> None:
    index = Index(Path(root))
    for i in range(count):
        make_run(index, f"job{worker}", f"{worker}{i:03d}")


@pytest.fixture(autouse=True)
def _warn_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test sees the one-per-process warning afresh."""
    monkeypatch.setattr(index_lines, "_warned", False)


def test_concurrent_submitters_keep_every_record(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_add_many, args=(str(tmp_path), w, 25)) for w in range(4)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(60)
        assert proc.exitcode == 0
    runs = Index(tmp_path).runs()
    assert len(runs) == 100
    assert len({r.run_id for r in runs}) == 100
    assert all((r.run_dir / "record.json").exists() for r in runs)


def test_state_history_and_lookup(tmp_path: Path) -> None:
    index = Index(tmp_path)
    run = make_run(index, "x", "77")
    index.update_states([(run, "RUNNING", "")])
    index.update_states([(run, "RUNNING", "")])  # unchanged: no new history row
    index.update_states([(run, "COMPLETED", "")])
    assert [h[0] for h in index.history(run.run_id)] == ["PENDING", "RUNNING", "COMPLETED"]
    found, missing = index.find(["77", run.run_id, run.run_id[:20], "20990101-000000-nope"])
    assert [r.run_id for r in found] == [run.run_id] * 3
    assert missing == ["20990101-000000-nope"]


def test_torn_last_line_does_not_swallow_the_next_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    index = Index(tmp_path)
    first = make_run(index, "a", "1")
    with open(index.path, "ab") as handle:  # a writer died in the middle of its line
        handle.write(b'{"op":"add","run_id":"torn","job_id":"9","na')
    second = make_run(index, "b", "2")
    assert {r.run_id for r in index.runs()} == {first.run_id, second.run_id}
    err = capsys.readouterr().err
    assert err.count("warning") == 1 and "index.jsonl" in err


BAD_LINES = [
    b"[1]",
    b'{"op":"add","run_id":"x"}',
    b'{"op":"add","run_id":"x","job_id":"5","name":"n","site":"s","backend":"slurm",'
    b'"run_dir":"/tmp/x","submitted_at":"yesterday","state":"PENDING","state_at":1}',
    b'{"op":"state","run_id":"x","state":"RUNNING"}',
    b'{"op":"rename","run_id":"x"}',
    b"\xff\xfe\x00garbage",
    b'"a string"',
    b"null",
    b'{"op":"add","run_id":"",' + b"1" * 20,
]


@pytest.mark.parametrize("bad", BAD_LINES)
def test_a_bad_line_is_skipped_with_one_warning(
    bad: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    index = Index(tmp_path)
    before = make_run(index, "a", "1")
    with open(index.path, "ab") as handle:
        handle.write(bad + b"\n" + bad + b"\n")
    after = make_run(index, "b", "2")
    assert {r.run_id for r in index.runs()} == {before.run_id, after.run_id}
    assert {r.run_id for r in index.recent()} == {before.run_id, after.run_id}
    assert [r.run_id for r in index.find(["2"])[0]] == [after.run_id]
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "skipped 2 unreadable line(s)" in err
    report = index.check()
    assert [n for _, n, _ in report.bad_lines] == [2, 3]
    assert index.compact().rejected == 2
    assert index.rejected_path.read_bytes().count(b"\n") == 2
    assert index.check().bad_lines == []
    assert {r.run_id for r in index.runs()} == {before.run_id, after.run_id}


def test_an_unknown_field_is_ignored_not_fatal(tmp_path: Path) -> None:
    index = Index(tmp_path)
    run = make_run(index, "a", "1")
    line = json.loads(index.path.read_text())
    index.path.write_text(json.dumps({**line, "from_a_newer_version": [1, 2]}) + "\n")
    assert [r.run_id for r in index.runs()] == [run.run_id]


def test_short_writes_are_completed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_write = os.write
    monkeypatch.setattr(index_lines.os, "write", lambda fd, data: real_write(fd, bytes(data[:7])))
    index = Index(tmp_path)
    runs = [make_run(index, "a", str(i)) for i in range(3)]
    assert {r.run_id for r in index.runs()} == {r.run_id for r in runs}


def test_compaction_archives_ended_runs_and_keeps_them_findable(tmp_path: Path) -> None:
    index = Index(tmp_path)
    old = [make_run(index, "old", f"1{i}", "COMPLETED", age_s=2 * DAY + i) for i in range(5)]
    recent_end = make_run(index, "fresh", "20", "FAILED", age_s=60)
    active = make_run(index, "active", "30", "RUNNING", age_s=3 * DAY)
    index.update_states([(active, "RUNNING", "on node1")])
    done = index.compact()
    assert (done.moved, done.archived, done.active) == (5, 5, 2)
    journal = index.path.read_text()
    assert all(r.run_id not in journal for r in old)
    assert {r.run_id for r in index.runs()} == {r.run_id for r in [*old, recent_end, active]}
    assert {r.run_id for r in index.recent()} == {recent_end.run_id, active.run_id}
    assert [h[2] for h in index.history(active.run_id)] == ["", "on node1"]
    # The archive is read only as far as needed, and answers the same.
    assert [r.run_id for r in index.runs(limit=3)] == [r.run_id for r in index.runs()[:3]]
    found, missing = index.find(["12", old[3].run_id[:-1], old[0].run_id + "x"])
    assert [r.job_id for r in found] == ["12", "13"] and missing == [old[0].run_id + "x"]
    # A change to an archived run is a journal line that wins over the archive.
    index.update_states([(found[0], "COMPLETED", "cancel requested")])
    again = Index(tmp_path)
    assert again.find(["12"])[0][0].reason == "cancel requested"
    assert found[0].run_id in {r.run_id for r in again.recent()}
    again.compact()
    assert again.find(["12"])[0][0].reason == "cancel requested"


def test_the_journal_compacts_itself_past_its_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(records, "JOURNAL_LIMIT_BYTES", 4096)
    index = Index(tmp_path)
    runs = [make_run(index, "old", str(i), "COMPLETED", age_s=2 * DAY) for i in range(60)]
    assert index.archive_path.exists()
    assert index.path.stat().st_size <= 2 * 4096
    assert {r.run_id for r in index.runs()} == {r.run_id for r in runs}
    assert index.recent() == []


def test_check_finds_unindexed_run_directories(tmp_path: Path) -> None:
    index = Index(tmp_path)
    make_run(index, "a", "1")
    (tmp_path / "runs" / "20260101-000000-stray-abcdef").mkdir()
    assert index.check().unindexed_dirs == ["20260101-000000-stray-abcdef"]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(garbage=st.lists(st.binary(max_size=80), max_size=6), newline=st.booleans())
def test_any_garbage_between_appends_loses_nothing(
    tmp_path: Path, garbage: list[bytes], newline: bool
) -> None:
    root = tmp_path / os.urandom(6).hex()
    index = Index(root)
    added = []
    for chunk in garbage:
        added.append(make_run(index, "g", str(len(added))).run_id)
        with open(index.path, "ab") as handle:
            handle.write(chunk + (b"\n" if newline else b""))
    added.append(make_run(index, "g", "last").run_id)
    assert {r.run_id for r in index.runs()} == set(added)
    index.compact()
    assert {r.run_id for r in Index(root).runs()} == set(added)


def _rewrite_record(run_dir: str, count: int) -> None:
    run = RunRecord(
        run_id="r",
        job_id="1",
        name="n",
        site="s",
        backend="slurm",
        run_dir=Path(run_dir),
        submitted_at=0.0,
        state="PENDING",
        state_at=0.0,
    )
    for i in range(count):
        run.reason = "x" * (i % 50 * 4000)  # up to 200 kB: written in several write() calls
        write_record(run)


def _read_records(run_dir: str, count: int, failures: multiprocessing.Value) -> None:  # type: ignore[valid-type]
    path = Path(run_dir) / "record.json"
    for _ in range(count):
        try:
            json.loads(path.read_bytes())
        except (OSError, ValueError):
            with failures.get_lock():  # type: ignore[attr-defined]
                failures.value += 1  # type: ignore[attr-defined]


def test_record_json_is_whole_under_concurrent_writers_and_readers(tmp_path: Path) -> None:
    _rewrite_record(str(tmp_path), 1)
    ctx = multiprocessing.get_context("fork")
    failures = ctx.Value("i", 0)
    procs = [ctx.Process(target=_rewrite_record, args=(str(tmp_path), 1500)) for _ in range(4)]
    procs += [ctx.Process(target=_read_records, args=(str(tmp_path), 3000, failures)) for _ in range(3)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(120)
        assert proc.exitcode == 0
    assert failures.value == 0
    assert not list(tmp_path.glob("*.tmp")), "temporary files were left behind"


def test_index_lines_of_earlier_versions_decode_as_the_one_run_record(tmp_path: Path) -> None:
    """index.jsonl as versions before the one run record wrote it: every field, reason "" included."""
    index = Index(tmp_path)
    old = (
        b'{"op":"add","run_id":"20260101-000000-a-1","job_id":"41","name":"a","site":"local",'
        b'"backend":"slurm","run_dir":"/x/runs/20260101-000000-a-1","submitted_at":1.5,'
        b'"state":"PENDING","state_at":1.5,"reason":""}\n'
        b'{"op":"state","run_id":"20260101-000000-a-1","state":"COMPLETED","at":9.0,"reason":""}\n'
        b'{"op":"add","run_id":"20260101-000000-b-2","job_id":null,"name":"b","site":"local",'
        b'"backend":"slurm","run_dir":"/x/runs/20260101-000000-b-2","submitted_at":2.5,'
        b'"state":"SUBMIT_FAILED","state_at":2.5,"reason":"sbatch failed: no partition"}\n'
    )
    index.path.write_bytes(old)
    failed, done = index.runs()
    assert isinstance(done, rundir.RunRecord) and done.state is JobState.COMPLETED and done.state_at == 9.0
    assert done.run_dir == Path("/x/runs/20260101-000000-a-1") and done.job_id == "41"
    assert failed.state is JobState.SUBMIT_FAILED and failed.reason == "sbatch failed: no partition"
    assert index.history(done.run_id) == [(JobState.PENDING, 1.5, ""), (JobState.COMPLETED, 9.0, "")]


def killed_before_recording(index: Index, age_s: float) -> Path:
    """What a submit SIGKILLed before it recorded its run leaves: a run directory with its spec and
    submit.json, changed `age_s` ago, that the index does not know."""
    _, run_dir = index.new_run_dir("killed")
    rundir.write_json(run_dir / rundir.SUBMIT, rundir.SubmitInfo(job="j.yaml", site="local", backend="slurm"))
    (run_dir / rundir.SPEC).write_text("{}")
    then = time.time() - age_s
    os.utime(run_dir, (then, then))
    return run_dir


def test_a_directory_whose_submit_was_killed_is_a_run_that_never_submitted(tmp_path: Path) -> None:
    """Issue 23: such a directory made `index check` exit 1, and list and status never showed it."""
    from tests.conftest import run_cli

    env = {"HPCTRAIN_HOME": str(tmp_path)}
    index = Index(tmp_path)
    make_run(index, "fine", "7", state="COMPLETED")
    killed = killed_before_recording(index, age_s=600)
    young = killed_before_recording(index, age_s=0)  # a submit still writing its files: left alone
    check = run_cli("index", "check", env=env)
    assert check.returncode == 0, check.stdout + check.stderr
    assert f"run {killed.name}: no job; SUBMIT_FAILED: {records.UNSUBMITTED}" in check.stdout
    assert young.name not in {r.run_id for r in index.runs()}
    run = next(r for r in index.runs() if r.run_id == killed.name)
    assert (run.name, run.site, run.backend, run.job_id) == ("killed", "local", "slurm", None)
    assert run_cli("index", "check", env=env).stdout.count(killed.name) == 0  # recorded once


@pytest.mark.parametrize(
    "argv", [["list"], ["list", "--all"], ["status"], ["status", "--all"], ["status", "{run_id}"]]
)
def test_list_and_status_show_a_killed_submit_as_never_submitted(tmp_path: Path, argv: list[str]) -> None:
    from tests.conftest import run_cli

    killed = killed_before_recording(Index(tmp_path), age_s=600)
    shown = run_cli(*(arg.format(run_id=killed.name) for arg in argv), env={"HPCTRAIN_HOME": str(tmp_path)})
    # Named, a run that was never submitted makes `status` exit 1, as for a submit sbatch refused.
    assert shown.returncode == (1 if killed.name in argv[-1:] or "{run_id}" in argv else 0), shown.stderr
    line = next(line for line in shown.stdout.splitlines() if "SUBMIT_FAILED" in line)
    assert killed.name in line or "killed" in line, shown.stdout
    assert "Traceback" not in shown.stderr
