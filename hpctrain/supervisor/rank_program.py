"""What each rank of a training step runs: the one place a new kind of rank program plugs in."""

from __future__ import annotations

from hpctrain.spec import Resolved


def rank_program(resolved: Resolved, preflight: bool) -> list[str]:
    """The module and arguments each rank runs as `python -m ...` (torchrun's `-m`, fork_ranks'
    and the warm standby's program alike). With `preflight`, the ranks check their nodes first
    (hpctrain.runtime.preflight --then-train); torchrun runs its preflight as a step of its own."""
    del resolved  # every job trains with hpctrain's runtime for now
    return ["hpctrain.runtime.preflight", "--then-train"] if preflight else ["hpctrain.runtime"]
