"""Login-node cost of the CLI against the floor script, side by side on the local Slurm cluster.

The floor for a Python CLI is a process that imports only jinja2 and yaml and then calls sbatch
(or squeue) once. This prints medians of whole-process wall times and their ratios, and the
slurmctld RPCs that one `hpctrain status` poll costs (from sdiag), for 200 tracked jobs.

    python benchmarks/bench_cli.py [--runs 15] [--tracked 200]
    python benchmarks/bench_cli.py --against /path/to/old/checkout [--runs 21]

With ``--against``, render and submit of this checkout and of the other one (for example a
``git worktree add`` of an older commit) are timed instead, run by run in turns (the order swapped
every run), each with its own job file, site profiles and PYTHONPATH: load on the machine falls on
both alike, and the ratio this / other is the regression (or the gain).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
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


def hold_job() -> str:
    """A held job that the submitted jobs depend on: they wait, so submission is measured, not training."""
    argv = ["sbatch", "--parsable", "--hold", "--wrap", "true"]
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout.strip().split(";")[0]


def paired(other: Path, runs: int) -> None:
    """render and submit of this checkout against `other`'s, interleaved run by run."""
    env = {**os.environ, "HPCTRAIN_HOME": tempfile.mkdtemp(prefix="hpctrain-bench-")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    trees = {"this": REPO, "other": other.resolve()}
    hold = hold_job()
    held = ["--set", f"dependency=afterok:{hold}", "--set", "train.steps=1"]
    submitted: list[str] = []
    load_before = os.getloadavg()[0]

    def once(tree: Path, verb: str) -> tuple[float, float]:
        """Wall ms and CPU ms (user + system of the process and what it ran, e.g. sbatch)."""
        argv = [sys.executable, "-m", "hpctrain.cli.main", verb, str(tree / "jobs" / "digits-ddp.yaml")]
        argv += ["--site", "local", *held, *(["--json"] if verb == "submit" else [])]
        cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)  # microseconds; os.times() ticks 10 ms
        start = time.perf_counter()
        proc = subprocess.run(
            argv, capture_output=True, text=True, cwd=tree, env={**env, "PYTHONPATH": str(tree)}
        )
        elapsed = time.perf_counter() - start
        cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if proc.returncode != 0:
            raise SystemExit(f"{tree}: {verb} failed: {proc.stderr}")
        if verb == "submit":
            submitted.append(json.loads(proc.stdout)["job_id"])
        cpu = (cpu_after.ru_utime + cpu_after.ru_stime) - (cpu_before.ru_utime + cpu_before.ru_stime)
        return elapsed * 1000, cpu * 1000

    try:
        print(f"{'command':16} {'this ms':>8} {'other ms':>8} {'ratio':>6} {'paired':>6} {'CPU ratio':>9}")
        for verb in ("render", "submit"):
            wall: dict[str, list[float]] = {"this": [], "other": []}
            cpu: dict[str, list[float]] = {"this": [], "other": []}
            for name in trees:  # one untimed run each: page cache, Jinja's bytecode cache
                once(trees[name], verb)
            for i in range(runs):
                for name in ("this", "other") if i % 2 == 0 else ("other", "this"):
                    elapsed, used = once(trees[name], verb)
                    wall[name].append(elapsed)
                    cpu[name].append(used)
            this, that = (statistics.median(wall[n]) for n in ("this", "other"))
            pairs = statistics.median(a / b for a, b in zip(wall["this"], wall["other"], strict=True))
            cpu_ratio = statistics.median(cpu["this"]) / statistics.median(cpu["other"])
            print(
                f"hpctrain {verb:7} {this:8.1f} {that:8.1f} {this / that:6.3f} {pairs:6.3f} {cpu_ratio:9.3f}"
            )
        print(
            f"wall ms, median of {runs}; ratio: of the medians; paired: median of the run-by-run ratios; "
            "CPU ratio: of the median CPU times (less sensitive to other load)"
        )
    finally:
        subprocess.run(["scancel", hold, *submitted], check=False)
    print(f"load average (1 min) before {load_before:.2f}, after {os.getloadavg()[0]:.2f}; other: {other}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--tracked", type=int, default=200)
    parser.add_argument("--against", type=Path, help="another checkout: time render and submit against it")
    args = parser.parse_args()
    if args.against:
        paired(args.against, args.runs)
        return

    home = Path(tempfile.mkdtemp(prefix="hpctrain-bench-"))
    env = {**os.environ, "HPCTRAIN_HOME": str(home)}
    py = sys.executable
    cli = [py, "-m", "hpctrain.cli.main"]
    # Jobs wait behind a held job, so the benchmark measures submission, not training.
    hold = hold_job()
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
