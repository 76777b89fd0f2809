"""Made-up run directories with every kind of line a report draws (tests and benchmarks/bench_report.py).

The lines are built from the contract's structs and written with its writer, so they are exactly
what the runtime would write; the numbers follow a plausible run: a falling loss, one rank slower
than the others from the middle on, a rank failure and a restart that resumes from the last checkpoint.
"""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import msgspec

from hpctrain.rundir import (
    AttemptLine,
    EvalLine,
    EventLine,
    MemoryLine,
    RankTimesLine,
    RunDir,
    TrainLine,
)

T0 = 1_796_000_000.0


def rank_times(
    step: int, when: float, ranks: int, slow_rank: int | None, rng: random.Random, streak: int
) -> RankTimesLine:
    """One interval's per-rank times: `slow_rank` computes 45% longer, the others wait for it."""
    compute = [0.2 * rng.uniform(0.93, 1.05) for _ in range(ranks)]
    if slow_rank is not None:
        compute[slow_rank] = 0.2 * 1.45
    wait = [max(compute) - c + 0.01 for c in compute]
    nodes = [f"node{1 + r * 2 // ranks}" for r in range(ranks)]
    flagged = [slow_rank] if slow_rank is not None and streak >= 3 else []
    return RankTimesLine(
        step=step,
        time=when,
        compute_s=[round(c, 4) for c in compute],
        wait_s=[round(w, 4) for w in wait],
        nodes=nodes,
        stragglers=flagged,
    )


def add_rank_times(run: RunDir, slow_rank: int | None, ranks: int = 4, from_step: int = 0) -> int:
    """A `ranks` line after each train line of a run's metrics (a real run's, in the tests): the
    lines the runtime's straggler detection writes, with `slow_rank` slow from `from_step` on."""
    rng = random.Random(0)
    decoder = msgspec.json.Decoder(TrainLine | EventLine | EvalLine | MemoryLine | RankTimesLine)
    lines = [decoder.decode(raw) for raw in run.metrics.read_bytes().splitlines() if raw.strip()]
    out: list[bytes] = []
    streak = 0
    added = 0
    for line in lines:
        out.append(msgspec.json.encode(line))
        if isinstance(line, TrainLine):
            slow = slow_rank if line.step >= from_step else None
            streak = streak + 1 if slow is not None else 0
            out.append(msgspec.json.encode(rank_times(line.step, line.time or T0, ranks, slow, rng, streak)))
            added += 1
    run.metrics.write_bytes(b"\n".join(out) + b"\n")
    return added


def write_run(
    root: Path, intervals: int = 200, ranks: int = 4, slow_rank: int | None = 3, workers: int = 0
) -> RunDir:
    """A finished run of `intervals` log intervals (10 steps each) with every kind of line."""
    root.mkdir(parents=True, exist_ok=True)
    run = RunDir(root)
    rng = random.Random(1)
    steps = intervals * 10
    failed_at = (intervals * 6 // 10) * 10 + 30  # a rank fails between checkpoints
    resume_from = (failed_at // 200) * 200
    lines: list[object] = [EventLine(event="start", step=0, layout="ddp", world_size=ranks, time=T0)]
    lines += [
        MemoryLine(
            rank=r,
            rank_bytes={"params": 4 << 20, "grads": 4 << 20, "optimizer": 8 << 20},
            peak_mem_mb=300.0 + r,
            time=T0,
        )
        for r in range(ranks)
    ]
    when, step, streak, resumed = T0, 0, 0, False
    attempts = [AttemptLine(attempt=0, event="start", time=T0, job_id="1", nodes=["node1", "node2"])]
    while step < steps:
        step += 10
        when += 2.0
        loss = 2.5 * 0.995**step + 0.05 * rng.random()
        lines.append(
            TrainLine(
                step=step,
                steps=steps,
                loss=loss,
                samples_per_s=640 / (1 + rng.random() / 5),
                step_time_s=0.2,
                data_share=0.05 + 0.02 * rng.random(),
                time=when,
            )
        )
        slow = slow_rank if step > steps // 2 else None
        streak = streak + 1 if slow is not None else 0
        lines.append(rank_times(step, when, ranks, slow, rng, streak))
        if step % 100 == 0:
            lines.append(
                EvalLine(step=step, loss=loss * 1.1, accuracy=min(0.99, 0.5 + step / steps), time=when)
            )
        if step % 200 == 0:
            lines.append(EventLine(event="checkpoint", step=step, time=when))
        if step == failed_at and not resumed:
            resumed = True
            lines.append(EventLine(event="failed", step=step, error="RuntimeError: rank 2 lost", time=when))
            attempts.append(AttemptLine(attempt=0, event="end", time=when, outcome="rank_failure", step=step))
            when += 30.0  # the restart: a new step, a new rendezvous
            attempts.append(AttemptLine(attempt=1, event="start", time=when, job_id="1"))
            step = resume_from
            lines.append(EventLine(event="resumed", step=step, restart_count=1, time=when))
    lines.append(EventLine(event="done", step=step, time=when))
    attempts.append(AttemptLine(attempt=1, event="end", time=when, outcome="completed", step=step))
    run.metrics.write_bytes(b"".join(msgspec.json.encode(x) + b"\n" for x in lines))
    run.attempts.write_bytes(b"".join(msgspec.json.encode(x) + b"\n" for x in attempts))
    for worker in range(workers):
        write_worker(run, worker, intervals, rng)
    return run


def write_worker(run: RunDir, worker: int, intervals: int, rng: random.Random) -> None:
    run.worker_metrics_dir.mkdir(exist_ok=True)
    lines = [
        TrainLine(
            step=i * 10,
            worker=worker,
            version=i * 20,
            loss=1.0 / (1 + i),
            time=T0 + i * 2.0,
            samples_per_s=400.0 * (1 + worker) * rng.uniform(0.9, 1.1),
            compute_s=0.01 * (1 + worker),
            wait_s=0.02,
        )
        for i in range(1, intervals + 1)
    ]
    run.worker_metrics(worker).write_bytes(b"".join(msgspec.json.encode(x) + b"\n" for x in lines))


def json_number(value: float) -> str:
    """`value` as JSON text the way a hostile writer could spell it: infinity as `1e999` (which
    decodes to infinity), NaN as `null` (JSON has no NaN)."""
    if value != value:
        return "null"
    if value in (float("inf"), float("-inf")):
        return "1e999" if value > 0 else "-1e999"
    return repr(value)


def write_extreme_run(root: Path, values: list[float]) -> RunDir:
    """A run whose every float field of every kind of line holds the next of `values` in turn (each
    reused as often as needed): a report and a status must draw and print whatever a line holds."""
    root.mkdir(parents=True, exist_ok=True)
    run = RunDir(root)
    pick = itertools.cycle([json_number(value) for value in values])
    lines = [f'{{"kind":"event","event":"start","step":0,"time":{next(pick)}}}']
    for step in range(10, 10 * (len(values) + 2), 10):
        train = ("loss", "lr", "samples_per_s", "step_time_s", "tokens_per_s", "mfu", "data_share", "time")
        fields = ",".join(f'"{name}":{next(pick)}' for name in train)
        lines.append(f'{{"kind":"train","step":{step},"steps":1000,{fields}}}')
        lines.append(
            f'{{"kind":"eval","step":{step},"loss":{next(pick)},"accuracy":{next(pick)},"time":{next(pick)}}}'
        )
        lines.append(
            f'{{"kind":"ranks","step":{step},"time":{next(pick)},"compute_s":[{next(pick)},{next(pick)}],'
            f'"wait_s":[{next(pick)},{next(pick)}],"nodes":["n1","n2"]}}'
        )
        lines.append(f'{{"kind":"event","event":"checkpoint","step":{step},"time":{next(pick)}}}')
    lines.append(f'{{"kind":"memory","rank":0,"peak_mem_mb":{next(pick)},"time":{next(pick)}}}')
    run.metrics.write_text("\n".join(lines) + "\n")
    return run
