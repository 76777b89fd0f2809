"""The hang and silence lines of `hpctrain status` (hpctrain.tracking.health)."""

from __future__ import annotations

from hpctrain.supervisor.hang_rule import Seen
from hpctrain.supervisor.watchdog import summary
from hpctrain.tracking import health


def seen(rank: int, node: str, phase: str, silent_s: float, step: int = 130) -> Seen:
    return Seen(
        rank=rank, node=node, step=step, phase=phase, idle_s=40.0, silent_s=silent_s, step_s=1.0, pid=None
    )


def test_the_documented_hang_line_is_the_one_status_prints() -> None:
    """Issue 23 item 7: the docstring showed the old wording ("at step 130 (phase backward), other
    ranks waiting in all-reduce"); it quotes what the watchdog writes and status prints now."""
    hung = [seen(2, "node2", "backward", 33.0)]
    waiting = [seen(rank, "node1" if rank < 2 else "node2", "backward", 0.5) for rank in (0, 1, 3)]
    diagnosis = summary(hung, waiting, {rank: "gradient all-reduce" for rank in (0, 1, 3)})
    (line,) = health.describe(health.Health(hung=diagnosis, stacks="<run>/failures/stacks"))
    assert line in " ".join((health.__doc__ or "").split())
    start_up = summary([seen(0, "node1", "import", 0.0, step=-1)], [], {})
    assert start_up.startswith("rank 0 on node1 hung during start-up (")
    assert "hung during start-up (...)" in " ".join((health.__doc__ or "").split())
