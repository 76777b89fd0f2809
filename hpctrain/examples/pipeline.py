"""A pipeline of dependent jobs through the Python API: smoke run -> training -> second-seed check.

Run it on a login node (it imports no torch; the jobs do):

    python -m hpctrain.examples.pipeline --site local

The job is built in Python, with no YAML file. A short smoke run goes first; the training run waits for
it to complete (`after=`, a Slurm `afterok` dependency), and a run with another seed waits for the
training, to check that its result does not hang on the seed. The script waits for each, prints their
final evaluation loss and exits 0 when every stage completed, or cancels what is left and exits 1.
"""

from __future__ import annotations

import argparse
import sys

import hpctrain


def digits_job(steps: int) -> hpctrain.JobSpec:
    """The digits classifier of jobs/digits-ddp.yaml, on one node of two GPUs (two ranks)."""
    return hpctrain.JobSpec(
        name="digits-pipeline",
        train=hpctrain.Train(
            entrypoint="hpctrain.examples.digits:build",
            steps=steps,
            batch_size=64,
            lr=0.003,
            log_every=10,
            eval_every=steps,
        ),
        resources=hpctrain.Resources(nodes=1, gpus_per_node=2, cpus_per_task=1, mem="2G", time="00:15:00"),
        env={"OMP_NUM_THREADS": 1},
    )


def show_progress(stage: str) -> object:
    """A `wait(progress=...)` callback that prints a stage's state and step when they change."""
    last: list[str] = []

    def progress(status: hpctrain.RunStatus) -> None:
        train = status.progress.train
        line = f"{stage}: job {status.job_id} {status.state}" + (f" step {train.step}" if train else "")
        if line not in last:
            last.append(line)
            print(line, flush=True)

    return progress


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--site", required=True, help="Site profile, e.g. local.")
    parser.add_argument("--backend", default=None, help="slurm or pyslurm (default: auto).")
    parser.add_argument("--steps", type=int, default=100, help="Training steps of each long stage.")
    parser.add_argument("--timeout", type=float, default=1800, help="Seconds to wait for each stage.")
    args = parser.parse_args(argv)

    job = digits_job(args.steps)
    smoke = hpctrain.submit(job, args.site, ["name=digits-smoke", "train.steps=10"], backend=args.backend)
    train = hpctrain.submit(job, args.site, ["name=digits-train"], backend=args.backend, after=[smoke])
    check = hpctrain.submit(
        job, args.site, ["name=digits-seed1", "train.seed=1"], backend=args.backend, after=[train]
    )
    stages = {"smoke": smoke, "train": train, "seed 1": check}
    for stage, run in stages.items():
        print(f"{stage}: submitted job {run.job_id} (run {run.run_id})", flush=True)
    try:
        for stage, run in stages.items():
            final = run.wait(timeout=args.timeout, progress=show_progress(stage))
            if final.state != "COMPLETED":
                print(f"{stage}: {final.state}; cancelling the stages after it", file=sys.stderr)
                hpctrain.cancel(list(stages.values()))
                return 1
            result = run.result()
            print(
                f"{stage}: {result.step}/{result.steps} steps, eval loss {result.eval_loss:.4f}", flush=True
            )
    except hpctrain.HpctrainError as err:
        hpctrain.cancel(list(stages.values()))
        print(f"pipeline: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
