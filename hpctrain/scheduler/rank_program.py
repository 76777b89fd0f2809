"""What each rank of a training step runs: the one place a kind of rank program plugs in."""

from __future__ import annotations

from hpctrain.spec import Resolved

COMMAND_WRAPPER = "hpctrain.command"
"""A command job's ranks: the wrapper that runs the user's command with torchrun's contract."""


def rank_program(resolved: Resolved, preflight: bool) -> list[str]:
    """The module and arguments each rank runs as `python -m ...` (srun's, torchrun's `-m`, fork_ranks'
    and the warm standby's program alike; the local backend's too). A command job runs the command
    wrapper; a Task job the runtime, which with `preflight` checks its node first
    (hpctrain.runtime.preflight --then-train; torchrun runs its preflight as a step of its own)."""
    if resolved.job.command is not None:
        return [COMMAND_WRAPPER]
    return ["hpctrain.runtime.preflight", "--then-train"] if preflight else ["hpctrain.runtime"]
