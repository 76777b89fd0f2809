"""A function job: a Python function runs in the allocation and its value comes back, as with submitit.

Run it on a login node (it imports no torch; the job does, to all-reduce across its ranks):

    python -m hpctrain.examples.function_job --site local --backend local

`hpctrain.submit_function` pickles `mean_of_squares` with its arguments (cloudpickle), submits a job
whose every rank calls it (`ranks="all"`, each with torchrun's RANK, WORLD_SIZE, MASTER_ADDR...), and
`run.result()` waits for the job and returns rank 0's value. A second call that raises shows how an
exception comes back: `hpctrain.FunctionFailed`, with the traceback it had in the job.
"""

from __future__ import annotations

import argparse
import os
import sys

import hpctrain


def mean_of_squares(numbers: list[float]) -> dict[str, float | int]:
    """Each rank squares its share of `numbers`; an all-reduce (gloo) sums the shares."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    try:
        rank, world = dist.get_rank(), dist.get_world_size()
        share = torch.tensor(sum(x * x for x in numbers[rank::world]), dtype=torch.float64)
        dist.all_reduce(share)
        return {"mean_of_squares": share.item() / len(numbers), "ranks": world, "host_pid": os.getpid()}
    finally:
        dist.destroy_process_group()


def divide(a: float, b: float) -> float:
    return a / b


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--site", required=True, help="Site profile, e.g. local.")
    parser.add_argument("--backend", default=None, help="slurm, pyslurm or local (default: auto).")
    parser.add_argument("--ranks", type=int, default=2, help="Ranks (tasks on one node).")
    parser.add_argument("--timeout", type=float, default=600, help="Seconds to wait for each job.")
    args = parser.parse_args(argv)

    resources = {"nodes": 1, "tasks_per_node": args.ranks, "time": "00:10:00"}
    try:
        run = hpctrain.submit_function(
            mean_of_squares,
            ([1.0, 2.0, 3.0, 4.0],),
            site=args.site,
            backend=args.backend,
            resources=resources,
            ranks="all",
            job={"env": {"OMP_NUM_THREADS": 1}},
        )
        print(f"submitted job {run.job_id} (run {run.run_id})", flush=True)
        print(f"value: {run.result(timeout=args.timeout)}", flush=True)
        failing = hpctrain.submit_function(divide, (1.0, 0.0), site=args.site, backend=args.backend)
        failing.result(timeout=args.timeout)
    except hpctrain.FunctionFailed as err:
        print(f"as expected, the second call raised: {err.summary}", flush=True)
        return 0
    except hpctrain.HpctrainError as err:
        print(f"function_job: {err}", file=sys.stderr)
        return 1
    print("function_job: the division by zero did not raise", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
