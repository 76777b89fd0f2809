"""Optuna sweeps on the real local Slurm cluster: rounds of trials as one array each, the study told each
trial's result; a sweep cancelled mid-way and resumed carries its study on."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hpctrain import rundir, spec
from hpctrain.rundir import names
from tests import tmpfs
from tests.conftest import JOBS, REPO, run_cli
from tests.integration.cluster import cancel_leftovers

optuna = pytest.importorskip("optuna", reason="sweep.sampler optuna needs the `sweep` extra (optuna)")

pytestmark = pytest.mark.cluster

HERE = Path(__file__).resolve().parent
JOB = str(JOBS / "digits-optuna.yaml")
QUEUE_TIMEOUT = 600  # the cluster is shared: trials may wait behind other tests' jobs
QUICK = ["--set", "train.steps=20", "--set", "train.eval_every=10"]
# About 10 s a trial: time to cancel the sweep while a round runs.
SLOW = [
    "--set",
    "train.entrypoint=_runtime_job:slow_digits",
    "--set",
    "train.options.delay_s=0.2",
    "--set",
    "train.steps=40",
    "--set",
    "train.eval_every=10",
    "--set",
    f"env.PYTHONPATH={REPO}{os.pathsep}{HERE}",
]
SUBMITTED: list[str] = []


@pytest.fixture(autouse=True)
def _cluster() -> Iterator[None]:
    yield from cancel_leftovers(SUBMITTED)


def sweep_status(key: str | None = None) -> list[dict[str, Any]]:
    proc = run_cli("sweep", "status", *([key] if key else []), "--json")
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout)
    SUBMITTED.extend(a.split()[0] for s in found for a in s["arrays"])
    return found


def load_study(root: Path) -> Any:
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    storage = JournalStorage(JournalFileBackend(str(root / names.STUDY_JOURNAL)))
    return optuna.load_study(study_name="sweep", storage=storage)


def ran_with(element: Path) -> dict[str, Any]:
    """What the trial trained with: its learning rate from its metrics lines, the rest from its own
    recorded spec."""
    lines = [json.loads(x) for x in (element / rundir.METRICS).read_text().splitlines()]
    train = spec.loads((element / rundir.SPEC).read_bytes()).job.train
    return {
        "train.lr": next(m["lr"] for m in lines if m["kind"] == "train"),
        "train.batch_size": train.batch_size,
        "train.options.hidden": train.options["hidden"],
        "train.options.dropout": train.options["dropout"],
    }


def check_told_trials(root: Path, study: Any) -> None:
    """Every finished study trial ran in its own array-N/ with the study's values, and the study was
    told the eval loss of its result."""
    for trial in study.get_trials(states=(optuna.trial.TrialState.COMPLETE,)):
        element = root / names.ARRAY_ELEMENT.name(trial.number)
        assert ran_with(element) == pytest.approx(trial.params)
        result = rundir.read_json(element / rundir.RESULT, rundir.Result)
        assert isinstance(result, rundir.Result) and result.status == "completed", result
        assert trial.value == pytest.approx(result.eval_loss)


def test_an_optuna_sweep_of_digits_finishes_in_rounds_of_one_array(hpctrain_home: Path) -> None:
    args = ["--site", "local", "--budget", "6", "--round-size", "3", *QUICK, "--json"]
    proc = run_cli("sweep", JOB, *args, timeout=QUEUE_TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    submitted = json.loads(proc.stdout)
    SUBMITTED.extend(a["job_id"] for a in submitted["arrays"])
    root = Path(submitted["run_dir"])
    assert [(a["offset"], a["count"]) for a in submitted["arrays"]] == [(0, 3), (3, 3)]

    (summary,) = sweep_status(submitted["sweep_id"])
    assert summary["counts"] == {"COMPLETED": 6}, summary["trials"]
    study = load_study(root)
    assert [t.number for t in study.get_trials()] == list(range(6))
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in study.get_trials())
    check_told_trials(root, study)
    assert summary["best"]["index"] == study.best_trial.number
    assert summary["best"]["metric"] == pytest.approx(study.best_value)


@contextlib.contextmanager
def sweep_loop(budget: int, *overrides: str) -> Iterator[subprocess.Popen[str]]:
    """`hpctrain sweep` of the digits study, in rounds of two, running in the background (killed if it
    still runs afterwards)."""
    args = ["--site", "local", "--budget", str(budget), "--round-size", "2", *overrides]
    loop = subprocess.Popen(
        [sys.executable, "-m", "hpctrain.cli.main", "sweep", JOB, *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield loop
    finally:
        if loop.poll() is None:
            loop.kill()


def until_trials(loop: subprocess.Popen[str], count: int) -> dict[str, Any]:
    """The sweep's status once it has `count` trials out, its loop still running."""
    deadline = time.monotonic() + QUEUE_TIMEOUT
    while True:
        assert loop.poll() is None, loop.communicate()
        found = sweep_status()
        if found and len(found[0]["trials"]) >= count:
            return found[0]
        assert time.monotonic() < deadline, found
        time.sleep(0.5)


def test_a_cancelled_optuna_sweep_resumes_where_it_was(hpctrain_home: Path) -> None:
    with sweep_loop(5, *SLOW) as loop:
        summary = until_trials(loop, 4)  # the second round is out and the first told
        cancel = run_cli("sweep", "cancel", summary["sweep_id"])
        assert cancel.returncode == 0, cancel.stderr
        out, err = loop.communicate(timeout=120)
    assert loop.returncode == 0, err
    assert f"carry on: hpctrain sweep resume {summary['sweep_id']}" in out
    root = hpctrain_home / "runs" / summary["sweep_id"]
    before = load_study(root)
    cancelled = [t for t in before.get_trials() if t.user_attrs.get("cancelled")]
    assert [t.number for t in cancelled] == [2, 3], [(t.number, t.state) for t in before.get_trials()]
    assert len(before.get_trials(states=(optuna.trial.TrialState.COMPLETE,))) == 2

    resumed = run_cli("sweep", "resume", summary["sweep_id"], "--json", timeout=QUEUE_TIMEOUT)
    assert resumed.returncode == 0, resumed.stderr
    study = load_study(root)
    trials = study.get_trials()
    # The count carries on: the cancelled trials' settings are asked again as 4 and 5, then 6.
    assert [t.number for t in trials] == list(range(7))
    complete = [t.number for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert complete == [0, 1, 4, 5, 6]
    assert [trials[4].params, trials[5].params] == [trials[2].params, trials[3].params]
    check_told_trials(root, study)
    record = rundir.read_json(root / names.SWEEP, rundir.SweepRecord)
    assert isinstance(record, rundir.SweepRecord)
    SUBMITTED.extend(c.job_id for c in record.arrays if c.job_id)
    # One folder per study trial, none twice: the sweep's trials are the study's.
    assert [t.index for t in record.trials] == list(range(7))
    assert [(c.offset, c.count) for c in record.arrays] == [(0, 2), (2, 2), (4, 2), (6, 1)]
    assert sorted(p.name for p in root.glob("array-*")) == sorted(
        names.ARRAY_ELEMENT.name(i) for i in range(7)
    )


def test_an_optuna_sweep_out_of_disk_stops_with_one_line_and_resumes_once_there_is_room(
    hpctrain_home: Path,
) -> None:
    with tmpfs.small_tmpfs(hpctrain_home, "64m") as home:
        # SLOW: quick trials could end, and the loop send its second round, before the Ctrl-C.
        with sweep_loop(4, *SLOW) as loop:
            # Stop the loop (Ctrl-C) once the first round is out, and let that round finish.
            sweep_id = until_trials(loop, 1)["sweep_id"]
            loop.send_signal(signal.SIGINT)
            loop.communicate(timeout=60)
        deadline = time.monotonic() + QUEUE_TIMEOUT
        while sweep_status()[0]["counts"] != {"COMPLETED": 2}:
            assert time.monotonic() < deadline, sweep_status()
            time.sleep(1)
        root = home / "runs" / sweep_id
        filler = tmpfs.fill(home)
        full = run_cli("sweep", "resume", sweep_id)
        journal = root / names.STUDY_JOURNAL
        assert full.returncode != 0 and full.stderr == (
            f"hpctrain: error: {journal}: the sweep's study cannot record (No space left on device); "
            f"nothing it recorded is lost: make room, then run `hpctrain sweep resume {sweep_id}`\n"
        )
        filler.unlink()
        resumed = run_cli("sweep", "resume", sweep_id, "--json", timeout=QUEUE_TIMEOUT)
        assert resumed.returncode == 0, resumed.stderr
        study = load_study(root)
        complete = study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
        assert [t.number for t in complete] == [0, 1, 2, 3]
        check_told_trials(root, study)
        record = rundir.read_json(root / names.SWEEP, rundir.SweepRecord)
        assert isinstance(record, rundir.SweepRecord)
        SUBMITTED.extend(c.job_id for c in record.arrays if c.job_id)
        assert [(c.offset, c.count) for c in record.arrays] == [(0, 2), (2, 2)]


def test_a_round_above_max_array_size_is_refused_before_anything_is_written(hpctrain_home: Path) -> None:
    from hpctrain.scheduler.slurm.cli import SlurmCliBackend

    largest = SlurmCliBackend().limits().max_array_size
    args = ["--site", "local", "--budget", str(largest + 1), "--round-size", str(largest + 1)]
    proc = run_cli("sweep", JOB, *args, "--max-trials", str(largest + 1), *QUICK)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert f"sweep.round_size: a round of {largest + 1} trials" in proc.stderr
    assert f"MaxArraySize={largest}; give --round-size {largest} or fewer" in proc.stderr
    runs = hpctrain_home / "runs"
    assert not runs.exists() or not any(runs.iterdir())


def test_a_round_the_scheduler_refused_is_sent_by_resume(hpctrain_home: Path, tmp_path: Path) -> None:
    """sbatch refuses the second round (as it refused one above MaxArraySize): the loop stops with one
    line saying how to carry on, status says the round was never queued, and resume sends it."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "sbatch-calls"
    (bin_dir / "sbatch").write_text(
        "#!/bin/sh\n"
        f'echo x >> "{calls}"\n'
        f'if [ "$(wc -l < "{calls}")" -eq 2 ]; then\n'
        '  echo "sbatch: error: Batch job submission failed: Invalid job array specification" >&2; exit 1\n'
        "fi\n"
        'exec /usr/bin/sbatch "$@"\n'
    )
    (bin_dir / "sbatch").chmod(0o755)
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    args = ["--site", "local", "--budget", "4", "--round-size", "2", *QUICK]
    proc = run_cli("sweep", JOB, *args, env=env, timeout=QUEUE_TIMEOUT)
    assert proc.returncode == 1, proc.stderr
    (summary,) = sweep_status()
    sweep_id = summary["sweep_id"]
    assert proc.stderr.strip().endswith(f"carry on with hpctrain sweep resume {sweep_id}"), proc.stderr
    assert summary["counts"] == {"COMPLETED": 2, "NOT_QUEUED": 2}, summary["trials"]

    resumed = run_cli("sweep", "resume", sweep_id, "--json", timeout=QUEUE_TIMEOUT)
    assert resumed.returncode == 0, resumed.stderr
    (summary,) = sweep_status(sweep_id)
    assert summary["counts"] == {"COMPLETED": 4}, summary["trials"]
    root = hpctrain_home / "runs" / sweep_id
    study = load_study(root)
    assert [t.number for t in study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))] == [0, 1, 2, 3]
    check_told_trials(root, study)
