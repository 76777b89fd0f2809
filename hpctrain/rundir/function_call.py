"""A function job's files: the pickled call written at submit, and each rank's outcome (torch-free).

`hpctrain.submit_function` pickles the function with its arguments (cloudpickle: closures, lambdas and
functions of `__main__` travel by value, functions of importable modules by name) into
``function/call.pkl``. In the job, ``python -m hpctrain.command.call`` loads it, calls it, and writes
``function/rank-N.json`` (a :class:`FunctionOutcome`: returned, or the exception with its remote
traceback) and, on rank 0, the value into ``function/value.pkl``. `Run.result()` reads them back.
"""

from __future__ import annotations

import os
import socket
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from hpctrain.errors import FunctionFailed, InputError
from hpctrain.rundir import names
from hpctrain.rundir.io import list_names, numbered, read_json, replace_bytes, write_json
from hpctrain.rundir.run_dir import RunDir
from hpctrain.rundir.structs import FunctionOutcome, Unreadable

Ranks = Literal[0, "all"]
RANKS: tuple[Ranks, ...] = (0, "all")


@dataclass(frozen=True)
class FunctionCall:
    """What call.pkl holds."""

    fn: Callable[..., Any]
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    ranks: Ranks = 0
    """0: rank 0 calls it (other ranks return at once); all: every rank does."""


def failure(outcome: FunctionOutcome) -> FunctionFailed:
    """The error `Run.result()` raises for a rank that raised: one line, then the remote traceback."""
    where = f"rank {outcome.rank}" + (f" on {outcome.node}" if outcome.node else "")
    summary = f"the function raised {outcome.error_type}: {outcome.message} ({where})"
    return FunctionFailed(summary, outcome.traceback)


def dump_call(fn: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any], ranks: Ranks) -> bytes:
    """The call pickled; a one-line InputError for what cannot be (a closure over a lock, an open file)."""
    import cloudpickle

    if not callable(fn):
        raise InputError(f"submit_function: {fn!r} is not callable")
    if ranks not in RANKS:
        raise InputError(f"submit_function: ranks: {ranks!r} is not 0 or 'all'")
    call = FunctionCall(fn, tuple(args), dict(kwargs), ranks)
    try:
        return cloudpickle.dumps(call)
    except Exception as err:  # pickle raises TypeError, PicklingError, AttributeError... by object
        name = getattr(fn, "__qualname__", repr(fn))
        raise InputError(
            f"submit_function: {name} cannot be sent to the job: {type(err).__name__}: {_first_line(err)} "
            "(the function, its closure, args and kwargs must be picklable by cloudpickle)"
        ) from None


def write_call(run: RunDir, data: bytes) -> None:
    run.function_call.parent.mkdir(parents=True, exist_ok=True)
    replace_bytes(run.function_call, data, durable=True)


def load_call(data: bytes) -> FunctionCall:
    import cloudpickle

    call = cloudpickle.loads(data)
    if not isinstance(call, FunctionCall):
        raise TypeError(f"not a function call but {type(call).__name__}")
    return call


def call_and_record(run: RunDir, call: FunctionCall, rank: int) -> bool:
    """Call the function as rank `rank` and write its outcome; whether it returned."""
    import cloudpickle

    outcome = FunctionOutcome(rank=rank, node=socket.gethostname())
    value: bytes | None = None
    try:
        returned = call.fn(*call.args, **call.kwargs)
        if rank == 0:
            try:
                value = cloudpickle.dumps(returned)
            except Exception as err:
                raise TypeError(f"its value ({type(returned).__name__}) cannot be pickled: {err}") from err
        outcome.returned = True
    except BaseException as err:  # SystemExit and KeyboardInterrupt from the function come back too
        outcome.error_type = type(err).__name__
        outcome.message = _first_line(err, 2000)
        # From the function's own frame down: this module's frame tells the user nothing.
        below = err.__traceback__.tb_next if err.__traceback__ is not None else None
        outcome.traceback = "".join(traceback.format_exception(type(err), err, below))
    outcome.time = round(time.time(), 3)
    if value is not None:
        replace_bytes(run.function_value, value, durable=True)  # before the outcome that points to it
    run.function_outcome(rank).parent.mkdir(parents=True, exist_ok=True)
    write_json(run.function_outcome(rank), outcome, durable=True)
    return outcome.returned


def outcomes(run: RunDir) -> list[FunctionOutcome | Unreadable]:
    """Every rank's outcome written so far, by rank."""
    folder = run.root / names.FUNCTION
    found = [
        read_json(folder / name, FunctionOutcome, below=run.top)
        for _, name in sorted(numbered(list_names(folder, run.top), names.FUNCTION_OUTCOME))
    ]
    return [one for one in found if one is not None]


def result(run: RunDir) -> tuple[bool, Any]:
    """(True, the value) when rank 0 returned and no rank raised; (False, why not) when nothing says so
    yet. FunctionFailed when a rank raised (the lowest such rank)."""
    import cloudpickle

    found = outcomes(run)
    for outcome in found:
        if isinstance(outcome, Unreadable):
            return False, str(outcome)
        if not outcome.returned:
            raise failure(outcome)
    if not any(isinstance(o, FunctionOutcome) and o.rank == 0 for o in found):
        return False, "rank 0 has written no outcome"
    try:
        with open(run.function_value, "rb") as handle:
            return True, cloudpickle.load(handle)
    except Exception as err:  # a missing file, a module the value needs that is not importable here
        return (
            False,
            f"{run.function_value}: cannot be loaded here ({type(err).__name__}: {_first_line(err)})",
        )


def is_function_run(run: RunDir) -> bool:
    return os.path.exists(run.function_call)


def _first_line(err: BaseException, limit: int = 300) -> str:
    text = str(err)
    return (text.splitlines()[0] if text else type(err).__name__)[:limit]
