"""Rendezvous ports of an attempt, outside the node's ephemeral port range: the one port rule.

Any outgoing connection on a node may take a port of the kernel's ephemeral range
(/proc/sys/net/ipv4/ip_local_port_range, 32768-60999 on Linux by default); a rendezvous port there
can be in use by chance (EADDRINUSE). Training's and preflight's ports are therefore chosen from the
ports above 20000 that lie outside that range, spread by job id and attempt; a port that is taken
anyway ends the attempt as a launch fault, and the next attempt gets another port.

Every place that picks a rendezvous port uses this rule: the batch script (``python -m
hpctrain.rundir.ports JOB_ID ATTEMPT`` prints ``TRAINING_PORT PREFLIGHT_PORT``, read on the batch
node), the supervisor for each attempt, the doctor's preflight job, and the runtime when the batch
script set no port (MASTER_PORT missing: attempt 0's ports). Torch-free and
in the shared column, since both the allocation side and the login side need it.
"""

from __future__ import annotations

import sys
from pathlib import Path

EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
DEFAULT_EPHEMERAL = (32768, 60999)
LOWEST = 20000
HIGHEST = 65535
# Attempt N of a job lands this far from attempt 0 (a prime: not the first port of a nearby job).
ATTEMPT_STRIDE = 1009


def ephemeral_range(path: Path = EPHEMERAL_RANGE) -> tuple[int, int]:
    """The kernel's ephemeral range on this node (its default when the file cannot be read)."""
    try:
        low, high = (int(word) for word in path.read_text().split()[:2])
    except (OSError, ValueError):
        return DEFAULT_EPHEMERAL
    return (low, high) if 0 < low <= high else DEFAULT_EPHEMERAL


def usable_bands(ephemeral: tuple[int, int]) -> list[tuple[int, int]]:
    """The inclusive port bands from LOWEST up that the ephemeral range leaves free."""
    low, high = ephemeral
    bands = [(LOWEST, min(low - 1, HIGHEST)), (max(high + 1, LOWEST), HIGHEST)]
    bands = [(first, last) for first, last in bands if first <= last]
    return bands or [(LOWEST, HIGHEST)]  # a range that covers everything: nothing is safe, spread anyway


def nth_port(bands: list[tuple[int, int]], index: int) -> int:
    size = sum(last - first + 1 for first, last in bands)
    index %= size
    for first, last in bands:
        if index <= last - first:
            return first + index
        index -= last - first + 1
    raise AssertionError("unreachable: index is below the total size")


def rendezvous_ports(job_id: int, attempt: int, ephemeral: tuple[int, int]) -> tuple[int, int]:
    """(training, preflight): two distinct ports outside `ephemeral`, a new pair each attempt."""
    bands = usable_bands(ephemeral)
    size = sum(last - first + 1 for first, last in bands)
    index = job_id + attempt * ATTEMPT_STRIDE
    return nth_port(bands, index), nth_port(bands, index + size // 2)


def job_ports(job_id: str, attempt: int = 0) -> tuple[int, int]:
    """(training, preflight) of a Slurm job id (`1234`, or an array element's `1234_5`) on this node."""
    digits = "".join(ch for ch in job_id if ch.isdigit())
    return rendezvous_ports(int(digits or 0), attempt, ephemeral_range())


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not all(word.isdigit() for word in argv):
        print("usage: python -m hpctrain.rundir.ports JOB_ID ATTEMPT", file=sys.stderr)
        return 2
    training, preflight = job_ports(argv[0], int(argv[1]))
    print(training, preflight)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
