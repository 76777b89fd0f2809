"""What init-site and doctor ask srun on the login node: a shell probe run on one node of a partition,
and srun's own options (which container plugins it has)."""

from __future__ import annotations

from hpctrain.errors import HpctrainError
from hpctrain.scheduler.slurm.commands import command


def probe_node(partition: str, script: str, job_name: str, timeout: float = 120) -> list[str]:
    """The output lines of `script` (sh) run as a one-minute, one-task step on one node of `partition`.
    BackendError when srun is missing, refused or slower than `timeout`."""
    argv = ["srun", f"--partition={partition}", "--nodes=1", "--ntasks=1", "--time=1"]
    return command([*argv, f"--job-name={job_name}", "sh", "-c", script], timeout).splitlines()


def step_options_help(timeout: float = 30) -> str:
    """srun's --help text, where SPANK plugins (pyxis) list their options; "" when it cannot be read."""
    try:
        return command(["srun", "--help"], timeout, merge=True)
    except HpctrainError:
        return ""
