"""Helper of test_runtime_checkpoint: saves step 1, starts step 2 in the background, waits for its kill."""

import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from hpctrain.runtime.checkpoint import Checkpointer

if __name__ == "__main__":
    run_dir = Path(sys.argv[1])
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    model = nn.Linear(1024, 1024)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.randn(2, 1024)).sum().backward()
    optimizer.step()
    checkpoints = Checkpointer(run_dir, 0, 2, lambda *a, **k: None, writer=sys.argv[2])
    checkpoints.save(1, model, optimizer, {"position": {"epoch": 0, "offset": 1}})
    # Step 2 never gets past its checksums, so the kill lands while the save is in flight.
    checkpoints._checksum_own_files = lambda tmp: time.sleep(600)  # type: ignore[method-assign]
    checkpoints.save(2, model, optimizer, {"position": {"epoch": 0, "offset": 2}}, blocking=False)
    print("staged", flush=True)
    time.sleep(600)
