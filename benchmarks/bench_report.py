"""`hpctrain report` of a run whose metrics.jsonl has about 100,000 lines (the issue asks under 3 s).

The run is made up (tests/unit/report_runs.py): train and per-rank (`ranks`) lines every interval,
eval and checkpoint lines, a restart, memory lines, attempts.jsonl. Measured: the whole command as a
fresh process (what a user waits for: Python start, imports, reading, drawing in forked processes,
writing), the same pinned to one core (drawn one figure after another), and in one process the parts
of it (reading every line; drawing each figure).

    python benchmarks/bench_report.py [--lines 100000] [--ranks 8] [--runs 5]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.unit.report_runs import write_run  # noqa: E402

# The floor: a process that imports matplotlib and saves five figures of the report's sizes, with one
# short line each. What no report with five PNGs can beat on this machine.
FLOOR = (
    "import sys, matplotlib; matplotlib.use('Agg'); import matplotlib.pyplot as plt\n"
    "for n, size in enumerate([(11, 7.4), (10.4, 4), (11, 4.8), (11, 3.8), (15, 4.4)]):\n"
    "    fig, axes = plt.subplots(1, 2, figsize=size, layout='constrained'); axes[0].plot([0, 1], [1, 0])\n"
    "    fig.savefig(f'{sys.argv[1]}/floor-{n}.png', dpi=100); plt.close(fig)\n"
)
LINES_PER_INTERVAL = 2.15  # train + ranks every interval, eval every 10th, checkpoint every 20th


def timed_process(argv: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds user+system) of one whole process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    # Bytecode is written (and then read), as an installed package's is: PYTHONDONTWRITEBYTECODE, set
    # in some shells, would have Python compile every hpctrain module again in every run.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, env={**env, "PYTHONPATH": str(REPO)})
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def parts(root: Path, out: Path) -> dict[str, tuple[float, float]]:
    """(wall, CPU) seconds of each part of one report, in this process (matplotlib imported first)."""
    import matplotlib.backends.backend_agg
    import matplotlib.figure  # noqa: F401

    from hpctrain.report import build
    from hpctrain.report.series import read_run
    from hpctrain.rundir import RunDir

    times: dict[str, tuple[float, float]] = {}
    start, cpu = time.perf_counter(), time.process_time()
    series = read_run(RunDir(root))
    times["read every line"] = (time.perf_counter() - start, time.process_time() - cpu)
    for figure in build._run_figures():  # one after another, in this process
        start, cpu = time.perf_counter(), time.process_time()
        figure.draw(series, out / f"report-{figure.stem}.png", "bench")
        times[f"figure {figure.stem}"] = (time.perf_counter() - start, time.process_time() - cpu)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=100_000)
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder) / "run"
        run = write_run(root, intervals=int(args.lines / LINES_PER_INTERVAL), ranks=args.ranks)
        lines = run.metrics.read_bytes().count(b"\n")
        size_mb = run.metrics.stat().st_size / 1e6
        command = [sys.executable, "-m", "hpctrain.cli.main", "report", str(root), "-o", f"{folder}/out"]
        # The same on one core: the figures one after another (what a one-CPU batch job gets).
        one_core = ["taskset", "-c", "0", *command] if shutil.which("taskset") else None
        floor = [sys.executable, "-c", FLOOR, folder]
        timed_process(command)  # warm the page cache and the bytecode
        rounds: dict[str, list[tuple[float, float]]] = {"report": [], "one core": [], "floor": []}
        for _ in range(args.runs):  # interleaved, so a change of load hits each alike
            rounds["report"].append(timed_process(command))
            if one_core:
                rounds["one core"].append(timed_process(one_core))
            rounds["floor"].append(timed_process(floor))
        split = parts(root, Path(folder) / "parts")
    print(
        f"metrics.jsonl: {lines:,} lines, {size_mb:.1f} MB, {args.ranks} ranks; "
        f"load {load_before:.2f} before, {os.getloadavg()[0]:.2f} after; {os.cpu_count()} CPUs"
    )
    print(f"{'what':<30} {'wall s (median, min)':>21} {'CPU s (median, min)':>21}")
    for name, key in (
        ("hpctrain report (a process)", "report"),
        ("  the same, on one core", "one core"),
        ("floor: 5 empty PNGs", "floor"),
    ):
        if rounds[key]:
            wall, cpu = _split(rounds[key])
            middle = f"{statistics.median(wall):>12.2f} {wall[0]:>8.2f}"
            print(f"{name:<30} {middle} {statistics.median(cpu):>12.2f} {cpu[0]:>8.2f}")
    print("in one process, one after another:")
    for name, (wall, cpu) in split.items():
        print(f"{'  ' + name:<30} {wall:>12.2f} {'':>8} {cpu:>12.2f}")


def _split(measured: list[tuple[float, float]]) -> tuple[list[float], list[float]]:
    return sorted(w for w, _ in measured), sorted(c for _, c in measured)


if __name__ == "__main__":
    main()
