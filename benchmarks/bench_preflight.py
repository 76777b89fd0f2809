"""Cost of the in-job preflight: the digits job with preflight on and off, side by side, local cluster.

Pairs of jobs run one after the other (on, off, on, off, ...). sacct gives each job's elapsed
seconds; preflight.json gives the seconds preflight itself took inside the training processes
(checks, process group, all-reduces: it runs in the step's own processes, after their torch
import). It prints medians, the on/off ratio of whole-job time, and the load average (the
machine is shared).

    python benchmarks/bench_preflight.py [--pairs 3] [--steps 20]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def run_job(preflight: bool, steps: int, env: dict[str, str]) -> dict[str, float]:
    argv = [sys.executable, "-m", "hpctrain.cli.main", "submit", "digits-ddp", "--site", "local", "--json"]
    argv += ["--set", f"train.steps={steps}", "--set", f"preflight={str(preflight).lower()}", "--wait"]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=REPO, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"job failed: {proc.stdout[-2000:]} {proc.stderr[-2000:]}")
    submitted = json.JSONDecoder().raw_decode(proc.stdout)[0]
    job_id = submitted["job_id"]
    report = Path(submitted["run_dir"]) / "preflight.json"
    inside = json.loads(report.read_text())["seconds"] if report.exists() else float("nan")
    time.sleep(2)  # sacct catches up with the end of the job
    out = subprocess.run(
        ["sacct", "-j", job_id, "-n", "-P", "--format=JobID,ElapsedRaw"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    steps_s = dict(line.split("|") for line in out.splitlines() if "|" in line)
    return {"job": float(steps_s[job_id]), "inside": inside}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    env = {
        **os.environ,
        "HPCTRAIN_HOME": tempfile.mkdtemp(prefix="bench-preflight-"),
        "PYTHONPATH": str(REPO),
    }
    on, off = [], []
    for _ in range(args.pairs):
        on.append(run_job(True, args.steps, env))
        off.append(run_job(False, args.steps, env))
    job_on = statistics.median(r["job"] for r in on)
    job_off = statistics.median(r["job"] for r in off)
    inside = statistics.median(r["inside"] for r in on)
    print(f"load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"digits job, preflight on : median {job_on:.0f} s (preflight itself {inside:.2f} s)")
    print(f"digits job, preflight off: median {job_off:.0f} s")
    print(f"ratio on/off: {job_on / job_off:.2f}; added per job: {job_on - job_off:+.0f} s")
    print("each job:", [(r["job"], round(r["inside"], 2)) for r in on], [r["job"] for r in off])


if __name__ == "__main__":
    main()
