"""A command job's steps: its ranks run the wrapper, under srun and torchrun alike, with no preflight or
warm standby (both hand over to the runtime in the same process)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpctrain.scheduler.rank_program import COMMAND_WRAPPER
from tests.unit.supervisor.test_attempt_loop import NODES, loop_of

COMMAND_OVERRIDES = ["preflight=true", "restart.warm_standby=true", "resources.gpus_per_node=2"]


@pytest.mark.parametrize("launcher", ["srun", "torchrun"])
def test_a_command_jobs_ranks_run_the_wrapper_without_preflight_or_standby(
    launcher: str, tmp_path: Path
) -> None:
    loop = loop_of(tmp_path, "ddp-script.yaml", [f"launcher={launcher}", *COMMAND_OVERRIDES])
    assert loop.program == [COMMAND_WRAPPER]
    assert not loop.preflight and loop.standby is None
    argv = loop.rank_step(NODES) if launcher == "srun" else loop.torchrun_step(NODES, 0, "node1:29500")
    assert argv[-2:] == ["-m", COMMAND_WRAPPER]
    assert not any(word.startswith("hpctrain.runtime") for word in argv), argv


def test_a_train_job_still_runs_the_runtime(tmp_path: Path) -> None:
    loop = loop_of(tmp_path, "digits-ddp.yaml")
    assert loop.program[0].startswith("hpctrain.runtime") and COMMAND_WRAPPER not in loop.rank_step(NODES)
