"""The rank's environment (torchrun's contract from Slurm's variables, hpctrain's) and resume arguments."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from hpctrain.command import contract
from hpctrain.rundir import RunDir
from hpctrain.spec import Resume

SLURM = {
    "SLURM_PROCID": "3",
    "SLURM_LOCALID": "1",
    "SLURM_NTASKS": "4",
    "SLURM_NODEID": "1",
    "SLURM_TASKS_PER_NODE": "2(x2)",
    "SLURM_JOB_ID": "77",
    "MASTER_ADDR": "node1",
    "MASTER_PORT": "20010",
}


def test_torchrun_variables_come_from_slurm(tmp_path: Path) -> None:
    env = contract.child_env(SLURM, RunDir(tmp_path), 2, {})
    assert {k: env[k] for k in contract.TORCHRUN_VARIABLES} == {
        "RANK": "3",
        "LOCAL_RANK": "1",
        "WORLD_SIZE": "4",
        "LOCAL_WORLD_SIZE": "2",
        "GROUP_RANK": "1",
    }
    assert env["TORCHELASTIC_RESTART_COUNT"] == "2" and env["MASTER_ADDR"] == "node1"
    assert env["MASTER_PORT"] == "20010" and env["PYTHONUNBUFFERED"] == "1"
    assert env["HPCTRAIN_RUN_DIR"] == str(tmp_path) and env["HPCTRAIN_ATTEMPT"] == "2"
    assert env["HPCTRAIN_CHECKPOINT_DIR"] == str(tmp_path / "checkpoints")


def test_a_launcher_that_set_the_rank_variables_keeps_them(tmp_path: Path) -> None:
    torchrun = {
        **SLURM,
        "RANK": "0",
        "LOCAL_RANK": "0",
        "WORLD_SIZE": "8",
        "LOCAL_WORLD_SIZE": "4",
        "GROUP_RANK": "0",
    }
    env = contract.child_env(torchrun, RunDir(tmp_path), 0, {"TORCH_NCCL_DUMP_ON_TIMEOUT": "1"})
    assert env["RANK"] == "0" and env["WORLD_SIZE"] == "8" and env["LOCAL_WORLD_SIZE"] == "4"
    assert env["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1" and "HPCTRAIN_RUN_DIR" in env


def test_the_jobs_own_nccl_settings_win(tmp_path: Path) -> None:
    env = contract.child_env(
        {**SLURM, "TORCH_NCCL_DUMP_ON_TIMEOUT": "0"}, RunDir(tmp_path), 0, {"TORCH_NCCL_DUMP_ON_TIMEOUT": "1"}
    )
    assert env["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "0"


@pytest.mark.parametrize(
    ("text", "node", "count"),
    [("2(x2)", 1, 2), ("4", 0, 4), ("3,1", 1, 1), ("2(x2),1", 2, 1), ("x", 0, None)],
)
def test_tasks_on_node_reads_slurms_compressed_counts(text: str, node: int, count: int | None) -> None:
    assert contract.tasks_on_node(text, node) == count


def test_resume_args_only_when_the_path_exists(tmp_path: Path) -> None:
    env = {"HPCTRAIN_CHECKPOINT_DIR": str(tmp_path / "ck")}
    resume = Resume(if_exists="$HPCTRAIN_CHECKPOINT_DIR/step-*.pt", args=["--resume", "--from={match}"])
    assert contract.resume_args(resume, tmp_path, env) == []
    (tmp_path / "ck").mkdir()
    older, newer = tmp_path / "ck" / "step-1.pt", tmp_path / "ck" / "step-2.pt"
    older.write_text("")
    newer.write_text("")
    os.utime(older, (time.time() + 10, time.time() + 10))
    assert contract.resume_args(resume, tmp_path, env) == ["--resume", f"--from={older}"]
    assert contract.resume_args(None, tmp_path, env) == []


def test_a_relative_resume_path_is_in_the_workdir(tmp_path: Path) -> None:
    resume = Resume(if_exists="out/ckpt.pt", args=["--init_from=resume"])
    assert contract.resume_args(resume, tmp_path, {}) == []
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "ckpt.pt").write_text("")
    assert contract.resume_args(resume, tmp_path, {}) == ["--init_from=resume"]


def test_command_words_expand_the_ranks_variables_only() -> None:
    env = {"HPCTRAIN_CHECKPOINT_DIR": "/ck"}
    words = contract.command_line(["python", "t.py", "--out=$HPCTRAIN_CHECKPOINT_DIR", "${UNSET}x"], env)
    assert words == ["python", "t.py", "--out=/ck", "${UNSET}x"]
