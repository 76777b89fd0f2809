"""The Optuna study of a sweep: its space, its journal in the run directory, how trials are told, resume."""

from __future__ import annotations

import warnings
from pathlib import Path

import msgspec
import pytest

from hpctrain import rundir, spec
from hpctrain.errors import HpctrainError, SpecError
from hpctrain.rundir import names
from hpctrain.spec.sweep import Range
from hpctrain.sweep import plan, study
from hpctrain.sweep.status import TrialStatus
from tests import tmpfs
from tests.conftest import JOBS

optuna = pytest.importorskip("optuna", reason="sweep.sampler optuna needs the `sweep` extra (optuna)")

JOB = JOBS / "digits-optuna.yaml"


def status(number: int, state: str, metric: float | None = None) -> TrialStatus:
    return TrialStatus(index=number, params={}, state=state, job_id=f"1_{number}", metric=metric)


def test_the_space_becomes_optunas_distributions() -> None:
    chosen = spec.Sweep(
        grid={
            "train.lr": Range(low=1e-4, high=0.3, log=True),
            "train.steps": Range(low=10, high=100, step=10),
            "train.batch_size": [16, 32],
        },
        sampler="optuna",
        budget=4,
    )
    space = study.distributions(chosen)
    assert space["train.lr"] == optuna.distributions.FloatDistribution(1e-4, 0.3, log=True)
    assert space["train.steps"] == optuna.distributions.IntDistribution(10, 100, step=10)
    assert space["train.batch_size"] == optuna.distributions.CategoricalDistribution([16, 32])


def test_a_range_not_a_whole_number_of_steps_long_keeps_its_steps_without_optunas_warning() -> None:
    chosen = spec.Sweep(grid={"train.steps": Range(low=16, high=256, step=100)}, sampler="optuna", budget=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        space = study.distributions(chosen)
    assert space["train.steps"] == optuna.distributions.IntDistribution(16, 216, step=100)


def test_a_step_wider_than_the_range_is_refused_when_the_sweep_is_planned(tmp_path: Path) -> None:
    job = tmp_path / "wide-step.yaml"
    text = JOB.read_text().replace("{low: 16, high: 256, log: true}", "{low: 16, high: 256, step: 512}")
    job.write_text(text)
    assert "step: 512" in job.read_text()
    with pytest.raises(
        SpecError, match=r"train.options.hidden: step 512 is wider than the range \[16, 256\]"
    ):
        plan.prepare(job, "local", [], [])


def test_the_study_lives_in_the_run_directory_and_reopens_with_its_trials(tmp_path: Path) -> None:
    chosen = spec.Sweep(grid={"train.lr": Range(low=0.1, high=1.0)}, sampler="optuna", budget=2, seed=5)
    first = study.open_study(tmp_path, chosen)
    asked = first.ask(study.distributions(chosen))
    first.tell(asked, 0.5)
    assert (tmp_path / names.STUDY_JOURNAL).is_file()
    again = study.open_study(tmp_path, chosen)
    (trial,) = again.get_trials()
    assert trial.params == asked.params and trial.value == 0.5
    assert study.counted(again) == 1


@pytest.mark.parametrize("torn", [b'{"op_code": 4, "torn_', b'{"op_code": 4, "torn_\n'])
def test_a_torn_last_journal_line_is_dropped_and_the_study_carries_on(tmp_path: Path, torn: bytes) -> None:
    chosen = spec.Sweep(grid={"train.lr": Range(low=0.1, high=1.0)}, sampler="optuna", budget=4, seed=5)
    first = study.open_study(tmp_path, chosen)
    kept = first.ask(study.distributions(chosen))
    first.tell(kept, 0.5)
    journal = tmp_path / names.STUDY_JOURNAL
    whole = journal.read_bytes()
    with open(journal, "ab") as handle:  # a writer killed in the middle of a record
        handle.write(torn)
    again = study.open_study(tmp_path, chosen)
    assert journal.read_bytes().startswith(whole) and b"torn_" not in journal.read_bytes()
    added = again.ask(study.distributions(chosen))
    again.tell(added, 0.25)
    third = study.open_study(tmp_path, chosen)
    assert [(t.params, t.value) for t in third.get_trials()] == [(kept.params, 0.5), (added.params, 0.25)]


def test_a_damaged_journal_line_before_the_last_is_one_error_naming_the_journal(tmp_path: Path) -> None:
    chosen = spec.Sweep(grid={"train.lr": Range(low=0.1, high=1.0)}, sampler="optuna", budget=4, seed=5)
    first = study.open_study(tmp_path, chosen)
    first.tell(first.ask(study.distributions(chosen)), 0.5)
    journal = tmp_path / names.STUDY_JOURNAL
    lines = journal.read_bytes().splitlines(keepends=True)
    journal.write_bytes(b"".join([lines[0], b"not a record\n", *lines[1:]]))
    with pytest.raises(HpctrainError) as caught:
        study.open_study(tmp_path, chosen).get_trials()
    assert str(caught.value).startswith(f"{journal}: a line of the sweep's study journal is not a record")
    assert "\n" not in str(caught.value)


def test_a_cancelled_trial_fails_is_not_counted_and_is_asked_again_first() -> None:
    chosen = spec.Sweep(grid={"train.lr": Range(low=0.1, high=1.0)}, sampler="optuna", budget=4)
    one = optuna.create_study()
    asked = [one.ask(study.distributions(chosen)) for _ in range(2)]
    frozen = {t.number: t for t in study._in_flight(one)}
    assert study._tell(one, frozen[0], status(0, "COMPLETED", 0.25), None) is True
    assert study._tell(one, frozen[1], status(1, "CANCELLED"), None) is False
    assert study.counted(one) == 1
    cancelled = one.get_trials()[1]
    assert cancelled.state == optuna.trial.TrialState.FAIL and cancelled.user_attrs[study.CANCELLED]
    again = one.ask(study.distributions(chosen))
    assert again.number == 2 and again.params == asked[1].params


def test_a_failed_trial_spends_the_budget_with_its_reason() -> None:
    one = optuna.create_study()
    one.ask({"x": optuna.distributions.FloatDistribution(0, 1)})
    (frozen,) = study._in_flight(one)
    assert study._tell(one, frozen, status(0, "FAILED"), None) is True
    (trial,) = one.get_trials()
    assert trial.state == optuna.trial.TrialState.FAIL and trial.user_attrs["ended"].startswith("FAILED")
    assert study.counted(one) == 1


def test_a_resume_makes_the_same_trial_specs_from_the_run_directory(tmp_path: Path) -> None:
    """The resumed loop reads what trials are made from back from the run directory (the root's
    resolved spec, submit.json, study-settings.json): its trials are those the first loop made."""
    prepared = plan.prepare(JOB, "local", ["train.steps=20"], [])
    point = {
        "train.lr": 0.0123,
        "train.batch_size": 64,
        "train.options.hidden": 50,
        "train.options.dropout": 0.1,
    }
    _, (root_spec,) = plan.resolve_points(prepared, [study.representative(prepared.chosen)])
    run = rundir.RunDir(tmp_path)
    run.spec.write_bytes(spec.dumps(root_spec))
    rundir.write_json(
        run.submit_info, rundir.SubmitInfo(job=str(JOB), site="local", overrides=[], backend="", cwd="/")
    )
    rundir.write_json(tmp_path / names.STUDY_SETTINGS, study.Settings(prepared.chosen))

    resumed = study.prepared_from(tmp_path)
    assert resumed.chosen == prepared.chosen
    (_, (before,)), (_, (after,)) = (plan.resolve_points(p, [point], 7) for p in (prepared, resumed))
    assert msgspec.json.encode(after) == msgspec.json.encode(before)
    assert after.job.train.lr == 0.0123 and after.job.train.steps == 20


def test_the_trials_carry_no_early_stop_the_study_prunes_them() -> None:
    """With optuna, early_stop is the study's (it reads eval lines and cancels); a trial's own watcher
    must not end trials by its own rule as well."""
    prepared = plan.prepare(
        JOB, "local", ["sweep.early_stop.after_steps=20", "train.eval_every=20"], [], budget=4
    )
    assert prepared.chosen.early_stop is not None
    _, (one,) = plan.resolve_points(prepared, [study.representative(prepared.chosen)])
    assert one.job.sweep is not None and one.job.sweep.early_stop is None


def test_a_resume_of_a_sweep_without_a_study_is_one_clear_error(tmp_path: Path) -> None:
    from hpctrain.errors import SpecError

    with pytest.raises(SpecError, match="not an optuna sweep"):
        study.prepared_from(tmp_path)


class CancelRecorder:
    """The one Backend call pruning makes: which array tasks it cancels."""

    def __init__(self) -> None:
        self.cancelled: list[str] = []

    def cancel(self, job_ids: list[str]) -> None:
        self.cancelled += job_ids


def pruning_study(tmp_path: Path, running_loss: float) -> tuple[object, object, object]:
    """Two finished trials whose eval loss at step 10 was 0.5 and 0.7, and trial 2 running (array
    task 77_0) with `running_loss` at step 10 in its metrics."""
    from hpctrain.rundir import ArrayChunk, SweepRecord, Trial

    chosen = spec.Sweep(
        grid={"train.lr": Range(low=0.1, high=1.0)},
        sampler="optuna",
        budget=3,
        early_stop=spec.EarlyStop(after_steps=10, min_trials=2),
    )
    one = study.open_study(tmp_path, chosen)
    for loss in (0.5, 0.7):
        trial = one.ask(study.distributions(chosen))
        trial.report(loss, 10)
        one.tell(trial, loss)
    one.ask(study.distributions(chosen))
    element = rundir.RunDir(tmp_path).element(2)
    element.root.mkdir()
    element.metrics.write_text(f'{{"kind":"eval","step":10,"loss":{running_loss}}}\n')
    record = SweepRecord(
        sweep_id="s",
        name="n",
        site="local",
        backend="slurm",
        submitted_at=0.0,
        metric="eval_loss",
        mode="min",
        params=["train.lr"],
        trials=[Trial(i, {"train.lr": 0.5}) for i in range(3)],
        arrays=[ArrayChunk(offset=0, count=2, job_id="76"), ArrayChunk(offset=2, count=1, job_id="77")],
    )
    return chosen, one, record


def test_a_trial_behind_the_median_is_pruned_its_array_task_cancelled_and_why_recorded(
    tmp_path: Path,
) -> None:
    chosen, one, record = pruning_study(tmp_path, running_loss=2.0)
    backend = CancelRecorder()
    (running,) = study._in_flight(one)
    assert study._prune_if_behind(tmp_path, record, one, chosen, backend, running, status(2, "RUNNING"))
    assert backend.cancelled == ["77_0"]
    assert one.get_trials()[2].state == optuna.trial.TrialState.PRUNED
    stopped = rundir.read_json(rundir.RunDir(tmp_path).element(2).stopped, rundir.Stopped)
    assert isinstance(stopped, rundir.Stopped)
    assert (stopped.step, stopped.value, stopped.median, stopped.peers) == (10, 2.0, 0.6, 2)
    assert "pruned by the study" in stopped.reason


def test_a_trial_ahead_of_the_median_runs_on_with_its_value_reported(tmp_path: Path) -> None:
    chosen, one, record = pruning_study(tmp_path, running_loss=0.2)
    backend = CancelRecorder()
    (running,) = study._in_flight(one)
    assert not study._prune_if_behind(tmp_path, record, one, chosen, backend, running, status(2, "RUNNING"))
    assert backend.cancelled == []
    (still,) = study._in_flight(one)
    assert still.intermediate_values == {10: 0.2}


def test_a_second_round_loop_on_the_same_sweep_is_refused(tmp_path: Path) -> None:
    import fcntl

    from hpctrain.errors import HpctrainError

    with open(tmp_path / names.STUDY_LOCK, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(HpctrainError, match="its rounds already run in another"):
            study.drive(tmp_path, plan.prepare(JOB, "local", [], []), None, None, None)  # type: ignore[arg-type]


def test_eval_lines_are_reported_once_over_several_polls(tmp_path: Path) -> None:
    import warnings

    chosen, one, record = pruning_study(tmp_path, running_loss=0.2)
    running = one.get_trials()[2]  # a copy, as the round loop holds it from the round's start
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # Optuna warns when a step is reported twice
        for _ in range(3):
            study._prune_if_behind(
                tmp_path, record, one, chosen, CancelRecorder(), running, status(2, "RUNNING")
            )
    (still,) = study._in_flight(one)
    assert still.intermediate_values == {10: 0.2}


def test_a_full_disk_stops_the_study_with_one_line_naming_its_journal_and_loses_no_record(
    tmp_path: Path,
) -> None:
    chosen = spec.Sweep(grid={"train.lr": Range(low=0.1, high=1.0)}, sampler="optuna", budget=1000, seed=5)
    with tmpfs.small_tmpfs(tmp_path / "sweep-1", "16k") as root:
        one = study.open_study(root, chosen)
        told = []
        with pytest.raises(HpctrainError) as caught:
            while True:  # until a record does not fit; some records are cut off by the full disk
                trial = one.ask(study.distributions(chosen))
                one.tell(trial, 0.5)
                told.append(trial.params)
        message = str(caught.value)
        assert message.startswith(f"{root / names.STUDY_JOURNAL}: the sweep's study cannot record (No space")
        assert message.endswith("run `hpctrain sweep resume sweep-1`") and "\n" not in message
        assert (root / names.STUDY_JOURNAL).read_bytes().endswith(b"\n")
        tmpfs.resize(root, "64k")  # room again: the study carries on, every told trial in it
        again = study.open_study(root, chosen)
        trial = again.ask(study.distributions(chosen))
        again.tell(trial, 0.25)
        complete = again.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
        assert [t.params for t in complete] == [*told, trial.params]
