"""`hpctrain status` over many tracked jobs with huge metrics files, against the floor script.

Each of `--tracked` runs (default 1,000) is recorded in a fresh index and gets a run directory
whose metrics.jsonl is `--metrics-mb` (default 100) MB: real lines at the head, a sparse hole, real
lines at the tail (so the disk holds a few KB per run), plus result.json. The floor is the same as
bench_cli.py's: a Python process that imports jinja2 and yaml and runs one `squeue`.

    python benchmarks/bench_status.py [--runs 15] [--tracked 1000] [--metrics-mb 100] [--compare CHECKOUT]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FLOOR = "import jinja2, yaml, subprocess, sys; subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL)"


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds user+system) of one whole process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"benchmark command failed: {' '.join(argv)}\n{proc.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return elapsed, cpu


def populate(home: Path, tracked: int, metrics_mb: int) -> None:
    """Runs ended within the last day (status shows them), each with a big sparse metrics file."""
    sys.path.insert(0, str(REPO))
    from hpctrain.rundir import Result, RunDir, metric_line
    from hpctrain.tracking.index import Index, RunRecord

    index = Index(home)
    now = time.time()
    for number in range(tracked):
        run_id, path = index.new_run_dir(f"bench{number}")
        run = RunDir(path)
        run.append_metric(metric_line("event", event="start", step=0, layout="ddp", world_size=4))
        for rank in range(4):
            run.append_metric(
                metric_line("memory", rank=rank, rank_bytes={"params": 1 << 20}, peak_mem_mb=300.0)
            )
        with open(run.metrics, "r+b") as handle:
            handle.truncate(metrics_mb << 20)
            handle.seek(0, os.SEEK_END)
            handle.write(b"\n")
        for step in range(1, 41):
            run.append_metric(
                metric_line("train", step=step * 10, steps=400, loss=1.0 / step, samples_per_s=900.0)
            )
        run.append_metric(metric_line("eval", step=400, loss=0.1, accuracy=0.97))
        run.write_result(Result(step=400, steps=400, final_loss=0.025, eval_accuracy=0.97))
        state = "COMPLETED" if number % 10 else "FAILED"
        index.add(
            RunRecord(
                run_id=run_id,
                job_id=str(100000 + number),
                name=f"bench{number}",
                site="local",
                backend="slurm",
                run_dir=path,
                submitted_at=now,
                state=state,
                state_at=now,
            )
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--tracked", type=int, default=1000)
    parser.add_argument("--metrics-mb", type=int, default=100)
    parser.add_argument("--compare", type=Path, default=None, help="Also time the status of this checkout.")
    args = parser.parse_args()

    home = Path(tempfile.mkdtemp(prefix="hpctrain-bench-status-"))
    try:
        populate(home, args.tracked, args.metrics_mb)
        env = {**os.environ, "HPCTRAIN_HOME": str(home), "PYTHONPATH": str(REPO)}
        py = sys.executable
        status = [py, "-m", "hpctrain.cli.main", "status"]
        floor = [py, "-c", FLOOR, "squeue", "--me", "-h"]
        timed(status, env)
        timed(floor, env)
        other_env = {**env, "PYTHONPATH": str(args.compare)} if args.compare else None
        ours, base, other = [], [], []
        for _ in range(args.runs):  # interleaved: all see the same machine load
            base.append(timed(floor, env))
            ours.append(timed(status, env))
            if other_env:
                other.append(timed(status, other_env))
        print(f"{'command':50} {'hpctrain ms':>12} {'floor ms':>9} {'ratio':>6}")
        label = f"status, {args.tracked} jobs x {args.metrics_mb} MB metrics"
        for what, pick in (("wall", 0), ("CPU", 1)):
            floor_ms = statistics.median(t[pick] for t in base) * 1000
            for name, times in (("", ours), (f" {args.compare}", other)):
                if times:
                    ms = statistics.median(t[pick] for t in times) * 1000
                    print(f"{label + name + f' ({what})':50} {ms:12.1f} {floor_ms:9.1f} {ms / floor_ms:6.2f}")
        disk = subprocess.run(["du", "-sh", str(home)], capture_output=True, text=True, check=False).stdout
        print(f"disk used by the run directories: {disk.split()[0] if disk else '?'}")
        print(
            f"machine: {os.cpu_count()} cores, python {sys.version.split()[0]}, runs per median: {args.runs}"
        )
        print(f"load average at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    finally:
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
