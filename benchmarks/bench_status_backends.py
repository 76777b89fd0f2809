"""One status poll of many jobs: the pyslurm backend (one slurm_load_jobs RPC) against the CLI's squeue.

Submits `--jobs` short jobs (default 100) to the cluster that PATH and SLURM_CONF select, waits until
slurmctld holds them all as ended (they stay in its memory for MinJobAge), then times
`poll(all of them)` of each backend in alternating rounds, in one process, after one warm-up call
each. Prints the medians and the ratio pyslurm / CLI. Needs pyslurm built for this cluster's Slurm
(25.11: scripts/build-slurm.sh and the venv scripts/slurm-matrix.sh makes).

    python benchmarks/bench_status_backends.py [--rounds 30] [--jobs 100]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from hpctrain.scheduler.base import Backend, JobState  # noqa: E402
from hpctrain.scheduler.render import Directive  # noqa: E402
from hpctrain.scheduler.slurm.cli import SlurmCliBackend  # noqa: E402
from hpctrain.scheduler.slurm.pyslurm import PyslurmBackend, available  # noqa: E402


def submit_jobs(backend: Backend, count: int, work: Path) -> list[str]:
    batch = [[Directive("job-name", "bench-status"), Directive("output", "/dev/null"),
              Directive("time", "00:02:00"), Directive("ntasks", "1"), Directive("mem", "50M")]]  # fmt: skip
    script = work / "job.sh"
    script.write_text("#!/bin/bash\n" + "\n".join(f"#SBATCH {d.text}" for d in batch[0]) + "\ntrue\n")
    return [backend.submit(script, work, batch) for _ in range(count)]


def wait_ended(backend: Backend, job_ids: list[str], timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        states = {info.state for info in backend.poll(job_ids).values()}
        if all(state.terminal for state in states):
            if states != {JobState.COMPLETED}:
                raise SystemExit(f"benchmark jobs ended {sorted(states)}, not all COMPLETED")
            return
        time.sleep(2)
    raise SystemExit(f"benchmark jobs not ended after {timeout} s")


def timed(poll: Callable[[], object]) -> float:
    start = time.perf_counter()
    poll()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--jobs", type=int, default=100)
    args = parser.parse_args()
    ok, why = available()
    if not ok:
        raise SystemExit(f"pyslurm backend not usable here: {why}")
    cli, pyslurm = SlurmCliBackend(), PyslurmBackend()
    with tempfile.TemporaryDirectory(prefix="bench-status-backends-") as tmp:
        job_ids = submit_jobs(cli, args.jobs, Path(tmp))
        wait_ended(cli, job_ids)
    polls = {"cli": lambda: cli.poll(job_ids), "pyslurm": lambda: pyslurm.poll(job_ids)}
    assert {i.state for i in pyslurm.poll(job_ids).values()} == {JobState.COMPLETED}
    samples: dict[str, list[float]] = {name: [] for name in polls}
    for _ in range(args.rounds):
        for name, poll in polls.items():
            samples[name].append(timed(poll))
    medians = {name: statistics.median(values) * 1000 for name, values in samples.items()}
    print(f"poll of {args.jobs} ended jobs, median of {args.rounds} rounds, in-process:")
    for name, median in medians.items():
        print(f"  {name:8s} {median:8.2f} ms")
    print(f"ratio pyslurm / cli: {medians['pyslurm'] / medians['cli']:.2f}")


if __name__ == "__main__":
    main()
