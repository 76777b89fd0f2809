"""One-GPU benchmark: hpctrain's runtime against a hand-written PyTorch loop of the same GPT.

Each case runs in its own process (fresh CUDA context and compile cache). The hand-written loop is
the plain nanoGPT-style reference: same model class, bf16 autocast, torch.compile, fused AdamW,
batches already on the GPU. hpctrain runs `python -m hpctrain.runtime` on a run directory, exactly as
a task of the generated sbatch script would (world of one, NCCL). Throughput is the median over the
logged intervals after warm-up; MFU is against the H200's dense bf16 peak (989 TFLOP/s).

    python benchmarks/bench_gpu.py --suite runtime   # issue 3: hand vs hpctrain, compile, checkpoint time
    python benchmarks/bench_gpu.py --suite layouts   # issue 4: plain vs fsdp vs pp on one GPU (eager)
    python benchmarks/bench_gpu.py --suite speed     # issue 15: async checkpoints, fp8, larger micro-batch
    python benchmarks/bench_gpu.py --suite profile   # issue 15: profiler tables, bf16 and fp8 (to $OUT)

Run dirs (with 10.8 GB checkpoints) go to --out (default /tmp/bench-gpu), the JSON results and
profiles to --results (default $OUT). MFU counts every FLOP at the bf16 peak, fp8 runs included.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
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
LOG_EVERY = 5


def hand_loop(
    steps: int, compile_model: bool, precision: str = "bf16", profile: Path | None = None
) -> dict[str, Any]:
    """The hand-written single-GPU loop: what hpctrain must not lose to (bf16 is the yardstick)."""
    import torch

    from hpctrain.examples import gpt
    from hpctrain.runtime.precision import convert_to_fp8

    cfg = gpt.config_from_options(MODEL)
    torch.manual_seed(0)
    model = gpt.GPT(cfg)
    if precision == "fp8":
        convert_to_fp8(model, "cuda")
    model = model.cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
    step_model = torch.compile(model) if compile_model else model
    data = gpt.markov_corpus(cfg, 256, seed=0)
    inputs = torch.stack([data[i][0] for i in range(256)]).cuda()
    targets = torch.stack([data[i][1] for i in range(256)]).cuda()

    def one_step(step: int) -> torch.Tensor:
        rows = slice((step * BATCH) % 256, (step * BATCH) % 256 + BATCH)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = gpt.lm_loss(step_model(inputs[rows]), targets[rows])
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    times = []
    for step in range(steps):
        start = time.perf_counter()
        loss = one_step(step)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    if profile is not None:
        from torch.profiler import ProfilerActivity
        from torch.profiler import profile as profiler

        with profiler(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for step in range(3):
                one_step(step)
            torch.cuda.synchronize()
        table = prof.key_averages().table(
            sort_by="self_cuda_time_total", row_limit=25, max_name_column_width=70
        )
        profile.write_text(table)
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
    out: Path, name: str, parallel: Any, steps: int, compile_model: bool, **train: Any
) -> dict[str, Any]:
    """The same training through the runtime, as the generated sbatch script starts it.

    ``train`` overrides fields of the job's train section (precision, batch_size, grad_accum,
    checkpoint_every, activation_checkpointing...).
    """
    import yaml

    from hpctrain import spec

    run_dir = out / name
    shutil.rmtree(run_dir, ignore_errors=True)
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
            "log_every": LOG_EVERY,
            "checkpoint_every": 0,
            "keep_checkpoints": 1,
            "eval_every": 0,
            "options": MODEL,
            **train,
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
    shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)  # the lent disk is 64 GB
    return summarize(lines)


def summarize(lines: list[dict[str, Any]]) -> dict[str, Any]:
    """Throughput, memory, loss and checkpoint costs from a run's metrics.jsonl lines."""
    train_lines = [x for x in lines if x.get("kind") == "train"]
    saves = [x for x in lines if x.get("event") == "checkpoint"]
    rough_step = statistics.median(x["step_time_s"] for x in train_lines)

    def window(save: dict[str, Any]) -> list[dict[str, Any]]:
        """The logged intervals from the save until its files were published (the save's whole cost)."""
        steps = math.ceil(save.get("written_s", 0) / rough_step) + LOG_EVERY
        return [x for x in train_lines if save["step"] < x["step"] <= save["step"] + steps]

    touched = {x["step"] for save in saves for x in window(save)}
    later = train_lines[len(train_lines) // 2 :]
    steady = [x for x in later if x["step"] not in touched] or later
    steady_step = statistics.median(x["step_time_s"] for x in steady)
    checkpoints = []
    for save in saves:
        # What the save cost training: the extra time of those intervals over the steady step time.
        extra = sum((x["step_time_s"] - steady_step) * LOG_EVERY for x in window(save))
        fields = {k: save.get(k) for k in ("step", "save_s", "write_s", "written_s", "bytes")}
        checkpoints.append({**fields, "extra_s": extra})
    return {
        "tokens_per_s": statistics.median(x["tokens_per_s"] for x in steady),
        "mfu": statistics.median(x.get("mfu") or 0 for x in steady),
        "step_ms": steady_step * 1e3,
        "peak_mem_gb": max(x["peak_mem_mb"] for x in train_lines) / 1024,
        "final_loss": train_lines[-1]["loss"],
        "losses": [(x["step"], x["loss"]) for x in train_lines],
        "checkpoints": checkpoints,
        "layout": next(x for x in lines if x.get("event") == "start")["layout"],
    }


def in_subprocess(case: dict[str, Any], out: Path) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, __file__, "--out", str(out), "--case", json.dumps(case)],
        capture_output=True,
        text=True,
        timeout=580,
        check=False,
    )
    if proc.returncode != 0:
        return {"error": proc.stderr[-1500:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run_case(case: dict[str, Any], out: Path) -> dict[str, Any]:
    case = dict(case)
    kind, name, steps = case.pop("kind"), case.pop("name"), case.pop("steps")
    compiled = case.pop("compile", True)
    if kind == "hand":
        profile = out / f"profile-{name}.txt" if case.pop("profile", False) else None
        return hand_loop(steps, compiled, case.pop("precision", "bf16"), profile)
    return hpctrain_run(out, name, case.pop("parallel", "ddp"), steps, compiled, **case)


SUITES: dict[str, list[dict[str, Any]]] = {
    # issue 3: hand vs hpctrain, compile, checkpoint time
    "runtime": [
        {"kind": "hand", "name": "hand-written", "steps": 40},
        {"kind": "hpctrain", "name": "hpctrain", "steps": 40, "checkpoint_every": 20},
    ],
    # issue 4: plain vs fsdp vs pp on one GPU (eager)
    "layouts": [
        {"kind": "hpctrain", "name": name, "parallel": parallel, "steps": 30, "compile": False}
        for name, parallel in (("plain", "ddp"), ("fsdp", "fsdp"), ("pp", "pp"))
    ],
    # issue 15: checkpoints that do not stop training; fp8 against the bf16 hand-written loop
    "speed": [
        {"kind": "hand", "name": "hand-bf16", "steps": 60},
        # 600 steps: periodic saves at 200 and 400, far enough apart for the disk to take each one
        {"kind": "hpctrain", "name": "bf16-ckpt", "steps": 600, "checkpoint_every": 200},
        {"kind": "hpctrain", "name": "fp8", "steps": 200, "precision": "fp8"},
        {"kind": "hpctrain", "name": "fp8-b16", "steps": 40, "precision": "fp8", "batch_size": 16},
        {"kind": "hpctrain", "name": "bf16-b16", "steps": 40, "batch_size": 16},
    ],
    # where the time goes: profiler tables of the hand loop in bf16 and fp8
    "profile": [
        {"kind": "hand", "name": f"hand-{precision}", "steps": 12, "precision": precision, "profile": True}
        for precision in ("bf16", "fp8")
    ],
}


def versions() -> str:
    import torch

    try:
        import torchao

        torchao_version = torchao.__version__
    except ImportError:
        torchao_version = "absent"
    driver = subprocess.run(
        ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    return (
        f"{torch.cuda.get_device_name()}, driver {driver}, torch {torch.__version__}, "
        f"CUDA {torch.version.cuda}, torchao {torchao_version}, "
        f"NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}, {time.strftime('%Y-%m-%d')}"
    )


def disk_write(out: Path, size: int) -> dict[str, float]:
    """A plain dd write of ``size`` bytes with fsync, on the disk the checkpoints went to."""
    target = out / "dd.bin"
    block = 64 << 20
    start = time.perf_counter()
    subprocess.run(
        ["dd", "if=/dev/zero", f"of={target}", f"bs={block}", f"count={max(1, size // block)}", "conv=fsync"],
        capture_output=True,
        check=True,
    )
    seconds = time.perf_counter() - start
    target.unlink()
    return {"bytes": size, "seconds": seconds, "gb_per_s": size / seconds / 1e9}


def print_table(rows: dict[str, dict[str, Any]]) -> None:
    base = next(iter(rows.values()))
    print(f"model: {json.dumps(MODEL)}; MFU counts every FLOP at the dense bf16 peak (fp8 runs included)")
    print(f"{'case':14} {'tokens/s':>10} {'x first':>7} {'MFU':>6} {'step ms':>8} {'peak GB':>8} {'loss':>8}")
    for name, row in rows.items():
        if "error" in row:
            print(f"{name:14} failed: {row['error'][-600:]}")
            continue
        speedup = row["tokens_per_s"] / base["tokens_per_s"] if "tokens_per_s" in base else float("nan")
        print(
            f"{name:14} {row['tokens_per_s']:10.0f} {speedup:7.3f} {row['mfu']:6.3f} {row['step_ms']:8.1f} "
            f"{row['peak_mem_gb']:8.1f} {row['final_loss']:8.4f}"
        )
        for save in row.get("checkpoints", []):
            write_s = save.get("write_s") or float("nan")
            gbps = save["bytes"] / write_s / 1e9 if save.get("bytes") else float("nan")
            print(
                f"    checkpoint step {save['step']}: host blocked {save['save_s']:.3f} s, step-time cost "
                f"{save['extra_s']:.2f} s, files on disk after {write_s:.1f} s ({gbps:.2f} GB/s), "
                f"published after {save['written_s']:.1f} s"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", choices=sorted(SUITES), default="speed")
    parser.add_argument("--only", nargs="*", help="run only these cases of the suite")
    parser.add_argument("--out", type=Path, default=Path("/tmp/bench-gpu"), help="run dirs (large)")
    parser.add_argument(
        "--results", type=Path, default=Path(os.environ.get("OUT", "/tmp")), help="small files"
    )
    parser.add_argument("--case", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:
        print(
            json.dumps(run_case(json.loads(args.case), args.results if "profile" in args.case else args.out))
        )
        return
    args.out.mkdir(parents=True, exist_ok=True)
    args.results.mkdir(parents=True, exist_ok=True)
    print(versions(), flush=True)
    rows: dict[str, dict[str, Any]] = {}
    for case in SUITES[args.suite]:
        if args.only and case["name"] not in args.only:
            continue
        rows[case["name"]] = in_subprocess(case, args.out)
        print(case["name"], json.dumps(rows[case["name"]]), flush=True)
        (args.results / f"{args.suite}.json").write_text(
            json.dumps({"versions": versions(), "rows": rows}, indent=1)
        )
    saved = [c["bytes"] for row in rows.values() for c in row.get("checkpoints", []) if c.get("bytes")]
    if saved:
        dd = disk_write(args.out, max(saved))
        print(
            f"dd write of {dd['bytes'] / 1e9:.1f} GB with fsync: {dd['seconds']:.1f} s, "
            f"{dd['gb_per_s']:.2f} GB/s"
        )
        (args.results / f"{args.suite}-dd.json").write_text(json.dumps(dd))
    print()
    print(versions())
    print_table(rows)


if __name__ == "__main__":
    main()
