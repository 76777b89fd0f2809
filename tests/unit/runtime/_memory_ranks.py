"""Helper of test_memory_checkpoint: one rank of a 4-rank gloo world on two pretend nodes.

``python _memory_ranks.py RUN_DIR STORE RANK save|restore [WIDTH]``: `save` trains one step and keeps
it in memory as step 7 (after a disk checkpoint at step 3), with WIDTH also as step 8; `restore` loads
into a fresh model and writes what it got, and the warnings logged, to RUN_DIR/restored-RANK.pt (`save`
writes them to RUN_DIR/saved-RANK.pt). WIDTH: the model's (a square linear layer; default 4 by 2).
"""

import logging
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from hpctrain.runtime.checkpoint import Checkpointer
from hpctrain.runtime.memory_checkpoint import MemoryCheckpoints

WORLD = 4
HOSTS = ["n1", "n1", "n2", "n2"]

if __name__ == "__main__":
    run_dir, store, rank, what = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
    width = int(sys.argv[5]) if len(sys.argv) > 5 else 0
    warnings: list[str] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: warnings.append(record.getMessage())  # type: ignore[method-assign]
    logging.getLogger("hpctrain").addHandler(handler)
    dist.init_process_group("gloo", store=dist.FileStore(store, WORLD), rank=rank, world_size=WORLD)
    events: list[tuple[str, dict]] = []
    memory = MemoryCheckpoints(
        run_dir, rank, HOSTS[rank], "ddp", True, 1, lambda e, **f: events.append((e, f))
    )
    checkpoints = Checkpointer(run_dir, rank, 2, lambda e, **f: events.append((e, f)), memory=memory)
    torch.manual_seed(0 if what == "save" else 1)
    model = nn.Linear(width, width) if width else nn.Linear(4, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    restored = checkpoints.load(model, optimizer)
    if what == "save":
        model(torch.randn(3, model.in_features)).sum().backward()
        optimizer.step()
        checkpoints.save(3, model, optimizer, {"position": {"epoch": 0, "offset": 3}})
        with torch.no_grad():
            model.weight.add_(1.0)  # the memory copy holds other weights than the disk checkpoint
        checkpoints.save_memory(7, model, optimizer, {"position": {"epoch": 0, "offset": 7}})
        if width:  # a second save into a full memory folder: no second warning
            checkpoints.save_memory(8, model, optimizer, {"position": {"epoch": 0, "offset": 8}})
        memory.wait()
        dist.barrier()
        torch.save({"warnings": warnings, "events": events}, run_dir / f"saved-{rank}.pt")
    else:
        assert restored is not None
        torch.save(
            {"step": restored.step, "weight": model.weight.detach(), "events": events, "warnings": warnings},
            run_dir / f"restored-{rank}.pt",
        )
    dist.barrier()
    dist.destroy_process_group()
