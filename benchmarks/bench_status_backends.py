"""A status poll of a few tracked jobs in a full queue: the pyslurm backend against the CLI's squeue.

Holds `--held` jobs (default 0) of another user (`--held-user`, default nobody) in slurmctld, as
individual held jobs (priority 0, never started), which is what a production queue holds beside
one's own; submits `--jobs` short jobs of one's own (default 100) and waits until slurmctld holds
them as ended (they stay in its memory for MinJobAge). Then, for each size in `--poll` (default:
all the jobs), times `poll()` of that many of them with each backend in alternating rounds, in one
process, after one warm-up call each: the CLI (squeue), pyslurm as configured, and pyslurm forced
to each of its three ways (a load per job id, squeue --me, pyslurm's load of the whole queue).
Prints the medians and the ratio pyslurm / CLI, then cancels the held jobs. Needs pyslurm built for
this cluster's Slurm (25.11: scripts/build-slurm.sh and the venv scripts/slurm-matrix.sh makes), and
root to submit for another user.

    python benchmarks/bench_status_backends.py [--rounds 30] [--jobs 100] [--held 10000] [--poll 10,100]
"""

from __future__ import annotations

import argparse
import pwd
import statistics
import subprocess
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

HELD_NAME = "bench-status-held"


def submit_jobs(backend: Backend, count: int, work: Path) -> list[str]:
    batch = [[Directive("job-name", "bench-status"), Directive("output", "/dev/null"),
              Directive("time", "00:02:00"), Directive("ntasks", "1"), Directive("mem", "50M")]]  # fmt: skip
    script = work / "job.sh"
    script.write_text("#!/bin/bash\n" + "\n".join(f"#SBATCH {d.text}" for d in batch[0]) + "\ntrue\n")
    return [backend.submit(script, work, batch) for _ in range(count)]


def hold_jobs(backend: PyslurmBackend, count: int, user: str) -> None:
    """`count` held jobs of `user`, one submission each (as `sbatch --hold --uid`, without the forks)."""
    account = pwd.getpwnam(user)
    started = time.monotonic()
    for _ in range(count):
        description = backend.pyslurm.JobSubmitDescription(
            script="#!/bin/bash\ntrue\n", name=HELD_NAME, standard_output="/dev/null", time_limit=2,
            ntasks=1, memory_per_node=50, priority=0, user_id=account.pw_uid, group_id=account.pw_gid,
            working_directory="/tmp",
        )  # fmt: skip
        description.submit()
    print(f"held {count} jobs of {user} in {time.monotonic() - started:.0f} s", flush=True)


def cancel_held(user: str) -> None:
    # By uid: Slurm's tools refuse some system users' names (nobody).
    uid = pwd.getpwnam(user).pw_uid
    subprocess.run(["scancel", f"--user={uid}", f"--name={HELD_NAME}"], check=True)


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


def pyslurm_limited(per_id_limit: int, many_by_squeue: bool = True) -> PyslurmBackend:
    backend = PyslurmBackend()
    backend.per_id_limit = per_id_limit
    backend.many_by_squeue = many_by_squeue
    return backend


def compare(job_ids: list[str], rounds: int) -> None:
    cli = SlurmCliBackend()
    polls = {
        "cli": cli.poll,
        "pyslurm": PyslurmBackend().poll,
        "per-id": pyslurm_limited(len(job_ids)).poll,
        "squeue": pyslurm_limited(0).poll,
        "whole": pyslurm_limited(0, many_by_squeue=False).poll,
    }
    for name, poll in polls.items():
        answer = poll(job_ids)
        assert {i.state for i in answer.values()} == {JobState.COMPLETED}, (name, answer)
    samples: dict[str, list[float]] = {name: [] for name in polls}
    for _ in range(rounds):
        for name, poll in polls.items():
            samples[name].append(timed(lambda poll=poll: poll(job_ids)))
    medians = {name: statistics.median(values) * 1000 for name, values in samples.items()}
    print(f"poll of {len(job_ids)} ended jobs, median of {rounds} rounds, in-process:")
    for name, median in medians.items():
        print(f"  {name:8s} {median:8.2f} ms  ({median / medians['cli']:.2f} of cli)")
    print(f"ratio pyslurm / cli: {medians['pyslurm'] / medians['cli']:.2f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--held", type=int, default=0)
    parser.add_argument("--held-user", default="nobody")
    parser.add_argument("--poll", default="", help="comma-separated numbers of jobs to poll (default: all)")
    args = parser.parse_args()
    ok, why = available()
    if not ok:
        raise SystemExit(f"pyslurm backend not usable here: {why}")
    sizes = [int(n) for n in args.poll.split(",") if n] or [args.jobs]
    if max(sizes) > args.jobs:
        raise SystemExit(f"--poll {max(sizes)} is more than the --jobs {args.jobs} submitted")
    try:
        hold_jobs(PyslurmBackend(), args.held, args.held_user)
        cli = SlurmCliBackend()
        with tempfile.TemporaryDirectory(prefix="bench-status-backends-") as tmp:
            job_ids = submit_jobs(cli, args.jobs, Path(tmp))
            wait_ended(cli, job_ids)
        # Jobs of an earlier run (cancelled held ones too) stay in slurmctld for MinJobAge: count all.
        total = len(list(PyslurmBackend().pyslurm.Jobs.load().values()))
        print(
            f"slurmctld holds {total} jobs: {args.held} held of {args.held_user}, {args.jobs} ended of ours"
        )
        for size in sizes:
            compare(job_ids[:size], args.rounds)
    finally:
        if args.held:
            cancel_held(args.held_user)


if __name__ == "__main__":
    main()
