"""Peak memory on one GPU: the GPT at growing sizes, full activation checkpointing, FSDP2 CPU offload.

Each configuration runs in its own process: FSDP2 through the runtime's ``apply_fsdp`` (``fully_shard``
per block and root, bf16 params, fp32 gradient reduction) on a world of one, with
``train.activation_checkpointing``'s block wrapper from ``hpctrain.runtime.precision`` and, when
asked, ``parallel.cpu_offload`` (``CPUOffloadPolicy``: parameters, gradients and AdamW state in
host memory; the optimizer step on the CPU). Two optimizer steps of batch 8 x
2048 tokens, eager; reports peak GPU memory (allocated and reserved), the process's peak host RSS
and the second step's time.

    python benchmarks/bench_gpu_memory.py            # the table printed last, JSON to $OUT/memory.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
BATCH = 8
SIZES = {  # name: (n_layers, d_model, n_heads)
    "0.94B": (16, 2048, 16),
    "2.7B": (32, 2560, 20),
    "6.7B": (32, 4096, 32),
    "8.3B": (40, 4096, 32),
}
CASES = [
    ("0.94B", "none", False),
    ("0.94B", "full", False),
    ("0.94B", "full", True),
    ("6.7B", "full", False),
    ("6.7B", "full", True),
    ("8.3B", "full", False),
]


def probe(size: str, checkpointing: str, offload: bool) -> dict[str, Any]:
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    from hpctrain.examples import gpt
    from hpctrain.runtime.parallel.fsdp import apply_fsdp
    from hpctrain.runtime.precision import checkpoint_block

    n_layers, d_model, n_heads = SIZES[size]
    cfg = gpt.config_from_options(
        {"size": "1b", "n_layers": n_layers, "d_model": d_model, "n_heads": n_heads, "samples": 16}
    )
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1)
    mesh = init_device_mesh("cuda", (1,))
    with torch.device("meta"):
        model = gpt.GPT(cfg)
    if checkpointing != "none":
        for block in model.blocks.values():
            checkpoint_block(block, checkpointing)
    apply_fsdp(model, gpt.shard_units(model), mesh, True, torch.bfloat16, cpu_offload=offload)
    model.to_empty(device="cpu" if offload else "cuda")
    with torch.no_grad():
        model._init_weights()
    # as the runtime builds it: fused on the GPU, the default (foreach) on CPU-offloaded parameters
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=None if offload else True)
    data = gpt.markov_corpus(cfg, BATCH, seed=0)
    inputs = torch.stack([data[i][0] for i in range(BATCH)]).cuda()
    targets = torch.stack([data[i][1] for i in range(BATCH)]).cuda()
    times = []
    for _ in range(2):
        start = time.perf_counter()
        loss = gpt.lm_loss(model(inputs), targets)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return {
        "params_b": gpt.param_count(cfg) / 1e9,
        "gpu_peak_alloc_gb": torch.cuda.max_memory_allocated() / 2**30,
        "gpu_peak_reserved_gb": torch.cuda.max_memory_reserved() / 2**30,
        "host_peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
        "step_s": times[-1],
        "loss": float(loss),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--only", nargs="*", help="sizes to run")
    parser.add_argument("--case-timeout", type=float, default=400)
    parser.add_argument("--deadline", type=float, default=1e9, help="seconds for all cases")
    parser.add_argument("--results", type=Path, default=Path(os.environ.get("OUT", "/tmp")))
    args = parser.parse_args()
    if args.case:
        size, checkpointing, offload = args.case
        print(json.dumps(probe(size, checkpointing, offload == "1")))
        return
    rows = []
    began = time.monotonic()
    for size, checkpointing, offload in CASES:
        if args.only and size not in args.only:
            continue
        row: dict[str, Any] = {
            "size": size,
            "activation_checkpointing": checkpointing,
            "cpu_offload": offload,
        }
        left = args.deadline - (time.monotonic() - began)
        if left < 30:
            print(f"{size} {checkpointing} offload={offload}: skipped, out of time", flush=True)
            continue
        case_began = time.monotonic()
        try:
            proc = subprocess.run(
                [sys.executable, __file__, "--case", size, checkpointing, "1" if offload else "0"],
                capture_output=True,
                text=True,
                timeout=min(args.case_timeout, left),
                check=False,
            )
        except subprocess.TimeoutExpired:
            row["error"] = f"timed out after {time.monotonic() - case_began:.0f} s"
            rows.append(row)
            print(json.dumps(row), flush=True)
            continue
        row["wall_s"] = time.monotonic() - case_began
        if proc.returncode == 0:
            row.update(json.loads(proc.stdout.strip().splitlines()[-1]))
        else:
            row["error"] = (
                proc.stderr.strip().splitlines()[-1][-300:] if proc.stderr.strip() else str(proc.returncode)
            )
        rows.append(row)
        print(json.dumps(row), flush=True)
        args.results.mkdir(parents=True, exist_ok=True)
        (args.results / "memory.json").write_text(json.dumps(rows, indent=1))
    header = ("size", "AC", "offload", "GPU alloc GB", "GPU resv GB", "host GB", "step s")
    print("\n" + " ".join(f"{h:>{w}}" for h, w in zip(header, (6, 5, 7, 12, 11, 8, 7), strict=True)))
    for row in rows:
        if "error" in row:
            what = f"{row['size']:>6} {row['activation_checkpointing']:>5} {row['cpu_offload']!s:>7}"
            print(f"{what}  {row['error']}")
            continue
        print(
            f"{row['size']:>6} {row['activation_checkpointing']:>5} {row['cpu_offload']!s:>7} "
            f"{row['gpu_peak_alloc_gb']:12.1f} {row['gpu_peak_reserved_gb']:11.1f} "
            f"{row['host_peak_rss_gb']:8.1f} {row['step_s']:7.2f}"
        )


if __name__ == "__main__":
    main()
