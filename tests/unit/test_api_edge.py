"""The API's edge: a lone string is one key, a dependency that can never be met is refused, cancels of
ended runs change nothing, and values of every type give hpctrain's own one-line errors, nothing else."""

from __future__ import annotations

import contextlib
import inspect
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpctrain import api
from hpctrain.errors import HpctrainError, InputError
from hpctrain.rundir import RunDir, SweepRecord, metric_line
from hpctrain.scheduler.base import JobState
from hpctrain.scheduler.slurm.cli import SlurmCliBackend
from hpctrain.tracking.index import Index
from hpctrain.tracking.status import NotTracked
from tests.conftest import JOBS
from tests.unit.fake_sbatch import directive, fake_sbatch
from tests.unit.tracked_runs import cli, home_env, track

JOB = JOBS / "digits-ddp.yaml"


@pytest.fixture
def home(hpctrain_home: Path) -> Iterator[Path]:
    with home_env(hpctrain_home):
        yield hpctrain_home


@pytest.fixture
def scancel(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """scancel replaced by a recorder of the job ids it was handed."""
    calls: list[list[str]] = []
    monkeypatch.setattr(SlurmCliBackend, "cancel", lambda self, ids: calls.append(list(ids)))
    return calls


def cancelled_by_you(run: RunDir) -> None:
    index = Index()
    (record,) = [r for r in index.runs() if r.run_dir == run.root]
    index.update_states([(record, JobState.CANCELLED, "cancelled by you")])


# -- item 3: a lone string is one key -------------------------------------------------------------


def test_after_given_as_one_string_waits_for_that_job_not_for_each_digit(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scripts = fake_sbatch(monkeypatch, held={"99999": JobState.RUNNING})
    api.submit(JOB, "local", backend="slurm", after="99999")
    assert directive(scripts[0], "dependency") == ["#SBATCH --dependency=afterok:99999"]


def test_find_runs_and_list_runs_read_a_lone_string_as_one_key(home: Path) -> None:
    for job_id in ("2", "3", "23"):
        track(home, job_id, "COMPLETED")
    found, missing = api.find_runs("23")
    assert [r.job_id for r in found] == ["23"] and missing == []
    assert [r.job_id for r in api.list_runs("23")] == ["23"]


# -- item 4: a dependency that can never be met ---------------------------------------------------


def test_afterok_on_a_failed_run_is_refused_with_the_state_it_ended_in(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scripts = fake_sbatch(monkeypatch)
    failed = api.find_run(track(home, "9", "FAILED", backend="slurm", name="broken").root.name)
    with pytest.raises(
        InputError, match=r"after: job 9 \(broken\) ended FAILED, so afterok can never be met"
    ):
        api.submit(JOB, "local", backend="slurm", after=[failed])
    assert scripts == []
    # afternotok on the same run is what the user meant by "run this if that failed": it is submitted.
    api.submit(JOB, "local", backend="slurm", after=[failed], after_kind="afternotok")
    assert directive(scripts[0], "dependency") == ["#SBATCH --dependency=afternotok:9"]


def test_a_job_id_nobody_knows_is_refused_rather_than_dropped(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scripts = fake_sbatch(monkeypatch)
    with pytest.raises(
        InputError, match="job 55555 is neither tracked by hpctrain nor known to the scheduler"
    ):
        api.submit(JOB, "local", backend="slurm", after=["55555"])
    outcome = cli("submit", str(JOB), "--site", "local", "--backend", "slurm", "--after", "55555")
    assert outcome.code == 2 and "neither tracked" in outcome.stderr and scripts == []


# -- item 6: a cancelled run through the API --------------------------------------------------------


def test_a_cancelled_run_has_no_failed_ranks_and_its_result_says_who_cancelled_it(home: Path) -> None:
    run = track(home, "70", "CANCELLED", backend="slurm")
    run.batch_log.write_text(
        "srun: error: node1: tasks 0-3: Terminated\nsrun: Force Terminated StepId=70.0\n"
    )
    cancelled_by_you(run)
    handle = api.find_run("70")
    status = handle.status()
    assert status.failed_tasks == [] and status.failed_ranks is not None and status.failed_ranks.named == []
    with pytest.raises(api.NoResult) as caught:
        handle.result()
    assert "ended CANCELLED (by you) without a result" in str(caught.value) and "yet" not in str(caught.value)


def test_a_failed_run_still_lists_its_terminated_ranks(home: Path) -> None:
    run = track(home, "71", "FAILED", backend="slurm")
    run.batch_log.write_text("srun: error: node1: tasks 0-3: Terminated\n")
    status = api.find_run("71").status()
    assert status.failed_ranks is not None and len(status.failed_ranks.named) == 4


# -- item 7: cancelling an ended run ------------------------------------------------------------------


def test_cancelling_an_ended_run_says_so_and_changes_nothing(home: Path, scancel: list[list[str]]) -> None:
    run = track(home, "287", "COMPLETED", backend="slurm", name="done")
    before = Index().history(run.root.name)
    outcome = cli("cancel", "287")
    assert outcome.code == 0, outcome.stderr
    assert outcome.stdout == "job 287 (done) already ended (COMPLETED): nothing to cancel\n"
    assert scancel == [] and Index().history(run.root.name) == before
    assert api.find_run("287").cancel() is False and scancel == []


def test_cancelling_a_pending_run_still_cancels_it(
    home: Path, monkeypatch: pytest.MonkeyPatch, scancel: list[list[str]]
) -> None:
    fake_sbatch(monkeypatch, held={"288": JobState.PENDING})
    track(home, "288", "PENDING", backend="slurm", name="waiting")
    outcome = cli("cancel", "288")
    assert (outcome.code, outcome.stdout) == (0, "Cancelled job 288 (waiting)\n") and scancel == [["288"]]


# -- item 14: wrong values at the edge ---------------------------------------------------------------


@pytest.mark.parametrize(
    "call",
    [
        lambda: api.load_job(None),  # type: ignore[arg-type]
        lambda: api.load_job(3),  # type: ignore[arg-type]
        lambda: api.load_job([]),  # type: ignore[arg-type]
        lambda: api.load_job(JOB, [3]),  # type: ignore[list-item]
        lambda: api.load_job(JOB, None),  # type: ignore[arg-type]
        lambda: api.load_job({"name": "x", "train": {"entrypoint": "m:f", "x": object()}}),
        lambda: api.render(JOB, "local", backend=3),  # type: ignore[arg-type]
        lambda: api.submit(JOB, "local", after=[123]),  # type: ignore[list-item]
        lambda: api.submit(JOB, "local", after=[None]),  # type: ignore[list-item]
        lambda: api.submit(JOB, "local", after=None),  # type: ignore[arg-type]
        lambda: api.find_run(2),  # type: ignore[arg-type]
        lambda: api.cancel(["2"]),  # type: ignore[list-item]
        lambda: api.list_runs(limit=math.nan),  # type: ignore[arg-type]
        lambda: api.list_runs(limit=-1),
        lambda: api.wait_all([], interval=math.nan),
        lambda: api.submit_sweep(JOB, "local", grid=[3]),  # type: ignore[list-item]
        lambda: api.submit_sweep(JOB, "local", grid=["train.lr=1,2"], seed=object()),
    ],
)
def test_a_wrong_value_is_one_line_naming_it(call: Any, home: Path) -> None:
    with pytest.raises(InputError) as caught:
        call()
    assert "\n" not in str(caught.value)


def test_a_job_mapping_that_contains_itself_is_refused_not_recursed(home: Path) -> None:
    job: dict[str, Any] = {"name": "loop", "train": {"entrypoint": "m:f"}}
    job["train"]["again"] = job
    with pytest.raises(InputError, match="contain itself"):
        api.load_job(job)
    with pytest.raises(InputError, match="contain itself"):
        api.submit_sweep(JOB, "local", grid=["train.lr=1,2"], metric=job)


@pytest.mark.parametrize("timeout", [math.nan, "5", -1.0, math.inf])
def test_wait_refuses_a_timeout_that_is_no_finite_number_of_seconds(timeout: Any, home: Path) -> None:
    handle = api.find_run(track(home, "72", "RUNNING").root.name)
    with pytest.raises(InputError, match="timeout"):
        handle.wait(timeout=timeout)


def test_a_report_that_cannot_be_written_is_one_line_naming_where(home: Path) -> None:
    run = track(home, "73", "COMPLETED")
    (run.root / "metrics.jsonl").write_text("")
    with pytest.raises(HpctrainError, match="report: cannot write /proc/x"):
        api.find_run("73").report(out=Path("/proc/x"))


# Values of every kind a caller might pass by mistake (and a few right ones).
ANYTHING = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.binary(max_size=8),
    st.lists(st.one_of(st.none(), st.integers(), st.text(max_size=6)), max_size=3),
    st.dictionaries(
        st.text(max_size=6), st.one_of(st.none(), st.integers(), st.text(max_size=6)), max_size=3
    ),
    st.builds(object),
    st.builds(Path, st.text(max_size=12)),
    st.just(math.nan),
    st.just(()),
)

# Every public function of the API, each argument drawn from ANYTHING. Doctor and init-site read the
# cluster: with no Slurm command on PATH they stop at a BackendError, which is hpctrain's own.
PUBLIC = sorted(
    name
    for name in api.__all__
    if inspect.isfunction(getattr(api, name)) and name not in {"run_index", "site_folder", "site_search_path"}
)


# At most this many examples (the profile's, when fewer): each is a call of the API, some of which read
# the index or draw figures.
EXAMPLES = min(300, settings().max_examples)
FUZZ = settings(suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)


@pytest.mark.parametrize("name", PUBLIC)
@settings(FUZZ, max_examples=EXAMPLES)
@given(data=st.data())
def test_every_public_function_given_any_value_raises_only_hpctrain_errors(
    name: str, data: st.DataObject, hpctrain_home: Path, tmp_path: Path
) -> None:
    function = getattr(api, name)
    parameters = [
        p
        for p in inspect.signature(function).parameters.values()
        if p.kind is not inspect.Parameter.VAR_KEYWORD
    ]
    arguments = {p.name: data.draw(ANYTHING, label=p.name) for p in parameters}
    with home_env(hpctrain_home), no_slurm(tmp_path):
        try:
            function(**arguments)
        except HpctrainError as err:
            assert "\n" not in str(err)


@contextlib.contextmanager
def no_slurm(empty: Path) -> Iterator[None]:
    """PATH without the Slurm commands, so nothing a drawn value asks for reaches the cluster."""
    before = os.environ.get("PATH", "")
    os.environ["PATH"] = str(empty)
    try:
        yield
    finally:
        os.environ["PATH"] = before


# -- item 15: small ones -------------------------------------------------------------------------------


def test_a_limit_of_zero_lists_no_run(home: Path) -> None:
    for job_id in ("1", "2"):
        track(home, job_id, "COMPLETED")
    assert api.list_runs(everything=True, limit=0) == []
    assert [r.job_id for r in api.list_runs(everything=True, limit=1)] == ["2"]
    listed = cli("list", "-n", "0")
    assert listed.code == 0 and listed.stdout.splitlines()[1:] == []
    assert cli("list", "-n", "-1").code == 2


def test_an_untracked_key_with_a_newline_is_one_line(home: Path) -> None:
    with pytest.raises(NotTracked) as caught:
        api.find_run("12\n34")
    assert "\n" not in str(caught.value) and "12\\n34" in str(caught.value)


RUN_METHODS = ["wait", "result", "metrics", "log_path", "logs", "merged_logs", "rank_logs", "report", "ended"]


@pytest.mark.parametrize("name", RUN_METHODS)
@settings(FUZZ, max_examples=max(1, EXAMPLES // 3))
@given(data=st.data())
def test_every_method_of_a_run_given_any_value_raises_only_hpctrain_errors(
    name: str, data: st.DataObject, hpctrain_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # a drawn relative `out` lands here, never in the checkout
    with home_env(hpctrain_home), no_slurm(tmp_path):
        if not Index().runs():
            track(hpctrain_home, "local-7", "COMPLETED").append_metric(metric_line("train", step=1, loss=0.5))
        method = getattr(api.find_run("local-7"), name)
        parameters = inspect.signature(method).parameters.values()
        arguments = {p.name: data.draw(ANYTHING, label=p.name) for p in parameters}
        try:
            method(**arguments)
        except HpctrainError as err:
            assert "\n" not in str(err)


@pytest.mark.parametrize("timeout", [math.nan, "5", -1.0])
def test_a_sweep_wait_refuses_a_timeout_that_is_no_finite_number_of_seconds(timeout: Any, home: Path) -> None:
    sweep = api.Sweep(
        home,
        SweepRecord(
            sweep_id="s",
            name="s",
            site="local",
            backend="local",
            submitted_at=0.0,
            metric="loss",
            mode="min",
            params=[],
            trials=[],
            arrays=[],
        ),
    )
    with pytest.raises(InputError, match="timeout"):
        sweep.wait(timeout=timeout)
