"""Per-rank state bytes and step time of every parallel layout against DDP: 4 gloo ranks on this host.

Runs the real runtime (``python -m hpctrain.runtime``, 4 local processes, one thread each) on a
GPT a little larger than the CI one, reads rank 0's metrics (the per-rank memory report after the
first step, and the median step time after the first two steps) and prints one Markdown table.

    python benchmarks/bench_layouts_cpu.py [--steps 10] [--d-model 128] [--out bench-out/layouts-cpu.md]

On a 2-core machine 4 ranks share 2 cores: step times compare communication and bubble overheads
of the layouts, not speed-ups. State bytes are exact.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# The launcher and layout table are the unit tests' (tests/unit/runtime/parallel/test_training.py).
sys.path.insert(0, str(ROOT))

from tests.unit.runtime.parallel.test_training import LAYOUTS, memory, run_layout  # noqa: E402


def measure(name: str, parallel: dict[str, Any], options: dict[str, Any], steps: int, folder: Path) -> dict:
    records = run_layout(folder / name, parallel, steps=steps, batch_size=16, options=options)
    reports = [r["rank_bytes"] for r in memory(records)]
    times = [r["step_time_s"] for r in records if r["kind"] == "train"][2:]
    peak = max(r["peak_mem_mb"] for r in memory(records))
    return {
        "params": max(r["params"] for r in reports),
        "grads": max(r["grads"] for r in reports),
        "optimizer": max(r["optimizer"] for r in reports),
        "peak_mb": peak,
        "step_s": statistics.median(times),
    }


def table(results: dict[str, dict], ddp: dict) -> str:
    def kib(value: int) -> str:
        return f"{value / 1024:,.0f}"

    lines = [
        "| layout | params KiB | grads KiB | optim KiB | state/ddp | peak RSS MB | step ms | step/ddp |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    ddp_state = ddp["params"] + ddp["grads"] + ddp["optimizer"]
    for name, r in results.items():
        state = r["params"] + r["grads"] + r["optimizer"]
        lines.append(
            f"| {name} | {kib(r['params'])} | {kib(r['grads'])} | {kib(r['optimizer'])} | "
            f"{state / ddp_state:.2f} | {r['peak_mb']:.0f} | {r['step_s'] * 1000:.0f} | "
            f"{r['step_s'] / ddp['step_s']:.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=1024)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--out", type=Path, help="also write the table to this file")
    args = parser.parse_args()
    options = {
        "size": "tiny",
        "d_model": args.d_model,
        "n_layers": args.layers,
        "n_heads": 4,
        "vocab": args.vocab,
        "seq_len": args.seq_len,
    }
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, parallel in LAYOUTS.items():
            results[name] = measure(name, parallel, options, args.steps, Path(tmp))
            print(f"{name}: {results[name]}", file=sys.stderr)
    text = table(results, results["ddp"])
    header = (
        f"GPT d_model={args.d_model} layers={args.layers} vocab={args.vocab} seq_len={args.seq_len}, "
        f"global batch 16, 4 gloo ranks on one host, {args.steps} steps (median after the first two).\n\n"
    )
    print(header + text)
    if args.out:
        args.out.write_text(header + text + "\n")


if __name__ == "__main__":
    main()
