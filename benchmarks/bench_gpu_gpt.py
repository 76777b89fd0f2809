"""GPU smoke benchmark of the runtime: digits and a GPT on this machine's GPUs (bf16, NCCL), no Slurm.

Runs each case as local processes with torchrun-style env (one per GPU, or ``--gpus N``) and prints
step time, tokens/s and MFU from the run dirs' result.json / metrics.jsonl. For a machine with a GPU:
    python benchmarks/bench_gpu_gpt.py --out /tmp/bench-gpu [--gpus 1] [--size small] [--compile]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "integration"))


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("/tmp/hpctrain-bench-gpu"))
    parser.add_argument("--gpus", type=int, default=None)
    parser.add_argument("--size", default="small")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--no-digits", action="store_true", help="skip digits (needs scikit-learn)")
    args = parser.parse_args()
    import torch

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
