"""`hpctrain list`/`status` with 100 and with 100,000 recorded jobs, side by side with the floor script.

Each home is built as a user's would look: every job wrote its three index lines (add, running,
ended) to the journal, then the index compacted itself. The newest 20 jobs are recent: 10 ended
within the day and 10 are active (they point at one real held job, so `status` asks squeue once).
The floor is the script of benchmarks/bench_cli.py: a Python process that imports jinja2 and yaml
and runs one `squeue`. With --before REPO, the same commands also run against that checkout's code
on the uncompacted journal (what the index cost before compaction existed).

    python benchmarks/bench_index.py [--runs 9] [--jobs 100 100000] [--before /work/main]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.bench_cli import FLOOR, timed  # noqa: E402
from hpctrain.tracking.index import Index  # noqa: E402
from hpctrain.tracking.index_lines import Added, Changed, encode_lines  # noqa: E402

DAY = 24 * 3600


def build_home(home: Path, jobs: int, held_job: str) -> str:
    """Write `jobs` runs the way submit and status write them; returns an archived job's id."""
    now = time.time()
    lines: list[Added | Changed] = []
    for i in range(jobs):
        newest = i >= jobs - 20
        submitted = now - (600 if newest else 3 * DAY + (jobs - i) * 60)
        run_id = f"20261202-120000-bench-{i:06x}"
        active = newest and i % 2 == 0
        job_id = held_job if active else str(1_000_000 + i)
        lines.append(
            Added(
                run_id=run_id,
                job_id=job_id,
                name="bench",
                site="local",
                backend="slurm",
                run_dir=str(home / "runs" / run_id),
                submitted_at=submitted,
                state="PENDING",
                state_at=submitted,
            )
        )
        lines.append(Changed(run_id=run_id, state="RUNNING", at=submitted + 60, reason=""))
        if not active:
            lines.append(Changed(run_id=run_id, state="COMPLETED", at=submitted + 120, reason=""))
    home.mkdir(parents=True)
    (home / "index.jsonl").write_bytes(encode_lines(lines))
    return str(1_000_000 + jobs // 3)


def paired_ms(argv: list[str], floor: list[str], env: dict[str, str], runs: int) -> tuple[float, float]:
    """Medians of the command and of the floor, run alternately (the login node's load drifts)."""
    timed(argv, env)  # warm the page cache
    ours, base = [], []
    for _ in range(runs):
        base.append(timed(floor, env)[0])
        ours.append(timed(argv, env)[0])
    return statistics.median(ours) * 1000, statistics.median(base) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--jobs", type=int, nargs="+", default=[100, 100_000])
    parser.add_argument("--before", type=Path, default=None, help="A checkout to compare with.")
    args = parser.parse_args()

    py = sys.executable
    cli = [py, "-P", "-m", "hpctrain.cli.main"]  # -P: PYTHONPATH, not the current directory, picks the code
    held = (
        subprocess.run(
            ["sbatch", "--parsable", "--hold", "--wrap", "true"], capture_output=True, text=True, check=True
        )
        .stdout.strip()
        .split(";")[0]
    )
    rows: list[tuple[str, int, float, float]] = []
    try:
        scratch = Path(tempfile.mkdtemp(prefix="hpctrain-bench-index-"))
        base_env = {**os.environ, "PYTHONPATH": str(REPO)}
        floor = [py, "-c", FLOOR, "squeue", "--me", "-h"]
        for jobs in args.jobs:
            home = scratch / f"home-{jobs}"
            archived_job = build_home(home, jobs, held)
            env = {**base_env, "HPCTRAIN_HOME": str(home)}
            if args.before:
                before_env = {**env, "PYTHONPATH": str(args.before)}
                for name, argv in (("status", ["status"]), ("list -n 100", ["list", "-n", "100"])):
                    rows.append(
                        (f"before: {name}", jobs, *paired_ms([*cli, *argv], floor, before_env, args.runs))
                    )
            start = time.perf_counter()
            Index(home).compact()
            first_ms = (time.perf_counter() - start) * 1000
            start = time.perf_counter()
            Index(home).compact()
            again_ms = (time.perf_counter() - start) * 1000
            print(
                f"{jobs} jobs: compaction of the 3-lines-per-job journal {first_ms:.0f} ms, "
                f"a second one {again_ms:.0f} ms"
            )
            for name, argv in (
                ("status", ["status"]),
                ("list (newest 100)", ["list"]),
                ("status JOBID (archived)", ["status", archived_job]),
                ("list --all", ["list", "--all"]),
            ):
                rows.append((name, jobs, *paired_ms([*cli, *argv], floor, env, args.runs)))
    finally:
        subprocess.run(["scancel", held], check=False)

    print(f"{'command':34} {'jobs':>7} {'ms':>9} {'floor ms':>9} {'ratio':>6}")  # floor: run alternately
    for name, jobs, ms, floor_ms in rows:
        print(f"{name:34} {jobs:7d} {ms:9.1f} {floor_ms:9.1f} {ms / floor_ms:6.2f}")
    print(f"machine: {os.cpu_count()} cores, python {sys.version.split()[0]}, runs per median: {args.runs}")
    print(f"date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")


if __name__ == "__main__":
    main()
