"""GPU smoke benchmark of the runtime: digits and a GPT on this machine's GPUs (bf16, NCCL), no Slurm.

Runs each case as local processes with torchrun-style env (one per GPU, or ``--gpus N``) and prints
step time, tokens/s and MFU from the run dirs' result.json / metrics.jsonl. For a machine with a GPU:
    python benchmarks/bench_gpu_gpt.py --out /tmp/bench-gpu [--gpus 1] [--size small] [--compile]

``--restart`` measures instead what a restart of the compiled 944M GPT (bench_gpu.py's model) costs
on one GPU: three attempts of one run directory, the first and third with an empty compile cache,
the second with the cache the first left in the run directory; for each, the seconds from its
start to its first step, and the seconds its checkpoints blocked training (the first save of the
first attempt included, whose staging buffers were allocated in the background from step 1 on):
    python benchmarks/bench_gpu_gpt.py --restart [--out /tmp/bench-gpu]

``--beside`` runs two fresh 40-step runs with the first save at step 40: one as the runtime is, one
whose first save allocates the staging buffers itself (the background allocation turned off): the
step times beside the allocation, and what the first save blocks, with and without it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PATHS = (str(REPO), str(REPO / "tests" / "integration"))
sys.path.insert(0, PATHS[1])


def case(out: Path, name: str, gpus: int, train: dict) -> dict:
    import _runtime_job as job

    run = job.write_run_dir(out / name, train, tasks_per_node=gpus, resources_gpus=gpus)
    codes = job.run_local(run, gpus, timeout=540)
    if any(codes):
        logs = "\n".join(p.read_text()[-2000:] for p in sorted((run / "logs").glob("*.log")))
        raise SystemExit(f"{name} failed: {codes}\n{logs}")
    result = json.loads((run / "result.json").read_text())
    lines = [m for m in job.metrics(run) if m["kind"] == "train"]
    last = lines[-1] if lines else {}
    return {
        "case": name,
        "gpus": gpus,
        "step_ms": round(result["step_time_median_s"] * 1e3, 2),
        "final_loss": round(result["final_loss"], 4),
        "eval_accuracy": result.get("eval_accuracy"),
        "tokens_per_s": last.get("tokens_per_s"),
        "mfu": last.get("mfu"),
        "peak_mem_mb": last.get("peak_mem_mb"),
    }


RESTART_ATTEMPTS = (("cold", 40), ("warm", 50), ("cold again", 60))  # (cache, train.steps)
CHECKPOINT_EVERY = 20
RESERVED = re.compile(r"staging buffers of ([\d.]+) GB allocated in the background in ([\d.]+) s")


def median_ms(seconds: list[float]) -> float | None:
    return round(statistics.median(seconds) * 1e3, 1) if seconds else None


def beside_reservation(times: list[float], reserve_s: float) -> list[float]:
    """The step times, after step 1, of a fresh run's steps that ran while the staging buffers were
    allocated (the allocation starts just before step 1, so step 1's time counts too)."""
    during, elapsed = [], times[0] if times else 0.0
    for seconds in times[1:]:
        elapsed += seconds
        if elapsed > reserve_s:
            break
        during.append(seconds)
    return during


NO_RESERVATION = (
    "import hpctrain.runtime.staging as s\n"
    "s.HostStaging.reserve = lambda self, state: None\n"
    "s.HostStaging.reserve_like = lambda self, specs: None\n"
)


def patched(out: Path, name: str, code: str) -> dict[str, str]:
    """The environment of a variant run: a sitecustomize that changes the staging before it runs
    (the reservation off, as before it existed)."""
    folder = out / f"sitecustomize-{name}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(code)
    return {"PYTHONPATH": os.pathsep.join([str(folder), *PATHS, os.environ.get("PYTHONPATH", "")])}


def restart(
    out: Path,
    attempts: tuple[tuple[str, int], ...] = RESTART_ATTEMPTS,
    checkpoint_every: int = CHECKPOINT_EVERY,
    name: str = "restart",
    env: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """Attempts of the compiled 944M GPT in one run directory (see the module's doc)."""
    import _runtime_job as job
    from bench_gpu import BATCH, MODEL

    from hpctrain.rundir.names import COMPILE_CACHE

    run = out / name
    shutil.rmtree(run, ignore_errors=True)
    rows = []
    for cache, steps in attempts:
        if cache != "warm":
            shutil.rmtree(run / COMPILE_CACHE, ignore_errors=True)
        train = {
            "entrypoint": "hpctrain.examples.gpt:build",
            "options": MODEL,
            "steps": steps,
            "batch_size": BATCH,
            "lr": 3e-4,
            "precision": "bf16",
            "compile": True,
            "log_every": 1,
            "checkpoint_every": checkpoint_every,
            "keep_checkpoints": 1,
            "tensorboard": False,
        }
        job.write_run_dir(run, train, resources_gpus=1)
        seen = len(job.metrics(run))
        log = run / "logs" / "rank-0.log"
        log_seen = len(log.read_text()) if log.exists() else 0
        began = time.time()
        codes = job.launcher.run(run, 1, 560, {"HPCTRAIN_REDIRECT_LOGS": "1", **(env or {})})
        wall = time.time() - began
        if any(codes):
            raise SystemExit(f"attempt ({cache}) failed: {codes}\n{log.read_text()[-3000:]}")
        lines = job.metrics(run)[seen:]
        trained = [m for m in lines if m["kind"] == "train"]
        saves = [m for m in lines if m.get("event") == "checkpoint"]
        reserved = RESERVED.findall(log.read_text()[log_seen:])
        times = [m["step_time_s"] for m in trained]
        # On a resume the buffers are allocated while the checkpoint loads: no step runs beside them.
        during = (
            beside_reservation(times, float(reserved[0][1])) if reserved and trained[0]["step"] == 1 else []
        )
        last_save = min((m["step"] for m in saves), default=steps)
        before_save = [t for m, t in zip(trained, times, strict=True) if m["step"] <= last_save]
        during_n = len(during)
        rows.append(
            {
                "cache": cache,
                "from_step": trained[0]["step"] - 1,
                "to_first_step_s": round(trained[0]["time"] - began, 1),
                "wall_s": round(wall, 1),
                "step_ms": median_ms(times[1:]),
                # the steps beside the background allocation, and the later ones up to the first save
                "step_ms_while_reserving": median_ms(during),
                "step_ms_after": median_ms(before_save[1 + during_n :]),
                "steps_while_reserving": during_n,
                "reserved_gb_s": [float(x) for x in reserved[0]] if reserved else None,
                "saves": [(m["step"], m["save_s"], m.get("written_s")) for m in saves],
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    shutil.rmtree(run / "checkpoints", ignore_errors=True)  # the lent disk is 64 GB
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("/tmp/hpctrain-bench-gpu"))
    parser.add_argument("--gpus", type=int, default=None)
    parser.add_argument("--size", default="small")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--no-digits", action="store_true", help="skip digits (needs scikit-learn)")
    parser.add_argument("--restart", action="store_true", help="a compiled restart's cost, cold and warm")
    parser.add_argument(
        "--beside",
        action="store_true",
        help="only a fresh run, its first save at step 40: steps beside the allocation",
    )
    args = parser.parse_args()
    import torch

    if args.restart or args.beside:
        args.out.mkdir(parents=True, exist_ok=True)
        rows = (
            restart(args.out, (("cold", 40),), 40, "beside")
            + restart(args.out, (("no reserve", 40),), 40, "control", patched(args.out, "no", NO_RESERVATION))
            if args.beside
            else restart(args.out)
        )
        print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}, {time.strftime('%Y-%m-%d')}")
        for row in rows:
            print(
                f"{row['cache']:10} from step {row['from_step']:3}: "
                f"first step after {row['to_first_step_s']:6.1f} s, wall {row['wall_s']:6.1f} s, "
                f"step {row['step_ms']} ms (while reserving {row['step_ms_while_reserving']}, "
                f"after {row['step_ms_after']}), reserved (GB, s) {row['reserved_gb_s']}, "
                f"saves (step, blocked s, published s) {row['saves']}"
            )
        return

    gpus = args.gpus or torch.cuda.device_count()
    args.out.mkdir(parents=True, exist_ok=True)
    rows = (
        []
        if args.no_digits
        else [case(args.out, "digits", gpus, {"steps": 100, "batch_size": 64 * gpus, "log_every": 20})]
    )
    rows.append(
        case(
            args.out,
            f"gpt-{args.size}",
            gpus,
            {
                "entrypoint": "hpctrain.examples.gpt:build",
                "steps": args.steps,
                "batch_size": 16 * gpus,
                "log_every": 20,
                "lr": 3e-4,
                "precision": "bf16",
                "compile": args.compile,
                "options": {"size": args.size},
            },
        )
    )
    print(f"{torch.cuda.get_device_name(0)} x {gpus}")
    for row in rows:
        print(json.dumps(row))


if __name__ == "__main__":
    main()
