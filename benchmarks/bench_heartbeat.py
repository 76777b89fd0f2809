"""What the hang watchdog's heartbeats cost a training step: digits steps/s with and without them.

Run:  python benchmarks/bench_heartbeat.py [--steps 1500] [--rounds 3]
The digits job trains in one local process (``python -m hpctrain.runtime``, no Slurm), with
``watchdog.enabled`` true and false alternately (on, off, on, off...), and the table gives the
median step time and steps/s of each round (``result.json``), then one ``heartbeat.mark`` call's
cost (a phase change: one ``time.time()`` and one ``struct.pack_into`` into the mmap) from
timeit. Results are recorded in the report of the watchdog work, not here.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import timeit
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # this checkout's hpctrain, as the runs below use
MARKS_PER_STEP = 7  # data, forward, backward, optimizer, collective (+ the loss/eval ones now and then)


def write_spec(run_dir: Path, steps: int, watchdog: bool) -> None:
    from hpctrain import spec

    job = spec.decode(
        spec.JobSpec,
        {
            "name": "bench-heartbeat",
            "train": {
                "entrypoint": "hpctrain.examples.digits:build",
                "parallel": "ddp",
                "steps": steps,
                "batch_size": 64,
                "log_every": 100,
            },
            "resources": {"nodes": 1, "tasks_per_node": 1, "partition": "cpu"},
            "watchdog": {"enabled": watchdog},
        },
        "bench",
    )
    resolved = spec.resolve(job, spec.load_site(REPO / "site-configs" / "local.yaml"))
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "spec.json").write_bytes(spec.dumps(resolved))


def one_run(folder: Path, steps: int, watchdog: bool) -> float:
    """Median step time (s) of one training run."""
    from hpctrain.rundir import Result, RunDir

    write_spec(folder, steps, watchdog)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SLURM", "RANK", "WORLD_SIZE", "OMPI_", "PMI"))
    }
    env |= {"HPCTRAIN_RUN_DIR": str(folder), "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "hpctrain.runtime"], env=env, capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"the digits run failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    result = RunDir(folder).read_result()
    assert isinstance(result, Result) and result.step_time_median_s, result
    return result.step_time_median_s


def mark_cost_ns() -> float:
    from hpctrain.rundir.slots import remove_node_files
    from hpctrain.runtime.heartbeat import RankHeartbeat, Where

    with tempfile.TemporaryDirectory() as folder:
        os.environ["HPCTRAIN_HEARTBEAT_DIR"] = folder
        beat = RankHeartbeat(Where(Path(folder), "bench", 0, "n", 0, 0, "0", 5.0))
        calls = 200_000
        best = min(timeit.repeat(lambda: beat.mark("forward"), number=calls, repeat=5))
        remove_node_files(Path(folder), "bench", 0, "n")
        return best / calls * 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    times: dict[bool, list[float]] = {True: [], False: []}
    with tempfile.TemporaryDirectory() as folder:
        for round_number in range(args.rounds):
            for enabled in (True, False):
                run = Path(folder) / f"r{round_number}-{'on' if enabled else 'off'}"
                times[enabled].append(one_run(run, args.steps, enabled))
    print(
        f"digits, 1 process, {args.steps} steps, median step time per round (load {os.getloadavg()[0]:.1f})"
    )
    print("| heartbeats | step time per round (ms) | median step (ms) | steps/s |")
    print("|---|---|---|---|")
    for enabled in (True, False):
        rounds = ", ".join(f"{t * 1e3:.3f}" for t in times[enabled])
        median = statistics.median(times[enabled])
        print(f"| {'on' if enabled else 'off'} | {rounds} | {median * 1e3:.3f} | {1 / median:.0f} |")
    cost = mark_cost_ns()
    per_step_us = cost * MARKS_PER_STEP / 1e3
    off = statistics.median(times[False])
    print(
        f"heartbeat.mark: {cost:.0f} ns a call; {MARKS_PER_STEP} a step = {per_step_us:.1f} us, "
        f"{per_step_us / (off * 1e6) * 100:.2f}% of a {off * 1e3:.2f} ms step"
    )


if __name__ == "__main__":
    main()
