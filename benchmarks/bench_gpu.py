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
    python benchmarks/bench_gpu.py --suite fp8 --deadline 555   # issue 15: 200 steps, bf16 vs fp8 recipes,
                                                 # same data and weights, losses, profiles by category
    python benchmarks/bench_gpu.py --suite fp8-tune  # issue 15: fp8 variants (fast accumulation, exclusions)
    python benchmarks/bench_gpu.py --suite fp8-b32   # issue 15: global batch 32, fp8 at one micro-batch
    python benchmarks/bench_gpu.py --suite fp8-loss  # issue 15: 200-step loss, fp8 fast accum, noise floor
    python benchmarks/bench_gpu.py --suite fp8-product  # issue 15: the runtime in bf16 and fp8, hand loop

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
    steps: int,
    compile_model: bool,
    precision: str = "bf16",
    profile: Path | None = None,
    *,
    batch: int = BATCH,
    micro: int | None = None,
    recipe: str | None = None,
    warmup: int = 0,
    grad_clip: float | None = None,
    seed: int = 0,
    lr: float = 3e-4,
    exclude: tuple[str, ...] = (),
    fast_accum_backward: bool = False,
    inductor: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The hand-written single-GPU loop: what hpctrain must not lose to (bf16 is the yardstick).

    ``batch`` sequences per optimizer step, run as ``batch // micro`` micro-batches of ``micro``
    (gradient accumulation), so cases with different micro-batches see the same data in the same
    order: step s trains on samples s*batch .. (s+1)*batch - 1 of one corpus drawn with ``seed``
    (which also seeds the model's initialisation). Every case of one batch size and seed therefore
    starts from the same weights and sees the same tokens; only the arithmetic differs.
    ``exclude`` and ``fast_accum_backward`` go to ``convert_to_fp8``; ``inductor`` sets
    ``torch._inductor.config`` fields (compile settings) before compiling.
    """
    import torch
    import torch._inductor.config

    from hpctrain.examples import gpt
    from hpctrain.runtime.precision import DEFAULT_FP8_RECIPE, convert_to_fp8

    micro = micro or batch
    if batch % micro:
        raise ValueError(f"batch {batch} is not a multiple of micro {micro}")
    accum = batch // micro
    cfg = gpt.config_from_options(MODEL)
    torch.manual_seed(seed)
    model = gpt.GPT(cfg)
    if precision == "fp8":
        convert_to_fp8(
            model,
            "cuda",
            recipe=recipe or DEFAULT_FP8_RECIPE,
            exclude=tuple(exclude),
            fast_accum_backward=fast_accum_backward,
        )
    for key, value in (inductor or {}).items():
        setattr(torch._inductor.config, key, value)
    model = model.cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, fused=True)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min(1.0, (step + 1) / warmup) if warmup else 1.0
    )
    step_model = torch.compile(model) if compile_model else model
    samples = min(steps * batch, 4096)
    data = gpt.markov_corpus(cfg, samples, seed=seed)
    inputs, targets = (t.cuda() for t in data.tensors)
    held_out = gpt.markov_corpus(cfg, 16, seed=seed + 1_000_003)

    def one_step(step: int) -> torch.Tensor:
        first = (step * batch) % samples
        total = torch.zeros((), device="cuda")
        for part in range(accum):
            rows = slice(first + part * micro, first + (part + 1) * micro)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = gpt.lm_loss(step_model(inputs[rows]), targets[rows]) / accum
            loss.backward()
            total += loss.detach()
        if grad_clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        schedule.step()
        return total

    times, losses = [], []
    for step in range(steps):
        start = time.perf_counter()
        losses.append(one_step(step))
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    step_s = statistics.median(times[steps // 2 :])
    peak = torch.cuda.max_memory_allocated() / 2**30
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        eval_losses = [
            float(gpt.lm_loss(model(x.cuda()), y.cuda()))
            for x, y in zip(held_out.tensors[0].split(micro), held_out.tensors[1].split(micro), strict=True)
        ]
    breakdown: dict[str, Any] = {}
    if profile is not None:
        breakdown = profile_steps(lambda: one_step(0), profile)
    tokens_per_s = batch * cfg.seq_len / step_s
    curve = [float(x) for x in losses]
    return {
        "tokens_per_s": tokens_per_s,
        "mfu": tokens_per_s * gpt.flops_per_token(cfg) / PEAK_FLOPS,
        "step_ms": step_s * 1e3,
        "step_ms_spread": [min(times[steps // 2 :]) * 1e3, max(times[steps // 2 :]) * 1e3],
        "peak_mem_gb": peak,
        "params": gpt.param_count(cfg),
        "batch": batch,
        "micro": micro,
        "recipe": (recipe or DEFAULT_FP8_RECIPE) if precision == "fp8" else None,
        "final_loss": curve[-1],
        "last10_loss": statistics.fmean(curve[-10:]),
        "eval_loss": statistics.fmean(eval_losses),
        "losses": [(i, round(x, 4)) for i, x in enumerate(curve) if i % 10 == 9 or i < 10],
        "profile": breakdown,
    }


def kernel_category(name: str) -> str:
    """A CUDA kernel's kind, from its name (cuBLAS/CUTLASS GEMMs, flash attention, Triton fusions...)."""
    low = name.lower()
    if "flash" in low or "fmha" in low or "attention" in low or "cudnn::fusion" in low:
        return "attention"
    if low.startswith("nvjet") and ("_qq" in low or "_qr" in low or "_rq" in low):
        return "gemm fp8"  # cuBLAS's Hopper kernels: q = an fp8 operand
    if any(k in low for k in ("e4m3", "e5m2", "f8", "fp8", "scaled_mm")) and (
        "gemm" in low or "nvjet" in low or "cutlass" in low or "xmma" in low or "sm90" in low
    ):
        return "gemm fp8"
    if any(k in low for k in ("gemm", "nvjet", "cutlass", "xmma", "cublas", "sm90_")):
        return "gemm bf16"
    if "adam" in low or "multi_tensor" in low:
        return "optimizer"
    if "nll" in low or "softmax" in low or "cross_entropy" in low:
        return "loss"
    if low.startswith("triton"):
        if "amax" in low or ("abs" in low and "max" in low):
            return "fp8 scale/cast (triton)"
        return "fused elementwise/norm (triton)"
    if "memcpy" in low or "memset" in low:
        return "memcpy/memset"
    return "other"


def profile_steps(step: Any, path: Path, count: int = 3) -> dict[str, Any]:
    """Profile ``count`` calls of ``step``: the kernel table to ``path``, time per category returned."""
    import torch
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as profiler

    with profiler(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(count):
            step()
        torch.cuda.synchronize()
    table = prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=40, max_name_column_width=90)
    kernels: dict[str, float] = {}
    for event in prof.events():
        # GPU-side user annotations (Optimizer.step#AdamW.step) span kernels counted on their own
        if event.device_type == torch.autograd.DeviceType.CUDA and not getattr(
            event, "is_user_annotation", False
        ):
            kernels[event.name] = kernels.get(event.name, 0.0) + event.device_time_total / 1e3 / count
    categories: dict[str, float] = {}
    for name, ms in kernels.items():
        categories[kernel_category(name)] = categories.get(kernel_category(name), 0.0) + ms
    top = sorted(kernels.items(), key=lambda kv: -kv[1])[:15]
    path.write_text(table + "\n\nper step, ms, by category:\n" + json.dumps(categories, indent=1))
    return {
        "gpu_ms_per_step": sum(kernels.values()),
        "categories_ms": dict(sorted(categories.items(), key=lambda kv: -kv[1])),
        "top_kernels_ms": [(name[:90], round(ms, 2), kernel_category(name)) for name, ms in top],
        "kernels_ms": {name[:160]: round(ms, 4) for name, ms in kernels.items()},
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


def in_subprocess(case: dict[str, Any], out: Path, results: Path, timeout: float = 580) -> dict[str, Any]:
    try:
        proc = subprocess.run(
            [
                sys.executable,
                __file__,
                "--out",
                str(out),
                "--results",
                str(results),
                "--case",
                json.dumps(case),
            ],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    if proc.returncode != 0:
        return {"error": proc.stderr[-1500:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run_case(case: dict[str, Any], out: Path) -> dict[str, Any]:
    case = dict(case)
    kind, name, steps = case.pop("kind"), case.pop("name"), case.pop("steps")
    compiled = case.pop("compile", True)
    if kind == "hand":
        profile = out / f"profile-{name}.txt" if case.pop("profile", False) else None
        return hand_loop(steps, compiled, case.pop("precision", "bf16"), profile, **case)
    return hpctrain_run(out, name, case.pop("parallel", "ddp"), steps, compiled, **case)


FP8_COMMON: dict[str, Any] = {"kind": "hand", "steps": 200, "batch": 16, "warmup": 20, "grad_clip": 1.0}
CDT: dict[str, Any] = {"coordinate_descent_tuning": True}
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
    # issue 15, fp8 against the bf16 hand loop at one global batch (16 sequences): 200 steps on the
    # same data from the same initial weights, linear warm-up over 20 steps and clipping at 1.0 for
    # every case. bf16 at micro-batch 8 (x2) against 16 is the same maths summed in another order:
    # the noise floor for the loss comparison.
    "fp8": [
        {**FP8_COMMON, "name": "bf16-m16", "profile": True},
        {**FP8_COMMON, "name": "fp8-tw-m16", "precision": "fp8", "recipe": "tensorwise", "profile": True},
        {**FP8_COMMON, "name": "fp8-rw-m16", "precision": "fp8", "recipe": "rowwise"},
        {**FP8_COMMON, "name": "bf16-m8x2", "micro": 8},
        {**FP8_COMMON, "name": "fp8-rwgw-m16", "precision": "fp8", "recipe": "rowwise_with_gw_hp"},
    ],
    # what could make fp8 faster (40 steps each, speed only): faster accumulation in the backward
    # matmuls, the attention linears left in bf16, Inductor's coordinate-descent tuning of its kernels
    "fp8-tune": [
        {**FP8_COMMON, "steps": 40, "name": "bf16-m16"},
        {
            **FP8_COMMON,
            "steps": 40,
            "name": "fp8-tw-fastacc",
            "precision": "fp8",
            "fast_accum_backward": True,
        },
        {**FP8_COMMON, "steps": 40, "name": "fp8-tw-mlponly", "precision": "fp8", "exclude": ["attn."]},
        {**FP8_COMMON, "steps": 40, "name": "fp8-tw-cdt", "precision": "fp8", "inductor": CDT},
        {**FP8_COMMON, "steps": 40, "name": "bf16-m16-cdt", "inductor": CDT},
    ],
    # the loss after 200 steps, fp8 tensorwise-fast against bf16, with bf16 against bf16 summed in
    # another order (micro-batch 8 x 2) as the noise floor, all in one call
    "fp8-loss": [
        {**FP8_COMMON, "name": "bf16-m16"},
        {**FP8_COMMON, "name": "fp8-twfast-m16", "precision": "fp8", "recipe": "tensorwise-fast"},
        {**FP8_COMMON, "name": "bf16-m8x2", "micro": 8},
    ],
    # what a user gets: the runtime at a global batch of 16 in bf16 and fp8 against the bf16 hand loop
    "fp8-product": [
        {"kind": "hand", "name": "hand-bf16-b16", "steps": 40, "batch": 16},
        {"kind": "hpctrain", "name": "hpctrain-bf16-b16", "steps": 40, "batch_size": 16},
        *(
            {
                "kind": "hpctrain",
                "name": f"hpctrain-fp8-{recipe}-b16",
                "steps": 40,
                "batch_size": 16,
                "precision": "fp8",
                "fp8_recipe": recipe,
            }
            for recipe in ("tensorwise-fast", "tensorwise")
        ),
    ],
    # the same at a global batch of 32, where fp8's freed memory allows one micro-batch of 32
    "fp8-b32": [
        {**FP8_COMMON, "steps": 40, "batch": 32, "name": "bf16-m16x2", "micro": 16},
        {**FP8_COMMON, "steps": 40, "batch": 32, "name": "bf16-m32"},
        {**FP8_COMMON, "steps": 40, "batch": 32, "name": "fp8-tw-m32", "precision": "fp8"},
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
    print(
        f"{'case':14} {'tokens/s':>10} {'x first':>7} {'MFU':>6} {'step ms':>8} {'peak GB':>8} {'loss':>8} "
        f"{'last10':>8} {'eval':>8} {'wall s':>6}"
    )
    for name, row in rows.items():
        if "error" in row:
            print(f"{name:14} failed: {row['error'][-600:]}")
            continue
        speedup = row["tokens_per_s"] / base["tokens_per_s"] if "tokens_per_s" in base else float("nan")
        print(
            f"{name:14} {row['tokens_per_s']:10.0f} {speedup:7.3f} {row['mfu']:6.3f} {row['step_ms']:8.1f} "
            f"{row['peak_mem_gb']:8.1f} {row['final_loss']:8.4f} {row.get('last10_loss', float('nan')):8.4f} "
            f"{row.get('eval_loss', float('nan')):8.4f} {row.get('wall_s', 0):6.0f}"
        )
        if row.get("profile"):
            cats = ", ".join(f"{k} {v:.1f}" for k, v in row["profile"]["categories_ms"].items())
            print(f"    GPU ms per step {row['profile']['gpu_ms_per_step']:.1f}: {cats}")
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
    parser.add_argument(
        "--deadline", type=float, default=1e9, help="seconds: start no case later than this minus 100"
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
    began = time.monotonic()
    for case in SUITES[args.suite]:
        if args.only and case["name"] not in args.only:
            continue
        left = args.deadline - (time.monotonic() - began)
        if left < 100:
            print(case["name"], "skipped: out of time", flush=True)
            continue
        case_began = time.monotonic()
        rows[case["name"]] = in_subprocess(case, args.out, args.results, min(580, left))
        rows[case["name"]]["wall_s"] = time.monotonic() - case_began
        brief = {k: v for k, v in rows[case["name"]].items() if k not in ("profile", "losses")}
        print(case["name"], json.dumps(brief), flush=True)
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
