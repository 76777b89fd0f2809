"""Goodput under injected faults: a digits job on the local cluster with a real fault every 60-90 s.

Faults, drawn at random: a rank killed (SIGKILL), a rank stopped (SIGSTOP: a hang), a node that
loses power (its slurmd, stepds and tasks SIGKILLed) and a preemption (SIGUSR1 to the job, which
checkpoints and requeues). Nobody intervenes: the job must recover from each by itself.

With --ps, the digits parameter-server hetjob (async) instead: a killed worker, then a killed
server, then either at random.

Goodput = the training part of the run's goodput split (hpctrain.rundir.goodput, the very function
behind `hpctrain report` and `status --json`) over the wall time from submission to the end: the
seconds of steps that survive into the final model. The split's other parts say where the rest went;
each fault is charged the rollback and detection of the attempt it ended and the scheduling and
start-up of the attempt after. The step-time goodput of earlier measurements (surviving intervals'
step_time_s x steps / the bench's own wall time) is printed beside it.

    python benchmarks/bench_soak.py [--minutes 10] [--gap 60 90] [--seed 0] [--ps] [--json OUT]

Prints: faults by kind with detection and recovery times; the split (seconds and share) of the whole
run, and by fault kind; goodput; checkpoint checks.
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

import msgspec

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from hpctrain.rundir import AttemptLine, EventLine, RunDir, TrainLine, decode_line, goodput  # noqa: E402
from hpctrain.rundir.attempts import CLOCK_SLACK_S, read_lines  # noqa: E402
from tests.integration import faults  # noqa: E402
from tests.integration.cluster import status, submit  # noqa: E402

KINDS = ("kill_rank", "stop_rank", "node_power", "preempt")
PS_KINDS = ("kill_worker", "kill_server")
NO_FAULT = "(no fault)"
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
    ps: bool = False


def metric_lines(run: RunDir) -> list[object]:
    path = run.metrics
    if not path.exists():
        return []
    return [decode_line(raw, str(path)) for raw in path.read_bytes().splitlines() if raw.strip()]


def current_attempt(run: RunDir) -> AttemptLine | None:
    lines = read_lines(run)
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
    lines = [x for x in metric_lines(run)[-50:] if isinstance(x, TrainLine)]
    return bool(lines) and (lines[-1].time or 0) > since


def ps_ranks(run: RunDir) -> tuple[int, int]:
    """Servers and workers of a parameter-server run (servers take the first ranks)."""
    job = json.loads(run.spec.read_bytes())["job"]
    ps = job["train"]["parallel"]["ps"]
    return ps["servers"], job["resources"]["nodes"] * job["resources"]["tasks_per_node"]


def inject_ps(run: RunDir, kind: str, rng: random.Random) -> Fault:
    """SIGKILL to a worker or a server of the parameter-server hetjob."""
    servers, workers = ps_ranks(run)
    rank = rng.randrange(servers) if kind == "kill_server" else servers + rng.randrange(workers)
    faults.signal_rank(Path(run.root), rank, signal.SIGKILL)
    return Fault(kind, time.time(), f"rank {rank}")


def inject(soak: Soak, run: RunDir, kind: str, rng: random.Random) -> Fault | None:
    if kind in PS_KINDS:
        return inject_ps(run, kind, rng)
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


def fault_ends(run: RunDir) -> list[float]:
    """The times that can end each fault: attempt ends; without attempts.jsonl (a parameter-server
    hetjob), the dropped workers' events and the run's last line once it has ended."""
    lines = read_lines(run)
    if lines:
        return [a.time for a in lines if a.event == "end"]
    events = [x for x in metric_lines(run) if isinstance(x, EventLine) and x.time]
    return [x.time for x in events if x.event in ("worker_dropped", "failed", "done") and x.time]


def settle(soak: Soak, run: RunDir) -> None:
    """Fill detection (the attempt ended) and recovery (training again) times of past faults."""
    ended = fault_ends(run)
    events = [x for x in metric_lines(run) if isinstance(x, EventLine | TrainLine)]
    for fault in soak.faults:
        ends = [when for when in ended if when >= fault.at]
        if fault.detected_s is None and ends:
            fault.detected_s = round(ends[0] - fault.at, 1)
        if fault.recovered_s is None and ends:
            again = [x.time for x in events if isinstance(x, TrainLine) and (x.time or 0) > ends[0]]
            if again:
                fault.recovered_s = round(again[0] - fault.at, 1)


def goodput_seconds(run: RunDir) -> tuple[float, int]:
    """Seconds of the step intervals that survive into the final model, and the final step."""
    surviving: dict[int, float] = {}
    last_step = final = 0
    for line in metric_lines(run):
        if isinstance(line, EventLine) and line.event in ("start", "resumed"):
            last_step = line.step or 0
            surviving = {step: s for step, s in surviving.items() if step <= last_step}
        elif isinstance(line, TrainLine) and line.worker is None:
            final = line.step  # a parameter server's lines have no step time: its step still counts
            if line.step_time_s is not None:
                surviving[line.step] = line.step_time_s * (line.step - last_step)
                last_step = line.step
    return sum(surviving.values()), final


def charged(split: goodput.GoodputSplit, soak: Soak, run: RunDir) -> dict[str, goodput.Parts]:
    """The split by fault kind: an attempt's rollback and detection go to the fault that ended it
    (the last one injected before its end line), its scheduling and start-up to the fault that ended
    the attempt before; the rest to no fault. A run without attempts (a parameter-server hetjob)
    is one row: no fault."""
    table = {kind: goodput.Parts() for kind in (*(PS_KINDS if soak.ps else KINDS), NO_FAULT)}
    ends = {line.attempt: line.time for line in read_lines(run) if line.event == "end"}
    pending = sorted(soak.faults, key=lambda fault: fault.at)
    started_by = NO_FAULT
    for share in split.attempts:
        ended = ends.get(share.attempt)
        mine = [f for f in pending if ended is not None and f.at <= ended]
        pending = pending[len(mine) :]
        ended_by = mine[-1].kind if mine and share.outcome != "completed" else NO_FAULT
        owner = {"rollback": ended_by, "detection": ended_by, "scheduling": started_by, "startup": started_by}
        for part in goodput.PARTS:
            row = table[owner.get(part, NO_FAULT)]
            setattr(row, f"{part}_s", round(row.seconds(part) + share.seconds(part), 3))
        started_by = ended_by
    if not split.attempts:
        table[NO_FAULT] = goodput.Parts(**{f"{part}_s": split.seconds(part) for part in goodput.PARTS})
    return table


def print_split(split: goodput.GoodputSplit | None, by_kind: dict[str, goodput.Parts]) -> None:
    if split is None:
        print("no goodput split: the run recorded nothing")
        return
    print("where the time went (hpctrain.rundir.goodput, as `hpctrain report` prints it):")
    for line in goodput.table(split):
        print(f"  {line}")
    print("by fault kind (seconds):")
    header = " ".join(f"{part:>11}" for part in goodput.PARTS)
    print(f"  {'fault':12} {header}")
    for kind, parts in by_kind.items():
        print(f"  {kind:12} " + " ".join(f"{parts.seconds(part):11.1f}" for part in goodput.PARTS))


def startup_parts(run: RunDir) -> dict[str, dict[str, float]]:
    """Median seconds of each start-up part (hpctrain.runtime.startup_times), cold and warm attempts
    apart; `launch` is from the attempt's start (the supervisor's line) to the part's count start."""
    starts = sorted(line.time for line in read_lines(run) if line.event == "start")
    found: dict[str, dict[str, list[float]]] = {}
    for line in metric_lines(run):
        if not (isinstance(line, EventLine) and line.event == "startup" and line.detail):
            continue
        detail = dict(line.detail)
        began, warm = float(detail.pop("began")), bool(detail.pop("warm"))
        before = [t for t in starts if t <= began + CLOCK_SLACK_S]  # nodes' clocks differ
        parts = {"launch": max(0.0, began - before[-1])} if before else {}
        for part, seconds in {**parts, **detail}.items():
            found.setdefault("warm" if warm else "cold", {}).setdefault(part, []).append(float(seconds))
    return {kind: {part: statistics.median(v) for part, v in parts.items()} for kind, parts in found.items()}


def print_startup(parts: dict[str, dict[str, float]]) -> None:
    for kind, seconds in sorted(parts.items()):
        total = sum(seconds.values())
        listed = ", ".join(f"{part} {value:.2f}" for part, value in seconds.items())
        print(f"start-up of a {kind} attempt, median s (total {total:.1f}): {listed}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="Training time without faults.")
    parser.add_argument("--gap", type=float, nargs=2, default=(60.0, 90.0), help="Seconds between faults.")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--step-ms", type=float, default=10.0, help="Expected step time, to size the job.")
    parser.add_argument(
        "--hang-timeout", type=float, default=5.0, help="watchdog.hang_timeout: a step this long is a hang."
    )
    parser.add_argument(
        "--stopped-timeout",
        type=float,
        default=1.5,
        help="watchdog.stopped_timeout: a trained rank without a tick this long is stopped.",
    )
    parser.add_argument("--heartbeat-interval", type=float, default=0.5, help="watchdog.heartbeat_interval.")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument(
        "--no-warm-standby", dest="warm_standby", action="store_false", help="Restarts start cold."
    )
    parser.add_argument(
        "--launcher",
        choices=("srun", "fork"),
        default="fork",
        help="The DDP job's launcher: fork (a task per node imports torch once and forks its ranks) or srun.",
    )
    parser.add_argument(
        "--ps",
        action="store_true",
        help="Soak the digits parameter-server hetjob (async): a killed worker, then a killed server.",
    )
    parser.add_argument(
        "--ps-steps-per-s", type=float, default=100.0, help="Expected versions a second, to size it."
    )
    args = parser.parse_args()
    rng = random.Random(args.seed)
    faults.recover_nodes()
    if args.ps:
        steps = int(args.minutes * 60 * args.ps_steps_per_s)
        entry = submit(
            REPO / "jobs" / "digits-ps-async.yaml",
            f"train.steps={steps}",
            "train.log_every=25",
            "train.checkpoint_every=250",
            "resources.time=01:00:00",
        )
    else:
        steps = int(args.minutes * 60_000 / args.step_ms)
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
            f"launcher={args.launcher}",
            f"watchdog.hang_timeout={args.hang_timeout:g}",
            f"watchdog.stopped_timeout={args.stopped_timeout:g}",
            f"watchdog.heartbeat_interval={args.heartbeat_interval:g}",
        )
    soak = Soak(entry["job_id"], entry["run_dir"], time.time(), ps=args.ps)
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
            if next_fault is not None and time.time() >= next_fault and state == "RUNNING":
                kind = PS_KINDS[len(soak.faults)] if args.ps and len(soak.faults) < 2 else None
                kind = kind or rng.choice(PS_KINDS if args.ps else KINDS)
                fault = inject(soak, run, kind, rng)
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
    for kind in PS_KINDS if args.ps else KINDS:
        mine = [f for f in soak.faults if f.kind == kind]
        detect = [f.detected_s for f in mine if f.detected_s is not None]
        recover = [f.recovered_s for f in mine if f.recovered_s is not None]
        print(
            f"{kind:12} {len(mine):5d} {statistics.median(detect) if detect else float('nan'):18.1f} "
            f"{statistics.median(recover) if recover else float('nan'):19.1f} {len(mine) - len(recover):12d}"
        )
    split = goodput.split(run)
    by_kind = charged(split, soak, run) if split is not None else {}
    print_split(split, by_kind)
    if split is not None:
        kept, whole = split.training_s, split.wall_s
        print(f"goodput: {kept:.0f} s of kept steps / {whole:.0f} s wall = {split.goodput:.3f}")
    print(f"step-time goodput (as measured before): {useful:.0f} s / {wall:.0f} s = {useful / wall:.3f}")
    corrupt = [x for x in metric_lines(run) if isinstance(x, EventLine) and x.event == "checkpoint_corrupt"]
    warm = sum(log.read_text().count("runs in the warm standby step") for log in run.batch_logs())
    restarts = sum(1 for line in read_lines(run) if line.event == "end" and line.outcome != "completed")
    print(f"checkpoints found corrupt on resume: {len(corrupt)}; restarts: {restarts} ({warm} warm)")
    startup = startup_parts(run)
    print_startup(startup)
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "state": state,
                    "ps": args.ps,
                    "wall_s": wall,
                    "useful_s": useful,
                    "faults": [asdict(f) for f in soak.faults],
                    "split": msgspec.to_builtins(split),
                    "by_fault": {kind: msgspec.to_builtins(parts) for kind, parts in by_kind.items()},
                    "startup": startup,
                }
            )
        )


if __name__ == "__main__":
    main()
