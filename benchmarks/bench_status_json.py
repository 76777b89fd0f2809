"""`hpctrain status --json` beside `hpctrain status`, over many indexed runs, as a ratio.

`--tracked` runs (default 10,000) ended within the last day are recorded in a fresh index; each run
directory holds what a finished digits run leaves: a metrics file of `--lines` train lines (default
200) with its start and done events and checkpoint events, attempts.jsonl (one attempt), result.json.
One run in ten FAILED. Both commands run as whole processes, interleaved; the medians are printed
with their ratio (JSON / table).

    python benchmarks/bench_status_json.py [--runs 5] [--tracked 10000] [--lines 200]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def populate(home: Path, tracked: int, lines: int) -> None:
    sys.path.insert(0, str(REPO))
    import msgspec

    from hpctrain.rundir import AttemptLine, Result, RunDir, metric_line
    from hpctrain.rundir.io import append_line
    from hpctrain.tracking.index import Index, RunRecord

    index = Index(home)
    now = time.time()
    records = []
    for number in range(tracked):
        run_id, path = index.new_run_dir(f"bench{number}")
        run = RunDir(path)
        start = now - 3600 + number * 0.01
        append_line(
            run.attempts, AttemptLine(attempt=0, event="start", time=start, nodes=["node1"], allocated=start)
        )
        body = [metric_line("event", event="start", step=0, layout="ddp", world_size=4, time=start + 5)]
        for step in range(1, lines + 1):
            t = start + 5 + step
            body.append(
                metric_line("train", step=step, steps=lines, loss=1.0 / step, samples_per_s=900.0, time=t)
            )
            if step % 50 == 0:
                body.append(metric_line("event", event="checkpoint", step=step, save_s=0.2, time=t))
        body.append(metric_line("event", event="done", step=lines, time=start + 6 + lines))
        run.metrics.write_bytes(b"".join(msgspec.json.encode(line) + b"\n" for line in body))
        failed = number % 10 == 0
        end = start + 7 + lines
        outcome = "failed" if failed else "completed"
        append_line(run.attempts, AttemptLine(attempt=0, event="end", time=end, outcome=outcome, step=lines))
        run.write_result(Result(step=lines, steps=lines, final_loss=1.0 / lines))
        records.append(
            RunRecord(
                run_id=run_id,
                job_id=str(100000 + number),
                name=f"bench{number}",
                site="local",
                backend="slurm",
                run_dir=path,
                submitted_at=start - 2,
                state="FAILED" if failed else "COMPLETED",
                state_at=end,
            )
        )
    for record in records:
        index.add(record)


def timed(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"benchmark command failed: {' '.join(argv)}\n{proc.stderr}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--tracked", type=int, default=10_000)
    parser.add_argument("--lines", type=int, default=200)
    args = parser.parse_args()

    home = Path(tempfile.mkdtemp(prefix="hpctrain-bench-status-json-"))
    try:
        populate(home, args.tracked, args.lines)
        env = {**os.environ, "HPCTRAIN_HOME": str(home), "PYTHONPATH": str(REPO)}
        table = [sys.executable, "-m", "hpctrain.cli.main", "status"]
        as_json = [*table, "--json"]
        timed(table, env)
        timed(as_json, env)
        tables, jsons = [], []
        for _ in range(args.runs):  # interleaved: both see the same machine load
            tables.append(timed(table, env))
            jsons.append(timed(as_json, env))
        table_s, json_s = statistics.median(tables), statistics.median(jsons)
        print(f"status of {args.tracked} ended runs ({args.lines} train lines each), median of {args.runs}:")
        print(f"  hpctrain status         {table_s * 1000:9.0f} ms")
        print(f"  hpctrain status --json  {json_s * 1000:9.0f} ms")
        print(f"  ratio json / table      {json_s / table_s:9.2f}")
        print(f"machine: {os.cpu_count()} cores, python {sys.version.split()[0]}")
        print(f"load average at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    finally:
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
