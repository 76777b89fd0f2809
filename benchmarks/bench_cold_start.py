"""A cold attempt's start-up under `launcher: srun` and `launcher: fork`, side by side, local cluster.

Pairs of digits jobs (2 nodes x 2 ranks, preflight on) run one after the other, the order of each
pair alternating. For each job: the seconds from its attempt's start line (attempts.jsonl, written
by the supervisor just before srun) to the end of the first training step (rank 0's `startup`
event), and that event's parts (hpctrain.runtime.startup_times). Prints the medians, the median of
the pairs' fork/srun ratios, and the load average.

    python benchmarks/bench_cold_start.py [--pairs 5] [--steps 30]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LAUNCHERS = ("srun", "fork")


def run_job(launcher: str, steps: int, env: dict[str, str]) -> dict[str, float]:
    """One job to its end; its start-up: `total` (attempt start to first step) and each part."""
    argv = [sys.executable, "-m", "hpctrain.cli.main", "submit", "digits-ddp", "--site", "local", "--json"]
    argv += ["--set", f"train.steps={steps}", "--set", f"launcher={launcher}", "--set", "preflight=true"]
    argv += ["--set", "resources.nodes=2", "--set", "resources.tasks_per_node=2", "--wait"]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=REPO, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{launcher} job failed: {proc.stdout[-2000:]} {proc.stderr[-2000:]}")
    run = Path(json.JSONDecoder().raw_decode(proc.stdout)[0]["run_dir"])
    start = next(
        json.loads(line)["time"]
        for line in (run / "attempts.jsonl").read_text().splitlines()
        if json.loads(line)["event"] == "start"
    )
    event = next(
        json.loads(line)
        for line in (run / "metrics.jsonl").read_text().splitlines()
        if '"startup"' in line and json.loads(line).get("event") == "startup"
    )
    parts = {k: float(v) for k, v in event["detail"].items() if k not in ("began", "warm")}
    return {"total": event["time"] - start, **parts}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    env = {
        **os.environ,
        "HPCTRAIN_HOME": tempfile.mkdtemp(prefix="bench-cold-start-"),
        "PYTHONPATH": str(REPO),
    }
    found: dict[str, list[dict[str, float]]] = {launcher: [] for launcher in LAUNCHERS}
    for pair in range(args.pairs):
        for launcher in LAUNCHERS if pair % 2 == 0 else LAUNCHERS[::-1]:
            found[launcher].append(run_job(launcher, args.steps, env))
    print(f"load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; {args.pairs} pairs")
    for launcher, jobs in found.items():
        parts = sorted({part for job in jobs for part in job} - {"total"})
        median = {part: statistics.median(job.get(part, 0.0) for job in jobs) for part in parts}
        medians = ", ".join(f"{part} {seconds:.2f}" for part, seconds in median.items())
        totals = [round(job["total"], 2) for job in jobs]
        print(f"{launcher:5s} attempt start to first step: median {statistics.median(totals):.2f} s {totals}")
        print(f"      parts (median s): {medians}")
    ratios = [fork["total"] / srun["total"] for srun, fork in zip(found["srun"], found["fork"], strict=True)]
    print(f"fork / srun, median of the pairs' ratios: {statistics.median(ratios):.3f}")


if __name__ == "__main__":
    main()
