"""Login-node cost of the CLI against the floor script, side by side on the local Slurm cluster.

The floor for a Python CLI is a process that imports only jinja2 and yaml and then calls sbatch
(or squeue) once. This prints medians of whole-process wall times and their ratios, and the
slurmctld RPCs that one `hpctrain status` poll costs (from sdiag), for 200 tracked jobs.

    python benchmarks/bench_cli.py [--runs 15] [--tracked 200]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
JOB = REPO / "jobs" / "digits-ddp.yaml"
FLOOR = "import jinja2, yaml, subprocess, sys; subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL)"


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, str]:
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"benchmark command failed: {' '.join(argv)}\n{proc.stderr}")
    return elapsed, proc.stdout


def median_ms(argv: list[str], env: dict[str, str], runs: int) -> float:
    timed(argv, env)  # warm the page cache
    return statistics.median(timed(argv, env)[0] for _ in range(runs)) * 1000


def rpc_total() -> int:
    out = subprocess.run(["sdiag"], capture_output=True, text=True, check=True).stdout
    section = out.split("by message type", 1)[1].split("by user", 1)[0]
    return sum(
        int(m.group(2))
        for m in re.finditer(r"^\s+(\w+)\s+\(\s*\d+\)\s+count:(\d+)", section, re.M)
        if m.group(1) != "REQUEST_STATS_INFO"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--tracked", type=int, default=200)
    args = parser.parse_args()

    home = Path(tempfile.mkdtemp(prefix="hpctrain-bench-"))
    env = {**os.environ, "HPCTRAIN_HOME": str(home)}
    py = sys.executable
    cli = [py, "-m", "hpctrain.cli.main"]
    # Jobs wait behind a held job, so the benchmark measures submission, not training.
    hold = (
        subprocess.run(
            ["sbatch", "--parsable", "--hold", "--wrap", "true"], capture_output=True, text=True, check=True
        )
        .stdout.strip()
        .split(";")[0]
    )
    held = ["--set", f"dependency=afterok:{hold}", "--set", "train.steps=1"]
    submitted: list[str] = []
    try:
        rows: list[tuple[str, float, float, str]] = []
        bare = median_ms([py, "-c", "pass"], env, args.runs)
        floor_squeue = median_ms([py, "-c", FLOOR, "squeue", "--me", "-h"], env, args.runs)
        help_ms = median_ms([*cli, "--help"], env, args.runs)
        render_ms = median_ms([*cli, "render", str(JOB), "--site", "local", *held], env, args.runs)
        rows.append(("hpctrain --help", help_ms, floor_squeue, f"python -c pass: {bare:.0f} ms"))
        rows.append(("hpctrain render", render_ms, floor_squeue, f"{render_ms / bare:.2f}x python -c pass"))

        script = Path(home) / "floor.sbatch"
        script.write_text(timed([*cli, "render", str(JOB), "--site", "local", *held], env)[1])
        floor_times, cli_times = [], []
        for _ in range(args.runs):
            elapsed, _ = timed([py, "-c", FLOOR, "sbatch", "--parsable", str(script)], env)
            floor_times.append(elapsed)
            elapsed, out = timed([*cli, "submit", str(JOB), "--site", "local", "--json", *held], env)
            cli_times.append(elapsed)
            submitted.append(json.loads(out)["job_id"])
        sub_floor = statistics.median(floor_times) * 1000
        sub_cli = statistics.median(cli_times) * 1000
        rows.append(("hpctrain submit", sub_cli, sub_floor, "floor = sbatch of the same script"))

        while len(submitted) < args.tracked:
            submitted.append(
                json.loads(timed([*cli, "submit", str(JOB), "--site", "local", "--json", *held], env)[1])[
                    "job_id"
                ]
            )
        status_ms = median_ms([*cli, "status"], env, args.runs)
        rows.append((f"hpctrain status ({args.tracked} jobs)", status_ms, floor_squeue, "floor = one squeue"))
        before = rpc_total()
        timed([*cli, "status"], env)
        rpcs = rpc_total() - before
    finally:
        subprocess.run(["scancel", hold, *submitted], check=False)

    print(f"{'command':30} {'hpctrain ms':>12} {'floor ms':>9} {'ratio':>6}  note")
    for name, ours, floor, note in rows:
        print(f"{name:30} {ours:12.1f} {floor:9.1f} {ours / floor:6.2f}  {note}")
    print(f"slurmctld RPCs per `hpctrain status` poll over {args.tracked} jobs: {rpcs}")
    print(f"machine: {os.cpu_count()} cores, python {sys.version.split()[0]}, runs per median: {args.runs}")


if __name__ == "__main__":
    main()
