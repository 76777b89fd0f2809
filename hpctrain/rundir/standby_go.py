"""The warm standby's go file (standby/GEN/go) and the rank order of its per-node steps.

The batch script writes it; the standby tasks (runtime/standby.py) and the process that owns their
steps (supervisor/standby_steps.py) read it; the supervisor names srun's per-step tasks by the same
rank order (supervisor/supervise.py).
"""

from __future__ import annotations

from pathlib import Path

from hpctrain.rundir.names import STANDBY_GO_NODES, STANDBY_GO_VARIABLES

STOP = "stop"


def read_go(path: Path) -> dict[str, str] | None:
    """The go file's ``NAME=value`` lines; None when it says stop (or is missing: nothing to run)."""
    try:
        text = path.read_text()
    except OSError:
        return None
    if text.strip() == STOP:
        return None
    pairs = (line.split("=", 1) for line in text.splitlines() if "=" in line)
    return {name: value for name, value in pairs if name in STANDBY_GO_VARIABLES}


def go_nodes(go: dict[str, str] | None) -> list[str]:
    """The attempt's nodes, in rank order (none: stop)."""
    return [name for name in (go or {}).get(STANDBY_GO_NODES, "").split(",") if name]


def global_rank(nodes: list[str], node: str, per_node: int, local: int) -> int:
    """The rank of task `local` of `node`'s step: the node's place in the attempt's nodes times the
    tasks per node, plus the local id (srun's own order over one step of every node)."""
    return nodes.index(node) * per_node + local
