"""Goodput under injected faults: a digits job on the local cluster with a real fault every 60-90 s.

Faults, drawn at random: a rank killed (SIGKILL), a rank stopped (SIGSTOP: a hang), a node that
loses power (its slurmd, stepds and tasks SIGKILLed) and a preemption (SIGUSR1 to the job, which
checkpoints and requeues). Nobody intervenes: the job must recover from each by itself.

Goodput = seconds of training steps that survive into the final model / wall time from submission
to completion. A step's seconds come from the metrics lines (interval time / steps); an interval
that a later restart rolled back (the run resumed from an earlier checkpoint) does not count.

    python benchmarks/bench_soak.py [--minutes 10] [--gap 60 90] [--seed 0] [--json OUT]

Prints one table: faults by kind with detection and recovery times, goodput, checkpoint checks.
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from hpctrain.rundir import AttemptLine, EventLine, RunDir, TrainLine, decode_line  # noqa: E402
from tests.integration import faults  # noqa: E402
from tests.integration.cluster import status, submit  # noqa: E402

KINDS = ("kill_rank", "stop_rank", "node_power", "preempt")
ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "SUBMIT_FAILED"}


@dataclass
class Fault:
    kind: str
    at: float
    target: str
    detected_s: float | None = None
    recovered_s: float | None = None
    repaired: bool = False


@dataclass
class Soak:
    job_id: str
    run_dir: str
    submitted: float
    faults: list[Fault] = field(default_factory=list)
    stopped_pids: list[int] = field(default_factory=list)


def read_lines(path: Path) -> list[object]:
    if not path.exists():
        return []
    return [decode_line(raw, str(path)) for raw in path.read_bytes().splitlines() if raw.strip()]


def attempts(run: RunDir) -> list[AttemptLine]:
    found = []
    for raw in run.attempts.read_bytes().splitlines() if run.attempts.exists() else []:
        try:
            found.append(json.loads(raw))
        except ValueError:
            continue
    return [AttemptLine(**line) for line in found if isinstance(line, dict)]


def current_attempt(run: RunDir) -> AttemptLine | None:
    lines = attempts(run)
    if not lines or lines[-1].event != "start":
        return None
    return lines[-1]


def batch_host(job_id: str) -> str:
    out = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True).stdout
    for word in out.split():
        if word.startswith("BatchHost="):
            return word.split("=", 1)[1]
    return ""


def training_now(run: RunDir, since: float) -> bool:
    """A train line newer than `since`: the job is past start-up and stepping."""
    lines = [x for x in read_lines(run.metrics)[-50:] if isinstance(x, TrainLine)]
    return bool(lines) and (lines[-1].time or 0) > since


def inject(soak: Soak, run: RunDir, kind: str, rng: random.Random) -> Fault | None:
    attempt = current_attempt(run)
    if attempt is None or not attempt.world_size:
        return None
    now = time.time()
    if kind in ("kill_rank", "stop_rank"):
        rank = rng.randrange(attempt.world_size)
        sig = signal.SIGKILL if kind == "kill_rank" else signal.SIGSTOP
        pid = faults.signal_rank(Path(run.root), rank, sig)
        if sig == signal.SIGSTOP:
            soak.stopped_pids.append(pid)
        return Fault(kind, now, f"rank {rank}")
    if kind == "node_power":
        others = [n for n in attempt.nodes if n != batch_host(soak.job_id)]
        if not others:
            return None  # one node left: losing it is Slurm's requeue path, measured separately
        node = rng.choice(others)
        faults.kill_node(node)
        return Fault(kind, now, node)
    subprocess.run(["scancel", "--signal=USR1", soak.job_id], check=False)
    return Fault(kind, now, "job")


def settle(soak: Soak, run: RunDir) -> None:
    """Fill detection (the attempt ended) and recovery (training again) times of past faults."""
    lines = attempts(run)
    events = [x for x in read_lines(run.metrics) if isinstance(x, EventLine | TrainLine)]
    for fault in soak.faults:
        ends = [a.time for a in lines if a.event == "end" and a.time >= fault.at]
        if fault.detected_s is None and ends:
            fault.detected_s = round(ends[0] - fault.at, 1)
        if fault.recovered_s is None and ends:
            again = [x.time for x in events if isinstance(x, TrainLine) and (x.time or 0) > ends[0]]
            if again:
                fault.recovered_s = round(again[0] - fault.at, 1)


def goodput_seconds(run: RunDir) -> tuple[float, int]:
    """Seconds of the step intervals that survive into the final model, and the final step."""
    surviving: dict[int, float] = {}
    last_step = 0
    for line in read_lines(run.metrics):
        if isinstance(line, EventLine) and line.event in ("start", "resumed"):
            last_step = line.step or 0
            surviving = {step: s for step, s in surviving.items() if step <= last_step}
        elif isinstance(line, TrainLine) and line.step_time_s is not None and line.worker is None:
            surviving[line.step] = line.step_time_s * (line.step - last_step)
            last_step = line.step
    return sum(surviving.values()), max(surviving, default=0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="Training time without faults.")
    parser.add_argument("--gap", type=float, nargs=2, default=(60.0, 90.0), help="Seconds between faults.")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--step-ms", type=float, default=10.0, help="Expected step time, to size the job.")
    parser.add_argument(
        "--hang-timeout", type=float, default=5.0, help="watchdog.hang_timeout: a step this long is a hang."
    )
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument(
        "--no-warm-standby", dest="warm_standby", action="store_false", help="Restarts start cold."
    )
    args = parser.parse_args()
    rng = random.Random(args.seed)
    steps = int(args.minutes * 60_000 / args.step_ms)
    faults.recover_nodes()
    entry = submit(
        REPO / "jobs" / "digits-ddp.yaml",
        f"train.steps={steps}",
        "train.log_every=25",
        "train.eval_every=0",
        "train.checkpoint_every=250",
        "resources.time=01:00:00",
        "restart.max=100",
        "restart.exclude_failed_nodes=false",
        f"restart.warm_standby={'true' if args.warm_standby else 'false'}",
        f"watchdog.hang_timeout={args.hang_timeout:g}",
        "watchdog.heartbeat_interval=2",
    )
    soak = Soak(entry["job_id"], entry["run_dir"], time.time())
    run = RunDir(soak.run_dir)
    state = ""
    next_fault = None
    try:
        while state not in ENDED:
            time.sleep(2)
            state = status(soak.job_id)["state"]
            settle(soak, run)
            if next_fault is None and training_now(run, time.time() - 10):
                next_fault = time.time() + rng.uniform(*args.gap)
            if next_fault is not None and time.time() >= next_fault:
                fault = inject(soak, run, rng.choice(KINDS), rng)
                if fault is not None:
                    soak.faults.append(fault)
                    print(f"{time.strftime('%H:%M:%S')} injected {fault.kind} on {fault.target}", flush=True)
                next_fault = time.time() + rng.uniform(*args.gap)
            for lost in [f for f in soak.faults if f.kind == "node_power" and not f.repaired]:
                if lost.detected_s is not None:  # the node comes back, as a repaired node would
                    faults.recover_nodes()
                    lost.repaired = True
    finally:
        for pid in soak.stopped_pids:
            try:
                faults.os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        faults.recover_nodes()
    settle(soak, run)
    wall = time.time() - soak.submitted
    useful, final_step = goodput_seconds(run)
    print()
    print(f"job {soak.job_id} ended {state} at step {final_step} of {steps}; wall {wall:.0f} s")
    print(
        f"{'fault':12} {'count':>5} {'detect s (median)':>18} {'recover s (median)':>19} {'unrecovered':>12}"
    )
    for kind in KINDS:
        mine = [f for f in soak.faults if f.kind == kind]
        detect = [f.detected_s for f in mine if f.detected_s is not None]
        recover = [f.recovered_s for f in mine if f.recovered_s is not None]
        print(
            f"{kind:12} {len(mine):5d} {statistics.median(detect) if detect else float('nan'):18.1f} "
            f"{statistics.median(recover) if recover else float('nan'):19.1f} {len(mine) - len(recover):12d}"
        )
    print(f"goodput: {useful:.0f} s of surviving steps / {wall:.0f} s wall = {useful / wall:.3f}")
    corrupt = [
        x for x in read_lines(run.metrics) if isinstance(x, EventLine) and x.event == "checkpoint_corrupt"
    ]
    warm = sum(log.read_text().count("runs in the warm standby step") for log in run.batch_logs())
    restarts = len(attempts(run)) // 2
    print(f"checkpoints found corrupt on resume: {len(corrupt)}; restarts: {restarts} ({warm} warm)")
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "state": state,
                    "wall_s": wall,
                    "useful_s": useful,
                    "faults": [asdict(f) for f in soak.faults],
                }
            )
        )


if __name__ == "__main__":
    main()
