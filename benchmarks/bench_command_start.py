"""A command job's start against the same script under a hand-written `srun torchrun`, local cluster.

Pairs of jobs (2 nodes x 2 ranks, gloo) run one after the other, the order of each pair alternating:

- ``hpctrain``: ``hpctrain submit JOB --site local --wait``, a command job (``launcher: srun``) whose
  ``setup:`` line prints ``date +%s.%N``. Setup lines are the first thing of the rendered batch
  script that a spec can place; before them run only a ``mkdir`` and the ``scontrol show hostnames``
  that both scripts run, so that line stands for the batch script's start.
- ``torchrun``: a hand-written sbatch script that records ``date +%s.%N`` as its first line, takes
  the first node from ``scontrol show hostnames`` and runs ``srun --ntasks-per-node=1 python -m
  torch.distributed.run --nnodes=2 --nproc-per-node=2 --rdzv-backend=c10d`` on the same script.

The script prints one line before it imports anything but ``os`` and ``time`` (its rank and
``time.time()``), then initialises gloo, meets the others at a barrier, prints a second line and
exits. For each job: ``start``, the seconds from the batch script's start to that first line on the
slowest rank; ``barrier``, to the slowest rank's line after the barrier (torchrun's workers print
their first line only after its own rendezvous, so this is where the two have done the same work);
``total``, to the job's end (sacct's End, whole seconds). For hpctrain also ``to srun``: from the
batch script's start to the attempt's start line in attempts.jsonl (written just before srun).
Prints the medians, the median of the pairs' hpctrain/torchrun ratios and a markdown row.

    python benchmarks/bench_command_start.py [--pairs 5]
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
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
KINDS = ("hpctrain", "torchrun")
BATCH_START = "BENCH_BATCH_START"
FIRST_LINE = "BENCH_FIRST_LINE"
BARRIER = "BENCH_BARRIER"

SCRIPT = f"""
import os, time
os.write(1, f"{FIRST_LINE} {{os.environ.get('RANK')}} {{time.time()}}\\n".encode())
import torch.distributed as dist
dist.init_process_group("gloo")
dist.barrier()
os.write(1, f"{BARRIER} {{os.environ.get('RANK')}} {{time.time()}}\\n".encode())
dist.destroy_process_group()
"""

JOB = f"""
name: bench-command-start
resources: {{nodes: 2, tasks_per_node: 2, mem: 1G, time: "00:05:00"}}
launcher: srun
command: python first_line.py
setup: ['echo "{BATCH_START} $(date +%s.%N)"']
code: {{snapshot: false}}
env: {{OMP_NUM_THREADS: 1}}
"""

HAND_SBATCH = f"""#!/bin/bash
#SBATCH --job-name=bench-torchrun
#SBATCH --partition=debug
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=2
#SBATCH --cpus-per-task=1
#SBATCH --mem=1G
#SBATCH --time=00:05:00
echo "{BATCH_START} $(date +%s.%N)"
set -euo pipefail
MASTER=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
PORT=$((20000 + SLURM_JOB_ID % 10000))
export OMP_NUM_THREADS=1 GLOO_SOCKET_IFNAME=lo
srun --ntasks=2 --ntasks-per-node=1 python -m torch.distributed.run --nnodes=2 --nproc-per-node=2 \\
    --rdzv-backend=c10d --rdzv-endpoint="$MASTER:$PORT" first_line.py
"""


def stamps(text: str, marker: str) -> list[float]:
    """The times of the ranks' lines that start with `marker` (`MARKER RANK SECONDS`)."""
    return [float(seconds) for seconds in re.findall(rf"^{marker} \S+ ([0-9.]+)$", text, re.MULTILINE)]


def batch_start(text: str) -> float:
    found = re.findall(rf"^{BATCH_START} ([0-9.]+)$", text, re.MULTILINE)
    if not found:
        raise SystemExit(f"no {BATCH_START} line in the batch log:\n{text[-2000:]}")
    return float(found[0])


def job_end(job_id: str) -> float:
    out = subprocess.run(
        ["sacct", "-n", "-X", "-P", "-j", job_id, "-o", "End"], capture_output=True, text=True, check=True
    ).stdout.split()
    return datetime.fromisoformat(out[0]).timestamp()


def measured(job_id: str, began: float, output: str) -> dict[str, float]:
    """Batch start to the slowest rank's first line (`start`), past the barrier, and to the job's end."""
    lines, barriers = stamps(output, FIRST_LINE), stamps(output, BARRIER)
    if len(lines) != 4 or len(barriers) != 4:
        raise SystemExit(f"job {job_id}: {len(lines)} first lines and {len(barriers)} barrier lines, not 4")
    return {"start": max(lines) - began, "barrier": max(barriers) - began, "total": job_end(job_id) - began}


def run_hpctrain(folder: Path, env: dict[str, str]) -> dict[str, float]:
    argv = [sys.executable, "-m", "hpctrain.cli.main", "submit", str(folder / "job.yaml"), "--site", "local"]
    proc = subprocess.run([*argv, "--json", "--wait"], capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"hpctrain job failed: {proc.stdout[-2000:]} {proc.stderr[-2000:]}")
    submitted = json.JSONDecoder().raw_decode(proc.stdout)[0]
    run = Path(submitted["run_dir"])
    began = batch_start((run / "logs" / "batch.log").read_text())
    ranks = "".join(path.read_text() for path in (run / "logs").glob("rank-*.log"))
    attempt = next(
        json.loads(line)["time"]
        for line in (run / "attempts.jsonl").read_text().splitlines()
        if json.loads(line)["event"] == "start"
    )
    job_id = str(submitted["job_id"])
    return {**measured(job_id, began, ranks), "to srun": attempt - began}


def run_torchrun(folder: Path, env: dict[str, str]) -> dict[str, float]:
    log = folder / f"torchrun-{len(list(folder.glob('torchrun-*.log')))}.log"
    argv = ["sbatch", "--parsable", "--wait", f"--output={log}", str(folder / "hand.sbatch")]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=folder, check=False)
    text = log.read_text() if log.exists() else ""
    if proc.returncode != 0:
        raise SystemExit(f"torchrun job failed: {proc.stderr[-2000:]} {text[-2000:]}")
    return measured(proc.stdout.strip().split(";")[0], batch_start(text), text)


def paired_ratio(found: dict[str, list[dict[str, float]]], key: str) -> float:
    """The median of the pairs' hpctrain / torchrun ratios of `key`, printed with each pair's."""
    ratios = [a[key] / b[key] for a, b in zip(found["hpctrain"], found["torchrun"], strict=True)]
    ratio = statistics.median(ratios)
    print(
        f"hpctrain / torchrun {key}: median of the pairs' ratios {ratio:.3f} {[round(r, 2) for r in ratios]}"
    )
    return ratio


def markdown_row(found: dict[str, list[dict[str, float]]], ratio: dict[str, float], pairs: int) -> str:
    median = {
        kind: {key: statistics.median(job[key] for job in jobs) for key in ratio}
        for kind, jobs in found.items()
    }
    hpc, hand = median["hpctrain"], median["torchrun"]
    figure = (
        f"**{ratio['start']:.2f}** ({hpc['start']:.2f} / {hand['start']:.2f} s); past the first barrier "
        f"{ratio['barrier']:.2f} ({hpc['barrier']:.2f} / {hand['barrier']:.2f} s); to the job's end "
        f"{ratio['total']:.2f} ({hpc['total']:.1f} / {hand['total']:.1f} s); load {os.getloadavg()[0]:.1f}"
    )
    return (
        "| A command job's start, batch script to the slowest rank's first line (2 nodes x 2 ranks, gloo), "
        f"hpctrain (`launcher: srun`) / hand-written `srun torchrun`, median of {pairs} pairs' ratios | "
        f"{figure} | {datetime.now():%Y-%m-%d} | CPU 2 cores (local cluster) | "
        f"`python benchmarks/bench_command_start.py --pairs {pairs}` |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="bench-command-start-"))
    (folder / "first_line.py").write_text(SCRIPT)
    (folder / "job.yaml").write_text(JOB)
    (folder / "hand.sbatch").write_text(HAND_SBATCH)
    env = {**os.environ, "HPCTRAIN_HOME": str(folder / "home"), "PYTHONPATH": str(REPO)}
    runners = {"hpctrain": run_hpctrain, "torchrun": run_torchrun}
    found: dict[str, list[dict[str, float]]] = {kind: [] for kind in KINDS}
    for pair in range(args.pairs):
        for kind in KINDS if pair % 2 == 0 else KINDS[::-1]:
            found[kind].append(runners[kind](folder, env))
    print(
        f"load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; {args.pairs} pairs; "
        f"files in {folder}"
    )
    for kind, jobs in found.items():
        for key in jobs[0]:
            values = [round(job[key], 2) for job in jobs]
            print(f"{kind:8s} {key:6s} median {statistics.median(values):6.2f} s {values}")
    ratio = {key: paired_ratio(found, key) for key in ("start", "barrier", "total")}
    print(markdown_row(found, ratio, args.pairs))


if __name__ == "__main__":
    main()
