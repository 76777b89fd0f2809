"""What observability costs a training step, side by side: straggler timing and TensorBoard lines.

1. The straggler stamps alone: ``step_started`` + one gradient hook + ``step_synced`` per step
   (what the hot path pays after the first step), in microseconds.
2. A real digits step (forward, backward, AdamW) in a one-process gloo group, with and without
   the gradient hook and stamps, interleaved in rounds so that load on the machine hits both alike.
3. The log-interval all-reduce: one float (before) against 1 + 2 x world floats (now), in a
   one-process gloo group (the size only; a real world adds the network).
4. One TensorBoard line (rank 0, once per log interval).

    python benchmarks/bench_observe.py [--steps 2000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from hpctrain.rundir import TrainLine  # noqa: E402
from hpctrain.runtime.rank_times import RankTimes  # noqa: E402


def per_call_us(work: Callable[[], object], count: int) -> float:
    start = time.perf_counter()
    for _ in range(count):
        work()
    return (time.perf_counter() - start) / count * 1e6


def digits_step(timed: bool, steps: int) -> float:
    """Microseconds per optimizer step of the digits MLP, with or without straggler timing."""
    from hpctrain import spec
    from hpctrain.examples import digits

    task = digits.build(spec.Train(entrypoint="hpctrain.examples.digits:build"))
    model = task.model
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    inputs = torch.randn(64, 64)
    targets = torch.randint(0, 10, (64,))
    times = RankTimes(0, 1, torch.device("cpu"), lambda line: None, "bench") if timed else None
    if times is not None:
        times.hook_gradients(model.parameters())

    def step() -> None:
        if times is not None:
            times.step_started()
        task.loss(model(inputs), targets).backward()
        if times is not None:
            times.step_synced()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for _ in range(50):
        step()
    return per_call_us(step, steps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    dist.init_process_group("gloo", rank=0, world_size=1)
    print(f"load average {os.getloadavg()[0]:.2f}, torch {torch.__version__}, 1 thread")

    times = RankTimes(0, 1, torch.device("cpu"), lambda line: None, "bench")
    weight = torch.nn.Parameter(torch.ones(4))
    times.hook_gradients([weight])
    hook = times._hook(0)

    def stamps() -> None:
        times.step_started()
        hook(weight)
        times.step_synced()

    print(f"straggler stamps per step: {per_call_us(stamps, 200_000):.2f} us")

    plain, timed = [], []
    for _ in range(args.rounds):
        plain.append(digits_step(False, args.steps))
        timed.append(digits_step(True, args.steps))
    base, with_timing = statistics.median(plain), statistics.median(timed)
    print(
        f"digits step (median of {args.rounds} rounds x {args.steps} steps): without {base:.1f} us, "
        f"with straggler timing {with_timing:.1f} us ({with_timing / base - 1:+.2%})"
    )

    for world in (4, 64, 1024):
        one = torch.zeros(1)
        packed = torch.zeros(1 + 2 * world)
        before = per_call_us(lambda t=one: dist.all_reduce(t), 2000)
        after = per_call_us(lambda t=packed: dist.all_reduce(t), 2000)
        print(
            f"interval all-reduce, world {world}: 1 float {before:.1f} us, "
            f"{packed.numel()} floats {after:.1f} us"
        )

    from hpctrain.runtime.tensorboard_log import open_log

    with tempfile.TemporaryDirectory() as folder:
        board = open_log(Path(folder), 0, True, 0)
        if board is None:
            print("tensorboard is not installed: no TensorBoard figure")
        else:
            counter = iter(range(10**9))
            line = TrainLine(step=0, steps=10**6, loss=1.0, lr=1e-3, samples_per_s=1e4, step_time_s=0.01)

            def write() -> None:
                line.step = next(counter)
                board(line)

            print(f"TensorBoard: {per_call_us(write, 5000):.1f} us per train line (once per log interval)")
            board.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
