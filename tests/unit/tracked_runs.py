"""Test helpers: runs recorded in a real index with hand-made run directories, and the CLI run in-process."""

from __future__ import annotations

import io
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from hpctrain.rundir import RunDir
from hpctrain.tracking.index import Index, RunRecord
from hpctrain.tracking.poll import PolledRun
from hpctrain.tracking.status import RunStatus, assemble


def track(home: Path, job_id: str, state: str, backend: str = "local", name: str = "job") -> RunDir:
    """Record a run in the index under `home` and return its (empty but for logs/) run directory."""
    index = Index(home)
    run_id, run_dir = index.new_run_dir(name)
    now = time.time()
    index.add(
        RunRecord(
            run_id=run_id,
            job_id=job_id,
            name=name,
            site="local",
            backend=backend,
            run_dir=run_dir,
            submitted_at=now,
            state=state,
            state_at=now,
        )
    )
    return RunDir(run_dir)


def assembled(run_dir: Path, state: str, name: str = "job") -> RunStatus:
    """The typed status of an untracked run whose directory is `run_dir`, as one poll without a scheduler
    answer would give it."""
    record = RunRecord(
        run_id="r1",
        job_id="42",
        name=name,
        site="local",
        backend="local",
        run_dir=run_dir,
        submitted_at=0.0,
        state=state,
        state_at=0.0,
    )
    return assemble(PolledRun(record, None))


@dataclass
class Outcome:
    code: int
    stdout: str
    stderr: str
    seconds: float


@contextmanager
def home_env(home: Path) -> Iterator[None]:
    before = os.environ.get("HPCTRAIN_HOME")
    os.environ["HPCTRAIN_HOME"] = str(home)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("HPCTRAIN_HOME", None)
        else:
            os.environ["HPCTRAIN_HOME"] = before


def cli(*args: str) -> Outcome:
    """`hpctrain ARGS` through main() in this process (a fresh process costs 10x more per example)."""
    from hpctrain.cli.main import main

    out, err = io.BytesIO(), io.BytesIO()
    stdout, stderr = sys.stdout, sys.stderr
    wrappers = [
        io.TextIOWrapper(out, encoding="utf-8", errors="replace"),
        io.TextIOWrapper(err, encoding="utf-8"),
    ]
    sys.stdout, sys.stderr = wrappers
    started = time.perf_counter()
    try:
        code = main(list(args))
    finally:
        seconds = time.perf_counter() - started
        sys.stdout, sys.stderr = stdout, stderr
        for wrapper in wrappers:
            wrapper.flush()
            wrapper.detach()  # keeps the BytesIO open when the wrapper is collected
    text = [stream.getvalue().decode("utf-8", "replace") for stream in (out, err)]
    return Outcome(code, text[0], text[1], seconds)
