"""What a command's rank is given: torchrun's environment, hpctrain's, its resume arguments (torch-free)."""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Mapping
from pathlib import Path

from hpctrain.rundir import RunDir
from hpctrain.spec.job import Resume

# torchrun's variables: a launcher that set them (torchrun itself) is left alone.
TORCHRUN_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK")
_VARIABLE = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")
_REPEATS = re.compile(r"\A(\d+)(?:\(x(\d+)\))?\Z")


def expand(text: str, env: Mapping[str, str]) -> str:
    """`$NAME` and `${NAME}` replaced by their value in `env`; unknown names are left as written."""

    def value(found: re.Match[str]) -> str:
        name = found.group(1) or found.group(2)
        return env.get(name, found.group(0))

    return _VARIABLE.sub(value, text)


def tasks_on_node(tasks_per_node: str, node_index: int) -> int | None:
    """The task count of node `node_index` in Slurm's SLURM_TASKS_PER_NODE (`2(x3),1`); None if unreadable."""
    counts: list[int] = []
    for part in tasks_per_node.split(","):
        found = _REPEATS.match(part.strip())
        if found is None:
            return None
        counts += [int(found.group(1))] * int(found.group(2) or 1)
    return counts[node_index] if 0 <= node_index < len(counts) else None


def slurm_rank_env(env: Mapping[str, str], attempt: int) -> dict[str, str]:
    """torchrun's rank variables from Slurm's (one srun task per rank); {} when a launcher set them."""
    if all(name in env for name in TORCHRUN_VARIABLES):
        return {}
    node_index = int(env.get("SLURM_NODEID", "0") or 0)
    world = env.get("SLURM_NTASKS") or env.get("SLURM_NPROCS") or "1"
    local_world = tasks_on_node(
        env.get("SLURM_STEP_TASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE", ""), node_index
    )
    return {
        "RANK": env.get("SLURM_PROCID", "0"),
        "LOCAL_RANK": env.get("SLURM_LOCALID", "0"),
        "WORLD_SIZE": world,
        "LOCAL_WORLD_SIZE": str(local_world if local_world is not None else world),
        "GROUP_RANK": str(node_index),
        "ROLE_RANK": env.get("SLURM_PROCID", "0"),
        "ROLE_WORLD_SIZE": world,
        "TORCHELASTIC_RESTART_COUNT": str(attempt),
        "TORCHELASTIC_RUN_ID": env.get("SLURM_JOB_ID", "none"),
    }


def hpctrain_env(run: RunDir, attempt: int) -> dict[str, str]:
    """What every rank of a command gets besides torchrun's contract."""
    return {
        "HPCTRAIN_RUN_DIR": str(run.root),
        "HPCTRAIN_CHECKPOINT_DIR": str(run.checkpoints),
        "HPCTRAIN_ATTEMPT": str(attempt),
    }


def child_env(env: Mapping[str, str], run: RunDir, attempt: int, nccl: Mapping[str, str]) -> dict[str, str]:
    """The environment the command starts with: the task's own, torchrun's and hpctrain's variables,
    NCCL's watchdog and flight recorder (where the job has not set them), unbuffered Python output."""
    out = dict(env)
    out.update(slurm_rank_env(env, attempt))
    out.update(hpctrain_env(run, attempt))
    for key, value in nccl.items():
        out.setdefault(key, value)
    out.setdefault("PYTHONUNBUFFERED", "1")  # the watchdog and the progress parser read the output live
    return out


def resume_args(resume: Resume | None, workdir: Path, env: Mapping[str, str]) -> list[str]:
    """`resume.args` when `resume.if_exists` matches (its newest match fills `{match}`); [] otherwise."""
    if resume is None:
        return []
    wanted = Path(os.path.expanduser(expand(resume.if_exists, env)))
    matches = glob.glob(str(wanted if wanted.is_absolute() else workdir / wanted))
    if not matches:
        return []
    newest = max(matches, key=_modified)
    fill = {"match": newest, "HPCTRAIN_CHECKPOINT_DIR": env.get("HPCTRAIN_CHECKPOINT_DIR", "")}
    return [expand(_placeholders(arg, fill), env) for arg in resume.args]


def command_line(words: list[str], env: Mapping[str, str]) -> list[str]:
    """The command's words with `$VARIABLES` of the rank's environment expanded (no shell runs it)."""
    return [expand(word, env) for word in words]


def _placeholders(text: str, fill: Mapping[str, str]) -> str:
    for name, value in fill.items():
        text = text.replace("{" + name + "}", value)
    return text


def _modified(path: str) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return 0.0
