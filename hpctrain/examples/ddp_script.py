"""A plain torchrun-style DDP training script: its own loop, checkpoint and --resume flag (no hpctrain).

Runs unchanged under `torchrun --nproc-per-node=2 -m hpctrain.examples.ddp_script`, and as an hpctrain
command job (jobs/ddp-script.yaml), which gives it restarts, hang detection, progress and requeue.
It fits y = Wx on random data with a tiny linear model over gloo (CPU) or NCCL (GPU).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--checkpoint_every", type=int, default=50)
    parser.add_argument("--log_every", type=int, default=10)
    parser.add_argument("--step_time", type=float, default=0.0, help="seconds each step also sleeps")
    parser.add_argument("--out_dir", default=os.environ.get("HPCTRAIN_CHECKPOINT_DIR", "out"))
    parser.add_argument("--resume", action="store_true", help="start from out_dir/ckpt.pt")
    return parser.parse_args()


def main() -> None:
    args = parse()
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"])) if cuda else torch.device("cpu")
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 1).to(device)
    ddp = DistributedDataParallel(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=args.lr)
    target = torch.randn(16, 1, generator=torch.Generator().manual_seed(1)).to(device)
    out_dir = Path(args.out_dir)
    checkpoint = out_dir / "ckpt.pt"
    start = 0
    if args.resume:
        state = torch.load(checkpoint, map_location=device)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["step"]
        print(f"rank {rank}: resumed from step {start}", flush=True)
    data = torch.Generator().manual_seed(1000 + rank)
    for step in range(start, args.steps):
        inputs = torch.randn(args.batch_size // world, 16, generator=data).to(device)
        noise = 0.1 * torch.randn(inputs.shape[0], 1, generator=data).to(device)
        loss = torch.nn.functional.mse_loss(ddp(inputs), inputs @ target + noise)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if args.step_time:
            time.sleep(args.step_time)
        done = step + 1
        if rank == 0 and done % args.log_every == 0:
            print(f"step {done} loss {loss.item():.5f}", flush=True)
        if done % args.checkpoint_every == 0 or done == args.steps:
            if rank == 0:
                out_dir.mkdir(parents=True, exist_ok=True)
                state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": done}
                torch.save(state, out_dir / "ckpt.pt.tmp")
                os.replace(out_dir / "ckpt.pt.tmp", checkpoint)
            dist.barrier()
    if rank == 0:
        print(f"done: {args.steps} steps", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
