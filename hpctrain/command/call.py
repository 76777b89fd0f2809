"""A function job's rank: `python -m hpctrain.command.call [CALL.pkl]` calls the pickled function.

The call comes from CALL.pkl, by default the run directory's function/call.pkl ($HPCTRAIN_RUN_DIR).
With ``ranks=0`` only rank 0 ($RANK) calls it and the others exit at once; with ``ranks="all"`` every
rank does, with torchrun's variables set. The outcome (the value, or the exception with its traceback)
goes into the run directory (hpctrain.rundir.function_call); the exit code is 0 when it returned.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from hpctrain.rundir import RunDir
from hpctrain.rundir.function_call import call_and_record, load_call


def main(argv: list[str]) -> int:
    run_dir = os.environ.get("HPCTRAIN_RUN_DIR")
    if not run_dir:
        print(
            "hpctrain.command.call: HPCTRAIN_RUN_DIR is not set: run it in an hpctrain job", file=sys.stderr
        )
        return 2
    run = RunDir(Path(run_dir))
    source = Path(argv[0]) if argv else run.function_call
    rank_text = os.environ.get("RANK", "0")
    rank = int(rank_text) if rank_text.isdigit() else 0
    try:
        call = load_call(source.read_bytes())
    except Exception as err:  # a missing file, or a module the function needs that this Python lacks
        print(f"hpctrain.command.call: cannot load {source}: {type(err).__name__}: {err}", file=sys.stderr)
        return 2
    if call.ranks == 0 and rank != 0:
        return 0
    returned = call_and_record(run, call, rank)
    if not returned:
        outcome = run.function_outcome(rank)
        print(f"hpctrain.command.call: rank {rank}: the function raised (see {outcome})", file=sys.stderr)
    return 0 if returned else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
