"""Parameter-server modes and data feeding side by side, as local processes in one run.

Table 1: sync vs bounded vs async with one straggler among W workers (between-graph feeding). The
test-only entrypoint ``tests.launcher:faulty`` adds ``--delay`` seconds of compute per step and
makes one worker ``--slow-factor`` times slower. Every mode sees the same number of samples: sync
does ``--steps`` global steps of ``--batch-size``; async and bounded apply ``--steps x W``
single-worker gradients of ``batch-size / W``.
Table 2: between-graph vs in-graph feeding (server 0 sends every batch), sync and async, with no
injected compute, so the data path shows. Each run is 1 server + W workers started by
``tests/launcher.py`` (``python -m hpctrain.runtime`` per rank; the same code runs under srun).
Prints the tables, writes bench-out/ps.md and the loss plot.

    python benchmarks/bench_ps.py            # about 3 minutes on 2 cores
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import tempfile
from pathlib import Path
from typing import Any

import msgspec

from hpctrain.rundir import Result, RunDir

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests import launcher  # noqa: E402

MODES = ("sync", "bounded", "async")
FEEDINGS = ("between-graph", "in-graph")


def run_mode(
    mode: str, args: argparse.Namespace, folder: Path, feeding: str = "between-graph", faults: bool = True
) -> dict[str, Any]:
    """Train one mode to the end; return its result plus the metrics lines."""
    workers = args.workers
    steps = args.steps if mode == "sync" else args.steps * workers
    eval_every = args.eval_every if mode == "sync" else args.eval_every * workers
    train = {
        "steps": steps,
        "batch_size": args.batch_size,
        "lr": args.lr,
        "log_every": max(1, eval_every // 2),
        "eval_every": eval_every,
        "seed": 0,
    }
    if faults:
        train["options"] = {
            "base": args.entrypoint,
            "delay_s": args.delay,
            "slow_worker": workers - 1,
            "slow_factor": args.slow_factor,
        }
    entrypoint = "tests.launcher:faulty" if faults else args.entrypoint
    ps = {"mode": mode, "staleness": args.staleness, "feeding": feeding}
    launcher.ps_run_dir(folder, entrypoint, 1, workers, train, ps)
    codes = launcher.run(folder, 1 + workers, timeout=args.timeout)
    if codes != [0] * (1 + workers):
        logs = "\n".join(launcher.log_text(folder, r)[-1500:] for r in range(1 + workers))
        raise SystemExit(f"{mode}/{feeding}: exit codes {codes}\n{logs}")
    found = RunDir(folder).read_result()
    if not isinstance(found, Result):
        raise SystemExit(f"{mode}/{feeding}: no result ({found})")
    result = msgspec.to_builtins(found)
    records = launcher.metrics(folder)
    start = next(r["time"] for r in records if r.get("event") in ("start", "resumed"))
    for record in records:
        record["elapsed_s"] = record["time"] - start
    result["train_lines"] = [r for r in records if r["kind"] == "train"]
    result["eval_lines"] = [r for r in records if r["kind"] == "eval"]
    result["samples_per_update"] = args.batch_size if mode == "sync" else args.batch_size / workers
    return result


def time_to_accuracy(result: dict[str, Any], target: float) -> tuple[float | None, float | None]:
    """(seconds, samples) at the first evaluation that reached ``target``."""
    for line in result["eval_lines"]:
        if line.get("accuracy", 0.0) >= target:
            return line["elapsed_s"], line["step"] * result["samples_per_update"]
    return None, None


def plot(results: dict[str, dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for mode, result in results.items():
        lines = result["train_lines"]
        ax.plot([r["elapsed_s"] for r in lines], [r["loss"] for r in lines], marker=".", label=mode)
    ax.set_xlabel("wall time (s)")
    ax.set_ylabel("training loss (mean of pushes)")
    ax.set_yscale("log")
    ax.set_title("digits MLP, 1 server + 4 workers, one worker 3x slower")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import torch

    python = platform.python_version()
    return f"{platform.node()}, {cpu}, {os.cpu_count()} cores, Python {python}, torch {torch.__version__}"


def report(results: dict[str, dict[str, Any]], args: argparse.Namespace) -> str:
    sync_rate = results["sync"]["samples_per_s"]
    rows = [
        "| mode | updates | wall s | samples/s | vs sync | straggler samples/s | staleness mean/max | "
        f"final acc | s to {args.target:.0%} | samples to {args.target:.0%} |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for mode, r in results.items():
        seconds, samples = time_to_accuracy(r, args.target)
        slow = r["per_worker"][str(args.workers - 1)]["samples_per_s"]
        rows.append(
            f"| {mode} | {r['step']} | {r['train_time_s']:.1f} | {r['samples_per_s']:.0f} | "
            f"{r['samples_per_s'] / sync_rate:.2f}x | {slow:.0f} | "
            f"{r['staleness_mean']:.1f}/{r['staleness_max']} | "
            f"{r['eval_accuracy']:.3f} | {'-' if seconds is None else f'{seconds:.1f}'} | "
            f"{'-' if samples is None else f'{samples:.0f}'} |"
        )
    ratio = results["async"]["samples_per_s"] / sync_rate
    return "\n".join(
        [
            "# Parameter-server benchmark",
            "",
            f"Date: {datetime.date.today().isoformat()}. Machine: {machine()}.",
            "",
            f"`python benchmarks/bench_ps.py` ({args.workers} workers + 1 server as local processes, "
            f"digits MLP, global batch {args.batch_size}, lr {args.lr}, {args.delay * 1000:.0f} ms injected "
            f"compute per step, worker {args.workers - 1} {args.slow_factor:g}x slower, bounded staleness "
            f"{args.staleness}; every mode sees {args.steps * args.batch_size} samples).",
            "",
            *rows,
            "",
            f"**async / sync throughput: {ratio:.2f}x** (target >= 1.8x). Sync waits for the straggler "
            "every step; async lets the fast workers run at full speed. Bounded staleness absorbs "
            f"stalls shorter than {args.staleness} steps only: against a permanent straggler the fast "
            "workers reach the bound and then move at its pace, so its throughput is sync's. Async and "
            "bounded still reach the target accuracy sooner here, because each small single-worker "
            "update counts as an optimizer step (4x the updates per sample of sync at the same lr).",
            "",
            "![loss against wall time](img/ps-loss-vs-time.png)",
            "",
        ]
    )


def feeding_report(results: dict[tuple[str, str], dict[str, Any]], args: argparse.Namespace) -> str:
    rows = [
        "| mode | feeding | updates | wall s | samples/s | in-graph / between-graph | final acc |",
        "|---|---|---|---|---|---|---|",
    ]
    for (mode, feed), r in results.items():
        base = results[(mode, "between-graph")]["samples_per_s"]
        rows.append(
            f"| {mode} | {feed} | {r['step']} | {r['train_time_s']:.1f} | {r['samples_per_s']:.0f} | "
            f"{r['samples_per_s'] / base:.2f}x | {r['eval_accuracy']:.3f} |"
        )
    return "\n".join(
        [
            "## Data feeding",
            "",
            f"The same jobs without injected compute or straggler ({args.workers} workers + 1 server, "
            f"global batch {args.batch_size}): between-graph workers read their own shard, in-graph "
            "server 0 reads every worker's batch and sends it with its reply.",
            "",
            *rows,
            "",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entrypoint", default="hpctrain.examples.digits:build")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--steps", type=int, default=150, help="sync steps; async/bounded do steps x workers")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--delay", type=float, default=0.05, help="injected compute seconds per step")
    parser.add_argument("--slow-factor", type=float, default=3.0)
    parser.add_argument("--staleness", type=int, default=2)
    parser.add_argument("--eval-every", type=int, default=10, help="in sync steps")
    parser.add_argument("--target", type=float, default=0.95, help="accuracy for time-to-accuracy")
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--plot", type=Path, default=ROOT / "docs" / "img" / "ps-loss-vs-time.png")
    parser.add_argument("--report", type=Path, default=ROOT / "bench-out" / "ps.md")
    parser.add_argument("--json", type=Path, default=None, help="also dump raw results here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-ps-") as tmp:
        results = {mode: run_mode(mode, args, Path(tmp) / mode) for mode in MODES}
        feeding = {
            (mode, feed): run_mode(mode, args, Path(tmp) / f"{mode}-{feed}", feed, faults=False)
            for mode in ("sync", "async")
            for feed in FEEDINGS
        }
    plot(results, args.plot)
    text = report(results, args) + feeding_report(feeding, args)
    args.report.parent.mkdir(parents=True, exist_ok=True)
    args.report.write_text(text)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    print(text)


if __name__ == "__main__":
    main()
