"""Sweeps over a command: a trial's params.NAME values fill `{NAME}` in the command and env."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpctrain.errors import SpecError
from hpctrain.sweep import plan

JOB = """name: cmd-sweep
command: python train.py --lr={lr} --depth={depth}
env: {TAG: "run-{depth}"}
code: {snapshot: false}
sweep:
  grid: {params.lr: [0.1, 0.01], params.depth: [2]}
  metric: final_loss
"""


def write(tmp_path: Path, text: str) -> Path:
    (tmp_path / "train.py").write_text("print('step 1 loss 1.0')\n")
    path = tmp_path / "job.yaml"
    path.write_text(text)
    return path


def test_each_trial_gets_its_values_in_its_command_and_env(tmp_path: Path) -> None:
    _, trials, resolved = plan.resolve_trials(write(tmp_path, JOB), "local", [], [])
    commands = sorted(tuple(one.job.command_words) for one in resolved)
    assert commands == [
        ("python", "train.py", "--lr=0.01", "--depth=2"),
        ("python", "train.py", "--lr=0.1", "--depth=2"),
    ]
    assert {one.job.env["TAG"] for one in resolved} == {"run-2"}
    assert len(trials) == 2


def test_a_param_without_its_placeholder_is_refused_with_one_line(tmp_path: Path) -> None:
    text = JOB.replace("params.depth: [2]", "params.width: [2]")
    with pytest.raises(
        SpecError, match=r"sweep\.grid\.params\.width: no \{width\} in the job's command or env"
    ):
        plan.resolve_trials(write(tmp_path, text), "local", [], [])


def test_params_are_for_command_jobs_only(tmp_path: Path) -> None:
    text = (
        "name: t\ntrain: {entrypoint: hpctrain.examples.digits:build}\nsweep: {grid: {params.lr: [1, 2]}}\n"
    )
    with pytest.raises(SpecError, match=r"params\.\* fill a command's placeholders"):
        plan.resolve_trials(write(tmp_path, text), "local", [], [])
