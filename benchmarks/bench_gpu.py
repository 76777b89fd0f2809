"""One-GPU benchmark: hpctrain's runtime against a hand-written PyTorch loop of the same GPT.

Each case runs in its own process (fresh CUDA context and compile cache). The hand-written loop is
the plain nanoGPT-style reference: same model class, bf16 autocast, torch.compile, fused AdamW,
batches already on the GPU. hpctrain runs `python -m hpctrain.runtime` on a run directory, exactly as
a task of the generated sbatch script would (world of one, NCCL). Throughput is the median over the
logged intervals after warm-up; MFU is against the H200's dense bf16 peak (989 TFLOP/s).

    python benchmarks/bench_gpu.py --suite runtime   # issue 3: hand vs hpctrain, compile, checkpoint time
    python benchmarks/bench_gpu.py --suite layouts   # issue 4: plain vs fsdp vs pp on one GPU (eager)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
PEAK_FLOPS = 989e12
# The reference configuration: a 0.9B GPT, d=2048, 16 layers, sequence 2048, batch 8.
MODEL = {
    "size": "1b",
    "n_layers": 16,
    "d_model": 2048,
    "n_heads": 16,
    "seq_len": 2048,
    "samples": 2048,
    "eval_samples": 16,
}
BATCH = 8


def hand_loop(steps: int, compile_model: bool) -> dict[str, Any]:
    """The hand-written single-GPU loop: what hpctrain must not lose to."""
    import torch

    from hpctrain.examples import gpt

    cfg = gpt.config_from_options(MODEL)
    torch.manual_seed(0)
    model = gpt.GPT(cfg).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
    step_model = torch.compile(model) if compile_model else model
    data = gpt.markov_corpus(cfg, 256, seed=0)
    inputs = torch.stack([data[i][0] for i in range(256)]).cuda()
    targets = torch.stack([data[i][1] for i in range(256)]).cuda()
    times = []
    for step in range(steps):
        start = time.perf_counter()
        rows = slice((step * BATCH) % 256, (step * BATCH) % 256 + BATCH)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = gpt.lm_loss(step_model(inputs[rows]), targets[rows])
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    step_s = statistics.median(times[steps // 2 :])
    tokens_per_s = BATCH * cfg.seq_len / step_s
    return {
        "tokens_per_s": tokens_per_s,
        "mfu": tokens_per_s * gpt.flops_per_token(cfg) / PEAK_FLOPS,
        "step_ms": step_s * 1e3,
        "peak_mem_gb": torch.cuda.max_memory_allocated() / 2**30,
        "params": gpt.param_count(cfg),
        "final_loss": float(loss),
    }


def hpctrain_run(
    out: Path, name: str, parallel: Any, steps: int, compile_model: bool, checkpoint_every: int = 0
) -> dict[str, Any]:
    """The same training through the runtime, as the generated sbatch script starts it."""
    import yaml

    from hpctrain import spec

    run_dir = out / name
    run_dir.mkdir(parents=True, exist_ok=True)
    job = {
        "name": name,
        "resources": {"nodes": 1, "gpus_per_node": 1, "time": "01:00:00"},
        "train": {
            "entrypoint": "hpctrain.examples.gpt:build",
            "parallel": parallel,
            "steps": steps,
            "batch_size": BATCH,
            "lr": 3e-4,
            "precision": "bf16",
            "compile": compile_model,
            "log_every": 5,
            "checkpoint_every": checkpoint_every,
            "eval_every": 0,
            "options": MODEL,
        },
    }
    (run_dir / "job.yaml").write_text(yaml.safe_dump(job))
    site = {
        "name": "h200",
        "partitions": {
            "gpu": {
                "nodes": 1,
                "gpus_per_node": 8,
                "cpus_per_node": 16,
                "mem_per_node": "128G",
                "default": True,
            }
        },
    }
    (run_dir / "site.yaml").write_text(yaml.safe_dump(site))
    resolved = spec.resolve(spec.load_job(run_dir / "job.yaml"), spec.load_site(run_dir / "site.yaml"))
    (run_dir / "spec.json").write_bytes(spec.dumps(resolved))
    env = {
        **os.environ,
        "HPCTRAIN_RUN_DIR": str(run_dir),
        "SLURM_PROCID": "0",
        "SLURM_NTASKS": "1",
        "SLURM_LOCALID": "0",
        "SLURM_NODEID": "0",
        "SLURM_JOB_ID": "1",
        "SLURM_STEP_ID": "0",
        "SLURM_JOB_NODELIST": "localhost",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29511",
    }
    proc = subprocess.run(
        [sys.executable, "-m", "hpctrain.runtime"],
        env=env,
        capture_output=True,
        text=True,
        timeout=560,
        check=False,
    )
    if proc.returncode != 0:
        return {"error": proc.stderr[-1500:]}
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    train = [x for x in lines if x.get("kind") == "train"]
    # Intervals holding a periodic checkpoint are left out: the checkpoint's own cost is reported.
    saves = {x["step"] for x in lines if x.get("event") == "checkpoint"}
    steady = [x for x in train[len(train) // 2 :] if not any(x["step"] - 5 < s <= x["step"] for s in saves)]
    tokens_per_s = statistics.median(x["tokens_per_s"] for x in steady)
    saves = [x for x in lines if x.get("event") == "checkpoint"]
    # The periodic save is asynchronous (training waits only for staging); the last one is not.
    save_s = [(x.get("save_s"), x.get("written_s")) for x in saves]
    return {
        "tokens_per_s": tokens_per_s,
        "mfu": statistics.median(x.get("mfu") or 0 for x in steady),
        "step_ms": statistics.median(x["step_time_s"] for x in steady) * 1e3,
        "peak_mem_gb": max(x["peak_mem_mb"] for x in train) / 1024,
        "final_loss": train[-1]["loss"],
        "checkpoint_save_s": save_s,
        "layout": next(x for x in lines if x.get("event") == "start")["layout"],
    }


def in_subprocess(args: list[str]) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, __file__, "--case", *args], capture_output=True, text=True, timeout=580, check=False
    )
    if proc.returncode != 0:
        return {"error": proc.stderr[-1500:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", choices=("runtime", "layouts"), default="runtime")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp")) / "bench-gpu")
    parser.add_argument("--case", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:
        kind, name, parallel, compile_flag = args.case
        compiled = compile_flag == "1"
        if kind == "hand":
            result = hand_loop(args.steps, compiled)
        else:
            result = hpctrain_run(
                args.out,
                name,
                parallel,
                args.steps,
                compiled,
                checkpoint_every=20 if name == "hpctrain" else 0,
            )
        print(json.dumps(result))
        return
    import torch

    args.out.mkdir(parents=True, exist_ok=True)
    if args.suite == "runtime":
        cases = [("hand", "hand-written", "ddp", "1"), ("hpctrain", "hpctrain", "ddp", "1")]
    else:
        cases = [
            ("hpctrain", "plain", "ddp", "0"),
            ("hpctrain", "fsdp", "fsdp", "0"),
            ("hpctrain", "pp", "pp", "0"),
        ]
    rows = {}
    for case in cases:
        rows[case[1]] = in_subprocess([*case, "--steps", str(args.steps), "--out", str(args.out)])
        print(case[1], json.dumps(rows[case[1]]), flush=True)
    base = rows[cases[0][1]]
    print(
        f"\n{torch.cuda.get_device_name()}, torch {torch.__version__}, "
        f"NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}, {time.strftime('%Y-%m-%d')}"
    )
    print(f"model: {json.dumps(MODEL)}, batch {BATCH}, bf16")
    print(f"{'case':14} {'tokens/s':>10} {'ratio':>6} {'MFU':>6} {'step ms':>8} {'peak GB':>8}  notes")
    for name, row in rows.items():
        if "error" in row:
            print(f"{name:14} failed: {row['error'][-300:]}")
            continue
        ratio = base["tokens_per_s"] / row["tokens_per_s"] if "tokens_per_s" in base else float("nan")
        note = f"layout {row['layout']}" if "layout" in row else ""
        if row.get("checkpoint_save_s"):
            blocked, written = row["checkpoint_save_s"][0]
            note += f", periodic checkpoint blocks {blocked:.2f} s (on disk after {written:.1f} s)"
            blocked, _ = row["checkpoint_save_s"][-1]
            note += f", final (blocking) save {blocked:.1f} s"
        print(
            f"{name:14} {row['tokens_per_s']:10.0f} {ratio:6.3f} {row['mfu']:6.3f} {row['step_ms']:8.1f} "
            f"{row['peak_mem_gb']:8.1f}  {note}"
        )
    (args.out / f"{args.suite}.json").write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
