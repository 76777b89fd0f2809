"""`hpctrain report` of a run whose metrics.jsonl has about 100,000 lines (the issue asks under 3 s).

The run is made up (tests/unit/report_runs.py): train and per-rank (`ranks`) lines every interval,
eval and checkpoint lines, a restart, memory lines, attempts.jsonl. Measured: the whole command as a
fresh process (what a user waits for: Python start, imports, reading, drawing, writing), and in one
process the parts of it (reading every line; drawing each figure; the summary page).

    python benchmarks/bench_report.py [--lines 100000] [--ranks 8] [--runs 5]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.unit.report_runs import write_run  # noqa: E402

LINES_PER_INTERVAL = 2.15  # train + ranks every interval, eval every 10th, checkpoint every 20th


def timed_process(argv: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds user+system) of one whole process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": str(REPO)})
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def parts(root: Path, out: Path) -> dict[str, float]:
    """Seconds of each part of one report, in this process (matplotlib imported before timing)."""
    from hpctrain.report import build
    from hpctrain.report.plotting import pyplot
    from hpctrain.report.series import read_run
    from hpctrain.rundir import RunDir

    pyplot()
    times: dict[str, float] = {}
    start = time.perf_counter()
    series = read_run(RunDir(root))
    times["read every line"] = time.perf_counter() - start
    for stem, _, draw, _ in build._run_figures():
        start = time.perf_counter()
        draw(series, out / f"report-{stem}.png", "bench")
        times[f"figure {stem}"] = time.perf_counter() - start
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=100_000)
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder) / "run"
        run = write_run(root, intervals=int(args.lines / LINES_PER_INTERVAL), ranks=args.ranks)
        lines = run.metrics.read_bytes().count(b"\n")
        size_mb = run.metrics.stat().st_size / 1e6
        command = [sys.executable, "-m", "hpctrain.cli.main", "report", str(root), "-o", f"{folder}/out"]
        timed_process(command)  # warm the page cache and the bytecode
        measured = [timed_process(command) for _ in range(args.runs)]
        walls = sorted(w for w, _ in measured)
        cpus = sorted(c for _, c in measured)
        split = parts(root, Path(folder) / "parts")
    print(
        f"metrics.jsonl: {lines:,} lines, {size_mb:.1f} MB, {args.ranks} ranks; load {os.getloadavg()[0]:.2f}"
    )
    print(f"{'what':<34} {'median s':>9} {'min s':>7}")
    print(f"{'hpctrain report (wall, process)':<34} {statistics.median(walls):>9.2f} {walls[0]:>7.2f}")
    print(f"{'hpctrain report (CPU, process)':<34} {statistics.median(cpus):>9.2f} {cpus[0]:>7.2f}")
    for name, seconds in split.items():
        print(f"{'  ' + name:<34} {seconds:>9.2f}")


if __name__ == "__main__":
    main()
