"""This checkout against another (an older commit's worktree), in turns: PS throughput and layout step times.

A regression check for the runtime benchmarks whose single runs are too noisy on a 2-core machine
to show a 5% change. Each measurement runs in a fresh process with the tree's own code first on
PYTHONPATH (and so in every rank it starts); the two trees alternate unit by unit (one layout, or
one whole PS run), the order swapped every time, so load and drift fall on both alike. The ratio
is this / other of the medians over the rounds.

- ``layouts``: every layout of ``tests/unit/runtime/parallel/test_training.py`` (4 local gloo ranks, the
  tiny GPT of bench_layouts_cpu.py); the median step time after the first two steps.
- ``ps``: each tree's own ``benchmarks/bench_ps.py --json`` (sync, bounded and async with one
  straggler); samples per second of each mode, and async / sync.

    git worktree add --detach /tmp/old 266379f
    python benchmarks/bench_against.py /tmp/old --suite layouts --rounds 3 [--steps 30]
    python benchmarks/bench_against.py /tmp/old --suite ps --rounds 3
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]

# Run inside the measured tree: its own test launcher, its own hpctrain (same API in both trees).
# The layout table's test module: tests/unit/runtime/parallel/ now, tests/unit/ in older trees.
LAYOUTS_IMPORT = """try:
    from tests.unit.runtime.parallel.test_training import LAYOUTS, run_layout
except ImportError:
    from test_parallel_training import LAYOUTS, run_layout
"""
LAYOUT_STEP = """
import json, statistics, sys, tempfile
from pathlib import Path
LAYOUTS_IMPORT
name, steps, options = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
with tempfile.TemporaryDirectory() as tmp:
    records = run_layout(Path(tmp) / name, LAYOUTS[name], steps=steps, batch_size=16, options=options)
times = [r["step_time_s"] for r in records if r["kind"] == "train"][2:]
print(json.dumps(statistics.median(times)))
""".replace("LAYOUTS_IMPORT\n", LAYOUTS_IMPORT)


def tree_env(tree: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tree), str(tree / "tests" / "unit")])
    return env


def run(tree: Path, argv: list[str], timeout: float) -> str:
    proc = subprocess.run(
        [sys.executable, *argv], cwd=tree, env=tree_env(tree), capture_output=True, text=True, timeout=timeout
    )
    if proc.returncode:
        raise SystemExit(f"{tree}: {' '.join(argv[:3])} failed\n{proc.stderr[-3000:]}")
    return proc.stdout


def layout_names(tree: Path) -> list[str]:
    code = LAYOUTS_IMPORT + "import json\nprint(json.dumps(list(LAYOUTS)))"
    return json.loads(run(tree, ["-c", code], 120))


def measure_layout(tree: Path, name: str, args: argparse.Namespace) -> dict[str, float]:
    options = json.dumps(
        {"size": "tiny", "d_model": 128, "n_layers": 8, "n_heads": 4, "vocab": 1024, "seq_len": 64}
    )
    return {name: json.loads(run(tree, ["-c", LAYOUT_STEP, name, str(args.steps), options], args.timeout))}


def measure_ps(tree: Path, args: argparse.Namespace) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        run(
            tree,
            [
                "benchmarks/bench_ps.py",
                *(
                    "--json",
                    str(out / "ps.json"),
                    "--plot",
                    str(out / "ps.png"),
                    "--report",
                    str(out / "ps.md"),
                ),
            ],
            args.timeout,
        )
        results = json.loads((out / "ps.json").read_text())
    rates = {mode: float(r["samples_per_s"]) for mode, r in results.items()}
    rates["async / sync"] = rates["async"] / rates["sync"]
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "other", type=Path, help="the other checkout (e.g. a git worktree of an older commit)"
    )
    parser.add_argument("--this", type=Path, default=HERE, help="the checkout measured (default: this one)")
    parser.add_argument("--suite", choices=("layouts", "ps"), required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=30, help="layouts: training steps per run")
    parser.add_argument("--layouts", default="", help="layouts: comma-separated names (default: all)")
    parser.add_argument("--timeout", type=float, default=900, help="seconds for one measured process")
    args = parser.parse_args()
    trees = {"this": args.this.resolve(), "other": args.other.resolve()}
    if args.suite == "layouts":
        names = [n for n in args.layouts.split(",") if n] or layout_names(trees["this"])
        missing = set(names) - set(layout_names(trees["other"]))
        if missing:
            raise SystemExit(f"the other tree has no layout {sorted(missing)}")
        lower_is_better, unit = True, "step ms"
    else:
        lower_is_better, unit = False, "samples/s"
    # The smallest unit runs in turns: one layout (each a fresh job of 4 ranks), or one whole PS run.
    units = names if args.suite == "layouts" else ["ps"]
    samples: dict[str, dict[str, list[float]]] = {"this": {}, "other": {}}
    started = time.monotonic()
    for round_ in range(args.rounds):
        for number, item in enumerate(units):
            order = ["this", "other"] if (round_ + number) % 2 == 0 else ["other", "this"]
            for which in order:
                values = (
                    measure_layout(trees[which], item, args)
                    if args.suite == "layouts"
                    else measure_ps(trees[which], args)
                )
                for key, value in values.items():
                    samples[which].setdefault(key, []).append(value)
                print(f"round {round_ + 1} {which}: {json.dumps(values)}", file=sys.stderr, flush=True)
    scale = 1000.0 if args.suite == "layouts" else 1.0
    row_name = "layout" if args.suite == "layouts" else "mode"
    rows = [f"| {row_name} | this {unit} | other {unit} | this / other | runs (this; other) |"]
    rows.append("|---|---:|---:|---:|---|")
    ratios = []
    for key, ours in samples["this"].items():
        theirs = samples["other"][key]
        ratio = statistics.median(ours) / statistics.median(theirs)
        if key != "async / sync":
            ratios.append(ratio)
        runs = "; ".join(
            ", ".join(f"{v * scale:.0f}" if scale > 1 else f"{v:.4g}" for v in vs) for vs in (ours, theirs)
        )
        rows.append(
            f"| {key} | {statistics.median(ours) * scale:.4g} | {statistics.median(theirs) * scale:.4g} | "
            f"{ratio:.3f} | {runs} |"
        )
    geomean = math.exp(statistics.fmean(math.log(r) for r in ratios))
    better = "lower" if lower_is_better else "higher"
    print(
        f"{args.suite}: this {trees['this']} against {trees['other']}, {args.rounds} rounds in turns, "
        f"{time.monotonic() - started:.0f} s; {better} is better\n"
    )
    print("\n".join(rows))
    print(f"\ngeometric mean of this / other: **{geomean:.3f}**")


if __name__ == "__main__":
    main()
