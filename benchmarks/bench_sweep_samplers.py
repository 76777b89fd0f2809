"""Optuna against random search on the digits job, at the same trial budget, on the local Slurm cluster.

For each seed, the sweep of jobs/digits-optuna.yaml (learning rate, batch size, width, dropout) runs
twice: `--sampler random` (every trial drawn up front, one array) and `--sampler optuna` (rounds of
`--round-size` trials, one array each, the study told each round's results). Both spend `--budget`
trials. Printed: the best final eval loss after the first half of the budget and after all of it
(trials in the order they were made), per seed and the mean over seeds, and how often optuna won.

    python benchmarks/bench_sweep_samplers.py [--seeds 5] [--budget 16] [--round-size 4] [--steps 60]
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
from typing import Any

REPO = Path(__file__).resolve().parent.parent
JOB = REPO / "jobs" / "digits-optuna.yaml"
TIMEOUT_S = 900
FINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "STOPPED"}


def hpctrain(args: list[str], env: dict[str, str]) -> Any:
    proc = subprocess.run(
        [sys.executable, "-m", "hpctrain.cli.main", *args, "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=TIMEOUT_S,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"hpctrain {' '.join(args)} failed:\n{proc.stderr}")
    return json.loads(proc.stdout)


def finished_trials(sweep_id: str, env: dict[str, str]) -> list[dict[str, Any]]:
    """The sweep's trials once every one has ended, in trial order."""
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        (summary,) = hpctrain(["sweep", "status", sweep_id], env)
        if all(t["state"] in FINAL for t in summary["trials"]):
            return sorted(summary["trials"], key=lambda t: t["index"])
        if time.monotonic() > deadline:
            raise SystemExit(f"sweep {sweep_id} not done after {TIMEOUT_S} s: {summary['counts']}")
        time.sleep(2)


def best(trials: list[dict[str, Any]]) -> float:
    values = [t["metric"] for t in trials if t["metric"] is not None and t["state"] == "COMPLETED"]
    return min(values) if values else float("nan")


def run(sampler: str, seed: int, args: argparse.Namespace, env: dict[str, str]) -> tuple[float, float, float]:
    """(best after half the budget, best after all of it, wall seconds) of one sweep."""
    options = ["--site", "local", "--sampler", sampler, "--seed", str(seed), "--budget", str(args.budget)]
    options += ["--round-size", str(args.round_size), "--set", f"train.steps={args.steps}"]
    start = time.perf_counter()
    submitted = hpctrain(["sweep", str(JOB), *options], env)  # optuna: returns when its rounds are done
    trials = finished_trials(submitted["sweep_id"], env)
    wall = time.perf_counter() - start
    counted = [t for t in trials if t["state"] != "CANCELLED"][: args.budget]
    return best(counted[: args.budget // 2]), best(counted), wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--budget", type=int, default=16)
    parser.add_argument("--round-size", type=int, default=4)
    parser.add_argument("--steps", type=int, default=60)
    args = parser.parse_args()
    if shutil.which("sbatch") is None:
        raise SystemExit("sbatch not found: start the local cluster (scripts/local-cluster.sh up)")

    home = Path(tempfile.mkdtemp(prefix="hpctrain-bench-samplers-"))
    env = {**os.environ, "HPCTRAIN_HOME": str(home)}
    rows: list[tuple[int, tuple[float, float, float], tuple[float, float, float]]] = []
    try:
        for seed in range(args.seeds):
            rows.append((seed, run("random", seed, args, env), run("optuna", seed, args, env)))
            _, r, o = rows[-1]
            print(
                f"seed {seed}: random {r[1]:.4f} ({r[2]:.0f} s), optuna {o[1]:.4f} ({o[2]:.0f} s)", flush=True
            )
    finally:
        shutil.rmtree(home, ignore_errors=True)

    half = args.budget // 2
    print(
        f"\nbest eval loss of digits, {args.budget} trials ({args.steps} steps each), "
        f"rounds of {args.round_size}"
    )
    print(
        f"| seed | random, {half} trials | optuna, {half} trials "
        f"| random, {args.budget} | optuna, {args.budget} |"
    )
    print("| --- | --- | --- | --- | --- |")
    for seed, r, o in rows:
        print(f"| {seed} | {r[0]:.4f} | {o[0]:.4f} | {r[1]:.4f} | {o[1]:.4f} |")
    means = [statistics.mean(row[k][i] for row in rows) for i in (0, 1) for k in (1, 2)]
    print(f"| mean | {means[0]:.4f} | {means[1]:.4f} | {means[2]:.4f} | {means[3]:.4f} |")
    wins = sum(1 for _, r, o in rows if o[1] < r[1])
    walls = [statistics.mean(row[k][2] for row in rows) for k in (1, 2)]
    print(
        f"optuna better on {wins} of {len(rows)} seeds; mean wall per sweep: random {walls[0]:.0f} s, "
        f"optuna {walls[1]:.0f} s"
    )
    load = os.getloadavg()
    print(f"machine: {os.cpu_count()} cores, load {load[0]:.1f}, python {sys.version.split()[0]}")


if __name__ == "__main__":
    main()
