"""Schedulers behind one interface: the Slurm command line (default), pyslurm, and a local runner."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterable
from typing import TYPE_CHECKING

from hpctrain.errors import BackendError
from hpctrain.scheduler.base import Backend, JobInfo

if TYPE_CHECKING:
    from hpctrain.rundir import RunDir

# The one list of backend names: `--backend` choices and $HPCTRAIN_BACKEND values.
NAMES = ("auto", "slurm", "pyslurm", "local")


def select_backend(name: str | None = None) -> Backend:
    """`auto` takes pyslurm when it is importable and matches the cluster, else the command line."""
    # Each backend is imported here, once selected: a poll pays for its own backend only
    # (test_architecture.py: test_polling_runs_loads_neither_the_spec_nor_the_templates), and
    # pyslurm is optional.
    name = name or os.environ.get("HPCTRAIN_BACKEND") or "auto"
    if name == "local":
        from hpctrain.scheduler.local import LocalBackend

        return LocalBackend()
    if name == "pyslurm" or (name == "auto" and importlib.util.find_spec("pyslurm") is not None):
        try:
            from hpctrain.scheduler.slurm.pyslurm import PyslurmBackend, available
        except ImportError:
            usable, why = False, "hpctrain.scheduler.slurm.pyslurm is missing"
        else:
            usable, why = available()
        if usable:
            return PyslurmBackend()
        if name == "pyslurm":
            raise BackendError(f"the pyslurm backend cannot be used here: {why}")
    if name in ("auto", "slurm", "pyslurm"):
        from hpctrain.scheduler.slurm.cli import SlurmCliBackend

        return SlurmCliBackend()
    raise BackendError(f"unknown backend {name!r}; choose one of {', '.join(NAMES)}")


def release_held(runs: Iterable[tuple[str, RunDir, JobInfo]]) -> list[str]:
    """(backend name, run directory, last poll) of tracked runs: each pending one goes to its own
    backend's release_held; the job ids released. Runs of a backend unusable here are left alone."""
    by_backend: dict[str, list[tuple[RunDir, JobInfo]]] = {}
    for name, run, info in runs:
        if info.state.value == "PENDING":
            by_backend.setdefault(name, []).append((run, info))
    released: list[str] = []
    for name, held in by_backend.items():
        try:
            backend = select_backend(name)
        except BackendError:
            continue
        released += backend.release_held(held)
    return released
