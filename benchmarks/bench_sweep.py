"""Login-node cost of a 1,000-trial sweep on the local Slurm cluster: sbatch calls, submit time, status time.

Trials wait behind a held job (they never run) and are cancelled at the end. sbatch calls are
counted by a pass-through wrapper put first on PATH (it logs, then execs the real sbatch). `status`
of the 1,000-element sweep is timed against the floor script of bench_cli.py (python importing
jinja2 and yaml, then one squeue), interleaved run by run; medians and their ratio are printed.

    python benchmarks/bench_sweep.py [--trials 1000] [--runs 15] [--submits 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
JOB = REPO / "jobs" / "digits-sweep.yaml"
FLOOR = "import jinja2, yaml, subprocess, sys; subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL)"


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """(wall seconds, CPU seconds of the process and its children, stdout)."""
    before = os.times()
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    wall = time.perf_counter() - start
    after = os.times()
    if proc.returncode != 0:
        raise SystemExit(f"benchmark command failed: {' '.join(argv)}\n{proc.stderr}")
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return wall, cpu, proc.stdout


def counting_sbatch(folder: Path, log: Path) -> None:
    real = shutil.which("sbatch")
    if real is None:
        raise SystemExit("sbatch not found: start the local cluster (scripts/local-cluster.sh up)")
    wrapper = folder / "sbatch"
    wrapper.write_text(f'#!/bin/sh\necho x >> "{log}"\nexec "{real}" "$@"\n')
    wrapper.chmod(0o755)


def grid_for(trials: int) -> list[str]:
    """--grid options whose product is `trials` (lr x batch size, or lr alone)."""
    sizes = [s for s in (10, 5, 4, 2, 1) if trials % s == 0]
    batch = sizes[0]
    lrs = ",".join(f"{1e-4 * (i + 1):.6g}" for i in range(trials // batch))
    batches = ",".join(str(16 * (i + 1)) for i in range(batch))
    return ["--grid", f"train.lr={lrs}", "--grid", f"train.batch_size={batches}"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--submits", type=int, default=3)
    args = parser.parse_args()

    home = Path(tempfile.mkdtemp(prefix="hpctrain-bench-sweep-"))
    shim, calls = home / "bin", home / "sbatch-calls"
    shim.mkdir()
    counting_sbatch(shim, calls)
    env = {**os.environ, "HPCTRAIN_HOME": str(home), "PATH": f"{shim}{os.pathsep}{os.environ['PATH']}"}
    py = sys.executable
    cli = [py, "-m", "hpctrain.cli.main"]
    hold = subprocess.run(
        ["sbatch", "--parsable", "--hold", "--output=/dev/null", "--wrap", "true"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    hold = hold.split(";")[0]
    held = ["--set", f"dependency=afterok:{hold}"]
    arrays: list[str] = []
    try:
        submit_wall, submit_cpu, per_submit_calls, single_wall = [], [], [], []
        sweep_id = ""
        single = [*cli, "submit", str(JOB), "--site", "local", "--json", *held]
        for _ in range(args.submits):
            # A one-job `hpctrain submit` beside each sweep: the ratio holds when the machine is loaded.
            wall, _, out = timed(single, env)
            arrays.append(json.loads(out)["job_id"])
            single_wall.append(wall)
            calls.write_text("")
            argv = [*cli, "sweep", str(JOB), "--site", "local", "--json", *grid_for(args.trials), *held]
            wall, cpu, out = timed(argv, env)
            submitted = json.loads(out)
            assert submitted["trials"] == args.trials, submitted
            arrays += [a["job_id"] for a in submitted["arrays"]]
            sweep_id = submitted["sweep_id"]
            submit_wall.append(wall)
            submit_cpu.append(cpu)
            per_submit_calls.append(len(calls.read_text().split()))

        status = [*cli, "sweep", "status", sweep_id]
        floor = [py, "-c", FLOOR, "squeue", "--me", "-h"]
        timed(status, env), timed(floor, env)  # warm the page cache
        ours, base = [], []
        for _ in range(args.runs):
            ours.append(timed(status, env)[0])
            base.append(timed(floor, env)[0])
        status_ms, floor_ms = statistics.median(ours) * 1000, statistics.median(base) * 1000
    finally:
        subprocess.run(["scancel", hold, *arrays], check=False)
        shutil.rmtree(home, ignore_errors=True)

    print(f"sweep of {args.trials} trials, {args.submits} submissions:")
    print(f"  sbatch calls per submission: {per_submit_calls}")
    print(
        f"  submit wall s: median {statistics.median(submit_wall):.2f} max {max(submit_wall):.2f}; "
        f"CPU s (user+sys): median {statistics.median(submit_cpu):.2f}"
    )
    one = statistics.median(single_wall)
    print(
        f"  one-job `hpctrain submit` beside it: {one * 1000:.0f} ms; "
        f"sweep / one job = {statistics.median(submit_wall) / one:.1f}"
    )
    print(
        f"status of the {args.trials}-element sweep: {status_ms:.1f} ms, "
        f"floor (one squeue) {floor_ms:.1f} ms, ratio {status_ms / floor_ms:.2f} "
        f"(medians of {args.runs} interleaved runs)"
    )
    load = os.getloadavg()
    print(f"machine: {os.cpu_count()} cores, load {load[0]:.1f}, python {sys.version.split()[0]}")


if __name__ == "__main__":
    main()
