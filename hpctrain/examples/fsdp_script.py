"""A plain FSDP2 training script that checkpoints with torch.distributed.checkpoint and resumes by itself.

No hpctrain in it: it reads torchrun's variables (through init_process_group) and, when set,
HPCTRAIN_CHECKPOINT_DIR (else ./out). At start it loads the newest complete checkpoint it finds, so
it needs no `resume:` section in its job (jobs/fsdp-script.yaml). gloo on CPU, NCCL on GPU.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

COMPLETE = ".metadata"  # torch.distributed.checkpoint writes it last: a folder with it is whole


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--checkpoint_every", type=int, default=50)
    parser.add_argument("--log_every", type=int, default=10)
    parser.add_argument("--step_time", type=float, default=0.0, help="seconds each step also sleeps")
    parser.add_argument("--out_dir", default=os.environ.get("HPCTRAIN_CHECKPOINT_DIR", "out"))
    return parser.parse_args()


def newest_checkpoint(out_dir: Path) -> tuple[int, Path] | None:
    found = [
        (int(path.name.removeprefix("step-")), path)
        for path in out_dir.glob("step-*")
        if path.name.removeprefix("step-").isdigit() and (path / COMPLETE).exists()
    ]
    return max(found, default=None)


def main() -> None:
    args = parse()
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device_type = "cuda" if cuda else "cpu"
    if cuda:
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    mesh = init_device_mesh(device_type, (world,))
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(16, args.width), torch.nn.ReLU(), torch.nn.Linear(args.width, 1)
    ).to(device_type)
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    out_dir = Path(args.out_dir)
    start = 0
    latest = newest_checkpoint(out_dir)
    if latest is not None:
        start, folder = latest
        model_state, optim_state = get_state_dict(model, optimizer)
        state = {"model": model_state, "optim": optim_state}
        dcp.load(state, checkpoint_id=str(folder))
        set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
        if rank == 0:
            print(f"resumed from step {start} ({folder})", flush=True)
    target = torch.randn(16, 1, generator=torch.Generator().manual_seed(1)).to(device_type)
    data = torch.Generator().manual_seed(1000 + rank)
    for step in range(start, args.steps):
        inputs = torch.randn(args.batch_size // world, 16, generator=data).to(device_type)
        noise = 0.1 * torch.randn(inputs.shape[0], 1, generator=data).to(device_type)
        loss = torch.nn.functional.mse_loss(model(inputs), torch.tanh(inputs @ target) + noise)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if args.step_time:
            time.sleep(args.step_time)
        done = step + 1
        if rank == 0 and done % args.log_every == 0:
            print(f"step {done} loss {loss.item():.5f}", flush=True)
        if done % args.checkpoint_every == 0 or done == args.steps:
            model_state, optim_state = get_state_dict(model, optimizer)
            dcp.save(
                {"model": model_state, "optim": optim_state}, checkpoint_id=str(out_dir / f"step-{done}")
            )
    if rank == 0:
        print(f"done: {args.steps} steps", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
