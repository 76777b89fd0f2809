"""The Optuna study of a sweep: its space, its journal in the run directory, how trials are told, resume."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from hpctrain import rundir, spec
from hpctrain.rundir import names
from hpctrain.spec.sweep import Range
from hpctrain.sweep import plan, study
from hpctrain.sweep.status import TrialStatus
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
    point = {"train.lr": 0.0123, "train.batch_size": 64}
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
    _, (one,) = plan.resolve_points(prepared, [{"train.lr": 0.01, "train.batch_size": 16}])
    assert one.job.sweep is not None and one.job.sweep.early_stop is None


def test_a_resume_of_a_sweep_without_a_study_is_one_clear_error(tmp_path: Path) -> None:
    from hpctrain.errors import SpecError

    with pytest.raises(SpecError, match="not an optuna sweep"):
        study.prepared_from(tmp_path)
