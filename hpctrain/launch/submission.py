"""Submit = prepare (a dry-run request: resolved spec + rendered script) then schedule it on a backend."""

from __future__ import annotations

import contextlib
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from hpctrain import spec
from hpctrain.launch.entry_check import check_job
from hpctrain.launch.render import batch_options, render, slurm_directive_path
from hpctrain.launch.resources import job_file
from hpctrain.scheduler import select_backend
from hpctrain.scheduler.base import BackendError, JobState
from hpctrain.site import lookup as sites

if TYPE_CHECKING:
    # Imported where a run is recorded: `render` (a dry run) records nothing and starts faster.
    from hpctrain.runs.index import Index, Run
    from hpctrain.scheduler.base import Backend


class Request(msgspec.Struct):
    """What would be submitted: everything is known and checked before the scheduler is asked."""

    resolved: spec.Resolved
    script: str


def prepare(
    job_path: str | Path,
    site: str,
    overrides: list[str] | None = None,
    backend_name: str | None = None,
    check: bool = True,
) -> Request:
    """Load, override, validate and render; raises SpecError / RenderError with one-line messages."""
    resolved = load_and_resolve(job_path, site, overrides, check)
    # A dry run has no run directory yet: the script shows where it would be.
    template = select_backend(backend_name).template
    return Request(resolved, render(resolved, Path("/RUN_DIR"), template=template))


def load_and_resolve(
    job_path: str | Path, site: str, overrides: list[str] | None, check: bool = True
) -> spec.Resolved:
    job = spec.load_job(job_file(job_path), overrides)
    site_profile = spec.load_site(sites.locate(site))
    resolved = spec.resolve(job, site_profile, str(job_path), str(site))
    if check:
        check_job(resolved, str(job_path))
    return resolved


class Submitted(msgspec.Struct):
    run: Run
    error: str | None = None


def submit(
    job_path: str | Path,
    site: str,
    overrides: list[str] | None = None,
    backend_name: str | None = None,
    index: Index | None = None,
    check: bool = True,
) -> Submitted:
    """Record, render and submit. The run directory keeps script and spec even if the scheduler refuses.

    Whatever fails once the run directory exists, the directory is never left unindexed: a failure
    before the script is written removes it, a later one (the scheduler refused, sbatch is missing,
    Ctrl-C) records the run as SUBMIT_FAILED with the reason.
    """
    from hpctrain.rundir import RunDir
    from hpctrain.runs.index import SUBMIT_FAILED, Index, Run

    index = index or Index()
    backend = select_backend(backend_name)
    # Validate before creating anything: a bad spec or an unusable home leaves no half-made run behind.
    resolved = load_and_resolve(job_path, site, overrides, check)
    slurm_directive_path(index.root / "runs")
    run_id, run_dir = index.new_run_dir(resolved.job.name)
    now = time.time()
    run = Run(
        run_id=run_id,
        job_id=None,
        name=resolved.job.name,
        site=resolved.site.name,
        backend=backend.name,
        run_dir=run_dir,
        submitted_at=now,
        state=JobState.PENDING.value,
        state_at=now,
    )
    script_path = RunDir(run_dir).script
    try:
        _write_run_dir(resolved, run_dir, script_path, backend, job_path, site, overrides)
    except BaseException as err:
        _remove_or_record(index, run, f"the run directory could not be written: {_reason(err)}")
        raise
    try:
        run.job_id = backend.submit(script_path, run_dir, batch_options(resolved, run_dir))
    except BaseException as err:
        run.state, run.reason = SUBMIT_FAILED, _reason(err)
        index.add(run)
        if isinstance(err, BackendError):
            return Submitted(run, run.reason)
        raise
    index.add(run)
    return Submitted(run)


def _write_run_dir(
    resolved: spec.Resolved,
    run_dir: Path,
    script_path: Path,
    backend: Backend,
    job_path: str | Path,
    site: str,
    overrides: list[str] | None,
) -> None:
    from hpctrain.rundir import RunDir, SubmitInfo, write_json

    script = render(resolved, run_dir, template=backend.template)
    paths = RunDir(run_dir)
    paths.spec.write_bytes(spec.dumps(resolved))
    script_path.write_text(script)
    submitted_with = SubmitInfo(
        job=str(Path(job_path).resolve()),
        site=site,
        overrides=overrides or [],
        backend=backend.name,
        cwd=str(Path.cwd()),
    )
    write_json(paths.submit_info, submitted_with)


def _reason(err: BaseException) -> str:
    if isinstance(err, KeyboardInterrupt):
        return "interrupted while submitting (the job may have reached the scheduler: check squeue)"
    return str(err) or type(err).__name__


def _remove_or_record(index: Index, run: Run, why: str) -> None:
    """Nothing was submitted: remove the run directory, or, if that fails too, record why it exists."""
    from hpctrain.runs.index import SUBMIT_FAILED

    shutil.rmtree(run.run_dir, ignore_errors=True)
    if run.run_dir.exists():
        run.state, run.reason = SUBMIT_FAILED, why
        with contextlib.suppress(OSError):  # the original error is the one to report
            index.add(run)
