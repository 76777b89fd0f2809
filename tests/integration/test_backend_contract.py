"""One contract for every scheduler backend, exercised for real: submit, poll, cancel, unknown ids, logs."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from hpctrain.scheduler.base import Backend, BackendError, JobInfo, JobState
from hpctrain.scheduler.render import BatchOptions, Directive
from tests.integration.cluster import make_eligible

# Slurm on a shared two-node test host can keep a job PENDING for a while behind other people's jobs.
TERMINAL_WAIT_S = 180.0
RUNNING_WAIT_S = 120.0
POLL_EVERY_S = 0.5
SCHEDULER_COMMANDS = {"sbatch", "squeue", "sacct", "scancel", "scontrol", "sinfo"}


@dataclass
class Harness:
    """A backend plus what the contract needs to know about it to check its costs."""

    kind: str
    backend: Backend
    tmp: Path
    queries: Callable[[], Counter[str]]
    """Scheduler queries made so far, by name."""
    controller_query: str | None
    """The one query a poll must make to the controller (None: the backend asks no scheduler)."""
    archive_query: str | None
    """The query allowed once more per poll, for jobs the controller has forgotten (accounting)."""
    unknown_id: str
    has_test_only: bool
    is_slurm: bool
    """Slurm behind it: job arrays, heterogeneous jobs and requeue exist."""
    per_job_query: str | None = None
    """The query a poll of a few jobs makes once per job instead of the controller_query."""
    per_job_limit: int = 0
    """Polls of up to this many jobs make per_job_query (0: every poll makes the controller_query)."""
    submitted: list[str] = field(default_factory=list)

    def run_dir(self, name: str) -> Path:
        # Slurm does not create the directory of --output; render does, so the test does too.
        path = self.tmp / name
        (path / "logs").mkdir(parents=True, exist_ok=True)
        return path

    def submit(
        self, run_dir: Path, body: str, *extra: Directive, components: int = 1, log: str = "batch.log"
    ) -> str:
        """Submit `body` with the contract's options (plus `extra`), as the script and as data alike."""
        job_wide = [
            Directive("job-name", "hpctrain-contract"),
            Directive("output", f"{run_dir}/logs/{log}"),
            Directive("time", "00:05:00"),
            *extra,
        ]
        per_component = [Directive("ntasks", "1"), Directive("cpus-per-task", "1"), Directive("mem", "100M")]
        batch: BatchOptions = [job_wide + per_component] + [per_component for _ in range(components - 1)]
        blocks = ["\n".join(f"#SBATCH {d.text}" for d in component) for component in batch]
        script = run_dir / "job.sh"
        script.write_text("#!/bin/bash\n" + "\n#SBATCH hetjob\n".join(blocks) + f"\n{body}\n")
        job_id = self.backend.submit(script, run_dir, batch)
        assert isinstance(job_id, str) and job_id, f"submit returned {job_id!r}"
        self.submitted.append(job_id)
        return job_id

    def wait(self, job_id: str, done: Callable[[JobInfo], bool], timeout: float) -> JobInfo:
        deadline = time.monotonic() + timeout
        while True:
            info = self.backend.poll([job_id])[job_id]
            if done(info) or time.monotonic() > deadline:
                return info
            time.sleep(POLL_EVERY_S)

    def finish(self, job_id: str) -> JobInfo:
        info = self.wait(job_id, lambda i: i.state.terminal, TERMINAL_WAIT_S)
        assert info.state.terminal, f"{self.kind} job {job_id} still {info.state} after {TERMINAL_WAIT_S} s"
        return info


def count_commands(monkeypatch: pytest.MonkeyPatch) -> Callable[[], Counter[str]]:
    """Count the scheduler commands run through subprocess.run from now on."""
    counts: Counter[str] = Counter()
    real_run = subprocess.run

    def counting_run(args, *rest, **kwargs):  # type: ignore[no-untyped-def]
        argv = [args] if isinstance(args, str) else list(args)
        command = Path(str(argv[0])).name if argv else ""
        if command in SCHEDULER_COMMANDS:
            counts[command] += 1
        return real_run(args, *rest, **kwargs)

    monkeypatch.setattr(subprocess, "run", counting_run)
    return lambda: Counter(counts)


def cluster_problem() -> str | None:
    """Why the real Slurm cluster cannot be used, or None when it can."""
    if shutil.which("sinfo") is None:
        return "sinfo is not on PATH (no Slurm here)"
    try:
        proc = subprocess.run(
            ["sinfo", "--noheader", "--format=%T"], capture_output=True, text=True, timeout=15
        )
    except subprocess.TimeoutExpired:
        return "sinfo did not answer within 15 s"
    if proc.returncode != 0:
        return f"sinfo failed: {proc.stderr.strip()}"
    usable = {"idle", "mixed", "allocated", "completing", "planned"}
    if not any(state.rstrip("*~#") in usable for state in proc.stdout.split()):
        return f"no usable node (sinfo: {' '.join(proc.stdout.split()) or 'nothing'})"
    return None


def make_local(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> Harness:
    from hpctrain.scheduler.local import LocalBackend

    monkeypatch.setenv("HPCTRAIN_HOME", str(tmp / "home"))
    return Harness("local", LocalBackend(), tmp, count_commands(monkeypatch), None, None,
                   unknown_id="local-999999999", has_test_only=False, is_slurm=False)  # fmt: skip


def make_slurm_cli(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> Harness:
    problem = cluster_problem()
    if problem:
        pytest.skip(f"slurm_cli: {problem}; start one with scripts/local-cluster.sh up")
    from hpctrain.scheduler.slurm.cli import SlurmCliBackend

    return Harness("slurm_cli", SlurmCliBackend(), tmp, count_commands(monkeypatch), "squeue", "sacct",
                   unknown_id="999999990", has_test_only=True, is_slurm=True)  # fmt: skip


def make_pyslurm(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> Harness:
    from hpctrain.scheduler.slurm import pyslurm as pyslurm_backend

    ok, reason = pyslurm_backend.available()
    if not ok:
        print(f"pyslurm backend skipped: {reason}")
        pytest.skip(f"pyslurm: {reason}")
    backend = pyslurm_backend.PyslurmBackend()
    return Harness("pyslurm", backend, tmp, lambda: Counter(backend.rpc_calls), "load_jobs", "db_load_jobs",
                   unknown_id="999999990", has_test_only=False, is_slurm=True,
                   per_job_query="load_job", per_job_limit=backend.per_id_limit)  # fmt: skip


FACTORIES: dict[str, Callable[[Path, pytest.MonkeyPatch], Harness]] = {
    "local": make_local,
    "slurm_cli": make_slurm_cli,
    "pyslurm": make_pyslurm,
}


@pytest.fixture(params=["local", pytest.param("slurm_cli", marks=pytest.mark.cluster), "pyslurm"])
def harness(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Harness]:
    h = FACTORIES[request.param](tmp_path, monkeypatch)
    yield h
    # A failed test must not leave `sleep` jobs holding the shared cluster's nodes.
    leftover = [j for j, info in h.backend.poll(h.submitted).items() if not info.state.terminal]
    if leftover:
        h.backend.cancel(leftover)


def test_job_completes_and_its_log_is_found(harness: Harness) -> None:
    run_dir = harness.run_dir("ok")
    job_id = harness.submit(run_dir, 'echo "contract says $((6 * 7))"')
    info = harness.finish(job_id)
    assert info.state is JobState.COMPLETED, info
    assert info.job_id == job_id
    batch_log = run_dir / "logs" / "batch.log"
    assert batch_log.exists(), f"no logs/batch.log in {run_dir}: {sorted(run_dir.rglob('*'))}"
    assert "contract says 42" in batch_log.read_text()


def test_failing_script_is_failed(harness: Harness) -> None:
    job_id = harness.submit(harness.run_dir("fail"), "echo about to fail; exit 3")
    info = harness.finish(job_id)
    assert info.state is JobState.FAILED, info
    # squeue reports no exit code; where a backend does, it is the script's.
    assert info.exit_code in ("", "3") or info.exit_code.startswith("3:"), info


def test_running_job_can_be_cancelled(harness: Harness) -> None:
    job_id = harness.submit(harness.run_dir("long"), "echo started; sleep 300")
    running = harness.wait(job_id, lambda i: i.state is JobState.RUNNING, RUNNING_WAIT_S)
    assert running.state is JobState.RUNNING, running
    harness.backend.cancel([job_id])
    info = harness.finish(job_id)
    assert info.state is JobState.CANCELLED, info


def test_cancelling_a_finished_job_changes_nothing(harness: Harness) -> None:
    job_id = harness.submit(harness.run_dir("done"), "true")
    assert harness.finish(job_id).state is JobState.COMPLETED
    harness.backend.cancel([job_id])
    info = harness.backend.poll([job_id])[job_id]
    assert info.state is JobState.COMPLETED, info


def test_unknown_id_is_unknown_not_an_error(harness: Harness) -> None:
    assert harness.backend.poll([]) == {}
    info = harness.backend.poll([harness.unknown_id])[harness.unknown_id]
    assert info.state is JobState.UNKNOWN, info
    assert info.job_id == harness.unknown_id


def test_poll_cost_is_bounded_whatever_the_number_of_jobs(harness: Harness) -> None:
    job_ids = [harness.submit(harness.run_dir(f"many-{n}"), "true") for n in range(3)]
    for job_id in job_ids:
        harness.finish(job_id)
    # More ids than a backend ever asks for one by one.
    unknown = [
        str(int(harness.unknown_id.rsplit("-", 1)[-1]) - n) for n in range(1, 41 + harness.per_job_limit)
    ]
    if harness.kind == "local":
        unknown = [f"local-{u}" for u in unknown]

    costs = []
    for wanted in (job_ids[:1], job_ids + unknown):
        before = harness.queries()
        answer = harness.backend.poll(wanted)
        costs.append((len(wanted), harness.queries() - before))
        assert set(answer) == set(wanted)
    assert all(answer[j].state is JobState.COMPLETED for j in job_ids), answer
    assert all(answer[u].state is JobState.UNKNOWN for u in unknown)

    for polled, cost in costs:
        if harness.controller_query is None:
            assert not cost, f"{harness.kind} asked a scheduler: {dict(cost)}"
            continue
        if polled <= harness.per_job_limit:
            # A few plain jobs: one query each, never a load of the whole queue.
            assert cost[harness.per_job_query or ""] == polled, dict(cost)
            assert cost[harness.controller_query] == 0, dict(cost)
        else:
            assert cost[harness.controller_query] == 1, dict(cost)
            assert cost[harness.per_job_query or ""] == 0, dict(cost)
        assert cost[harness.archive_query or ""] <= 1, dict(cost)
        asked = {harness.controller_query, harness.per_job_query, harness.archive_query}
        assert set(cost) <= asked, dict(cost)


def test_test_only_answers_or_refuses_cleanly(harness: Harness) -> None:
    run_dir = harness.run_dir("test-only")
    script = run_dir / "job.sh"
    script.write_text("#!/bin/bash\n#SBATCH --ntasks=1\n#SBATCH --time=00:01:00\ntrue\n")
    if harness.has_test_only:
        answer = harness.backend.test_only(script)
        assert isinstance(answer, str) and answer, answer
    else:
        with pytest.raises(BackendError):
            harness.backend.test_only(script)


def require_slurm(harness: Harness) -> None:
    if not harness.is_slurm:
        print(f"{harness.kind}: no Slurm behind this backend")
        pytest.skip(f"{harness.kind} has no Slurm behind it (no arrays, hetjobs or requeue)")


def test_array_elements_are_polled_in_one_query_and_folded(harness: Harness) -> None:
    require_slurm(harness)
    run_dir = harness.run_dir("array")
    job_id = harness.submit(
        run_dir, 'echo "element $SLURM_ARRAY_TASK_ID"', Directive("array", "0-2"), log="batch-%a.log"
    )
    before = harness.queries()
    first = harness.backend.poll([job_id], {job_id: 3})[job_id]
    cost = harness.queries() - before
    assert first.job_id == job_id, first
    assert cost[harness.controller_query or ""] == 1 and sum(cost.values()) <= 2, dict(cost)

    info = harness.wait(job_id, lambda i: i.state.terminal, TERMINAL_WAIT_S)
    # Terminal only once every element is: the fold, not the first element to finish.
    assert info.state is JobState.COMPLETED, info
    assert info.elements == {str(n): JobState.COMPLETED for n in range(3)}, info
    for n in range(3):
        assert f"element {n}" in (run_dir / "logs" / f"batch-{n}.log").read_text()


def test_heterogeneous_job_is_one_job_of_its_components(harness: Harness) -> None:
    require_slurm(harness)
    run_dir = harness.run_dir("het")
    job_id = harness.submit(run_dir, 'echo "components $SLURM_HET_SIZE"', components=2)
    info = harness.finish(job_id)
    assert info.job_id == job_id
    assert info.state is JobState.COMPLETED, info
    assert "components 2" in (run_dir / "logs" / "batch.log").read_text()


def test_requeued_job_is_not_over_until_its_second_run_ends(harness: Harness) -> None:
    require_slurm(harness)
    run_dir = harness.run_dir("requeue")
    body = (
        'echo "run ${SLURM_RESTART_COUNT:-0}"\n'
        'if [ "${SLURM_RESTART_COUNT:-0}" = 0 ]; then scontrol requeue "$SLURM_JOB_ID"; sleep 120; fi'
    )
    job_id = harness.submit(run_dir, body, Directive("requeue"), Directive("open-mode", "append"))
    log = run_dir / "logs" / "batch.log"
    deadline = time.monotonic() + RUNNING_WAIT_S
    while "run 0" not in (log.read_text() if log.exists() else "") and time.monotonic() < deadline:
        time.sleep(POLL_EVERY_S)
    # Requeued (the first run may be over before any poll sees it RUNNING): REQUEUED for a moment,
    # then PENDING, held back for about two minutes (BeginTime), never terminal.
    back = harness.wait(job_id, lambda i: i.state is JobState.PENDING, RUNNING_WAIT_S)
    assert back.state is JobState.PENDING, back
    make_eligible(job_id)
    info = harness.finish(job_id)
    assert info.state is JobState.COMPLETED, info
    text = log.read_text()
    assert "run 0" in text and "run 1" in text, text
