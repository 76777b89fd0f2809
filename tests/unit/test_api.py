"""The Python API: jobs from files, examples and Python objects; after= as Slurm dependencies; Run handles."""

from __future__ import annotations

import os
from pathlib import Path

import msgspec
import pytest

import hpctrain
from hpctrain import api
from hpctrain.errors import BackendError, InputError, SpecError
from hpctrain.rundir import EvalLine, Result, TrainLine, metric_line
from hpctrain.scheduler.base import JobInfo, JobState
from hpctrain.scheduler.slurm.cli import SlurmCliBackend
from tests.conftest import JOBS
from tests.unit.fake_sbatch import directive, fake_sbatch
from tests.unit.tracked_runs import track

JOB = JOBS / "digits-ddp.yaml"


def test_a_job_is_the_same_from_its_file_its_example_name_a_jobspec_and_a_mapping() -> None:
    from_file = api.load_job(JOB, ["train.steps=7"])
    as_built = api.load_job(api.load_job(JOB), ["train.steps=7"])
    as_data = api.load_job(msgspec.to_builtins(api.load_job("digits-ddp")), ["train.steps=7"])
    assert from_file == as_built == as_data
    assert from_file.train.steps == 7 and isinstance(from_file, hpctrain.JobSpec)


def test_a_job_built_in_python_without_yaml_renders() -> None:
    job = {"name": "from-python", "train": {"entrypoint": "hpctrain.examples.digits:build", "steps": 3}}
    request = hpctrain.render(job, "local", backend="slurm")
    assert request.resolved.job.name == "from-python"
    assert "#SBATCH --job-name=from-python" in request.script


def test_a_bad_field_in_a_python_job_is_one_line_naming_the_field_and_the_job() -> None:
    with pytest.raises(SpecError) as caught:
        api.load_job({"name": "x", "train": {"entrypoint": "m:f", "steps": "many"}})
    message = str(caught.value)
    assert "<python job x>" in message and "train.steps" in message and "\n" not in message


def test_after_makes_the_job_wait_for_the_runs_as_a_slurm_dependency(
    hpctrain_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scripts = fake_sbatch(monkeypatch)
    first = api.submit(JOB, "local", backend="slurm")
    second = api.submit(JOB, "local", backend="slurm")
    evaluate = api.submit(JOB, "local", backend="slurm", after=[first, second], after_kind="afterany")
    assert directive(scripts[0], "dependency") == []
    assert directive(scripts[2], "dependency") == ["#SBATCH --dependency=afterany:4242:4243"]
    assert evaluate.job_id == "4244" and api.find_run("4244").run_id == evaluate.run_id


def test_after_adds_to_the_dependency_the_spec_sets_and_is_afterok_by_default(
    hpctrain_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scripts = fake_sbatch(monkeypatch, held={"12": JobState.RUNNING})
    api.submit(JOB, "local", ["dependency=afterany:17"], backend="slurm", after=["12"])
    assert directive(scripts[0], "dependency") == ["#SBATCH --dependency=afterany:17,afterok:12"]


@pytest.mark.parametrize(
    ("after", "kind", "why"),
    [
        (["local-123"], "afterok", "local-123 is not a Slurm job id"),
        (["12"], "afterwards", "'afterwards' is not one of afterok, afterany, afternotok"),
    ],
)
def test_a_job_that_cannot_be_waited_for_is_refused_before_anything_is_written(
    after: list[str], kind: str, why: str, hpctrain_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scripts = fake_sbatch(monkeypatch)
    with pytest.raises(InputError, match=why):
        api.submit(JOB, "local", backend="slurm", after=after, after_kind=kind)  # type: ignore[arg-type]
    # The index was read to resolve the keys: its folder may exist, but no run directory.
    assert scripts == [] and not any((hpctrain_home / "runs").glob("*"))


def test_the_local_backend_refuses_a_job_that_must_wait_for_another(hpctrain_home: Path) -> None:
    with pytest.raises(BackendError, match="local backend starts jobs at once"):
        api.submit(JOB, "local", backend="local", after=["12"])
    assert not any((hpctrain_home / "runs").iterdir())


def test_a_refused_submission_raises_and_stays_recorded(
    hpctrain_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(self: SlurmCliBackend, script: Path, run_dir: Path, batch: object = None) -> str:
        raise BackendError("sbatch: error: invalid account")

    monkeypatch.setattr(SlurmCliBackend, "submit", refuse)
    with pytest.raises(BackendError, match="invalid account"):
        api.submit(JOB, "local", backend="slurm")
    (recorded,) = api.list_runs(everything=True)
    assert recorded.record.state == JobState.SUBMIT_FAILED and recorded.job_id is None


def test_a_run_hands_back_its_result_metrics_and_logs_as_the_contracts_structs(hpctrain_home: Path) -> None:
    root = track(hpctrain_home, "local-1", "COMPLETED")
    run = api.find_run("local-1")
    with pytest.raises(api.NoResult, match="ended COMPLETED without a result"):
        run.result()
    with pytest.raises(api.NoLog, match=r"no log logs/rank-1\.log"):
        run.logs(rank=1)
    root.append_metric(metric_line("train", step=5, steps=10, loss=0.5))
    root.append_metric(metric_line("eval", step=10, loss=0.25, accuracy=0.9))
    root.write_result(Result(step=10, steps=10, eval_loss=0.25))
    root.logs.mkdir(exist_ok=True)
    root.rank_log(1).write_text("hello from rank 1\n")
    assert run.result() == Result(step=10, steps=10, eval_loss=0.25)
    metrics = run.metrics()
    assert [type(line) for line in metrics] == [TrainLine, EvalLine] and metrics[1].loss == 0.25
    assert run.logs(rank=1) == "hello from rank 1"


def test_a_log_behind_a_link_is_refused(hpctrain_home: Path, tmp_path: Path) -> None:
    root = track(hpctrain_home, "local-1", "COMPLETED")
    secret = tmp_path / "secret"
    secret.write_text("not yours")
    root.logs.mkdir(exist_ok=True)
    os.symlink(secret, root.rank_log(0))
    with pytest.raises(hpctrain.HpctrainError, match="refusing to read"):
        api.find_run("local-1").logs(rank=0)


def test_wait_gives_up_with_a_one_line_error_after_its_timeout(
    hpctrain_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    track(hpctrain_home, "77", "RUNNING", backend="slurm")
    polls: list[int] = []

    def poll(self: SlurmCliBackend, job_ids: object, array_sizes: object = None) -> dict[str, JobInfo]:
        polls.append(1)
        return {"77": JobInfo("77", JobState.RUNNING, source="squeue")}

    monkeypatch.setattr(SlurmCliBackend, "poll", poll)
    seen: list[str] = []
    with pytest.raises(api.WaitTimeout, match=r"not ended after 0 s: job 77 \(RUNNING\)"):
        api.find_run("77").wait(timeout=0, progress=lambda status: seen.append(status.state))
    assert polls == [1] and seen == ["RUNNING"]


def test_wait_returns_the_final_status_once_the_run_has_ended(
    hpctrain_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    track(hpctrain_home, "78", "RUNNING", backend="slurm")
    answers = iter([JobState.RUNNING, JobState.COMPLETED])
    monkeypatch.setattr(
        SlurmCliBackend,
        "poll",
        lambda self, ids, sizes=None: {"78": JobInfo("78", next(answers), source="squeue")},
    )
    monkeypatch.setattr("time.sleep", lambda seconds: None)
    final = api.find_run("78").wait(timeout=60)
    assert isinstance(final, hpctrain.RunStatus) and final.state == JobState.COMPLETED


def test_cancel_asks_the_scheduler_once_for_every_run_of_a_backend(
    hpctrain_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    track(hpctrain_home, "80", "RUNNING", backend="slurm")
    track(hpctrain_home, "81", "PENDING", backend="slurm")
    fake_sbatch(monkeypatch, held={"80": JobState.RUNNING, "81": JobState.PENDING})  # cancel polls first
    calls: list[list[str]] = []
    monkeypatch.setattr(SlurmCliBackend, "cancel", lambda self, ids: calls.append(list(ids)))
    api.cancel(api.list_runs(["80", "81"]))
    assert sorted(calls[0]) == ["80", "81"] and len(calls) == 1
    assert {r.record.reason for r in api.list_runs(["80", "81"])} == {"cancel requested"}


def test_an_unknown_run_is_an_error_of_hpctrain() -> None:
    with pytest.raises(hpctrain.HpctrainError, match="not tracked by hpctrain: 999"):
        api.find_run("999")


def test_every_api_name_is_reached_through_hpctrain_even_once_every_subpackage_is_imported() -> None:
    """A subpackage once imported is an attribute of `hpctrain`, and the lazy re-export never sees it:
    no API name may be the name of a subpackage (`hpctrain.tracking` is a module, hence `list_runs`)."""
    import importlib
    import pkgutil

    for module in pkgutil.iter_modules(hpctrain.__path__):
        importlib.import_module(f"hpctrain.{module.name}")
    shadowed = [name for name in api.__all__ if getattr(hpctrain, name) is not getattr(api, name)]
    assert not shadowed, shadowed
