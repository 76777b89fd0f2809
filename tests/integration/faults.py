"""Real faults for tests and benchmarks on the local cluster: kill or stop a rank, take a node's power.

Both slurmd nodes run on this one host, so a "node" is its `slurmd -N NAME` process plus the
slurmstepd processes (and their children) that serve its jobs. A stepd is told apart by the
SLURMD_NODENAME in its children's environment. `scripts/local-cluster.sh recover` brings a killed
node back (`recover_nodes`).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from hpctrain.rundir import RunDir

REPO = Path(__file__).resolve().parents[2]


def rank_pid(run_dir: Path, rank: int, timeout: float = 120) -> int:
    """The pid the rank wrote into pids/rank-N (waits for it: the rank may still be importing torch)."""
    path = RunDir(run_dir).pid(rank)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = path.read_text().strip() if path.exists() else ""
        if text.isdigit() and Path(f"/proc/{text}").exists():
            return int(text)
        time.sleep(0.2)
    raise TimeoutError(f"rank {rank} wrote no live pid into {path} within {timeout} s")


def signal_rank(run_dir: Path, rank: int, sig: signal.Signals) -> int:
    """Send `sig` (SIGKILL, SIGSTOP, SIGCONT...) to one rank's process; returns its pid."""
    pid = rank_pid(run_dir, rank)
    os.kill(pid, sig)
    return pid


def _environ(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs}


def _children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True, check=False).stdout
    return [int(p) for p in out.split()]


def _descendants(pid: int) -> list[int]:
    found = []
    for child in _children(pid):
        found += [child, *_descendants(child)]
    return found


def _ours(pids: str, program: str) -> list[int]:
    """Of pgrep's answer, the processes that run the `program` on PATH: the clusters of other Slurm
    versions on this host (scripts/local-cluster.sh --slurm) have nodes of the same names."""
    binary = shutil.which(program)
    found = []
    for pid in (int(p) for p in pids.split()):
        try:
            if binary and os.path.samefile(f"/proc/{pid}/exe", binary):
                found.append(pid)
        except OSError:
            continue
    return found


def node_processes(node: str) -> list[int]:
    """The `slurmd -N node` process and node's slurmstepd processes with all their descendants."""
    pids = []
    out = subprocess.run(["pgrep", "-f", f"slurmd -N {node}\\b"], capture_output=True, text=True, check=False)
    pids += _ours(out.stdout, "slurmd")
    stepds = subprocess.run(["pgrep", "-x", "slurmstepd"], capture_output=True, text=True, check=False)
    for stepd in _ours(stepds.stdout, "slurmstepd"):
        below = _descendants(stepd)
        if any(_environ(pid).get("SLURMD_NODENAME") == node for pid in below):
            pids += [stepd, *below]
    return pids


def kill_node(node: str) -> list[int]:
    """A node that loses power: SIGKILL to its slurmd, its stepds and every process they started."""
    pids = node_processes(node)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return pids


def recover_nodes() -> None:
    """Restart dead slurmds and resume DOWN/DRAIN nodes (idempotent)."""
    subprocess.run([str(REPO / "scripts" / "local-cluster.sh"), "recover"], capture_output=True, check=False)


def node_state(node: str) -> str:
    out = subprocess.run(
        ["sinfo", "-h", "-N", "-n", node, "-o", "%T"], capture_output=True, text=True, check=False
    ).stdout.split()
    return out[0] if out else ""
