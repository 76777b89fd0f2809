"""Submit = prepare (the backend's dry run: resolved spec + rendered script), then schedule it: one path
for runs and sweeps, which records every run directory it makes in the index."""

from __future__ import annotations

import contextlib
import copy
import shutil
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from hpctrain import spec
from hpctrain.errors import InputError
from hpctrain.launch.entry_check import check_job
from hpctrain.scheduler import select_backend
from hpctrain.scheduler.base import AFTER_KINDS, AfterKind, BackendError, JobState
from hpctrain.scheduler.render import slurm_directive_path
from hpctrain.site import lookup as sites
from hpctrain.spec.resources import job_file

if TYPE_CHECKING:
    # Imported where a run is recorded: `render` (a dry run) records nothing and starts faster.
    from hpctrain.rundir import RunDir, SubmitInfo
    from hpctrain.runs.index import Index, Run
    from hpctrain.scheduler.base import Backend, BatchRequest

T = TypeVar("T")


class Request(msgspec.Struct):
    """What would be submitted: everything is known and checked before the scheduler is asked."""

    resolved: spec.Resolved
    script: str


def prepare(
    job: JobSource,
    site: str,
    overrides: list[str] | None = None,
    backend_name: str | None = None,
    check: bool = True,
) -> Request:
    """Load, override, validate and render; raises SpecError / RenderError with one-line messages."""
    resolved = load_and_resolve(job, site, overrides, check)
    # A dry run has no run directory yet: the script shows where it would be.
    return Request(resolved, select_backend(backend_name).prepare(resolved, Path("/RUN_DIR")).script)


JobSource = str | Path | spec.JobSpec | Mapping[str, Any]
"""A job: a spec file, the name of a shipped example, a JobSpec, or the same data as a mapping."""


def load_job(job: JobSource, overrides: list[str] | None = None) -> tuple[spec.JobSpec, str]:
    """The job with `overrides` (`--set` semantics) applied, and where it came from (for messages):
    one path for a file, an example's name and a job built in Python."""
    if isinstance(job, str | Path):
        path = job_file(job)
        return spec.load_job(path, overrides), str(job)
    origin = source_name(job)
    data = msgspec.to_builtins(job) if isinstance(job, spec.JobSpec) else copy.deepcopy(dict(job))
    return spec.decode(spec.JobSpec, spec.apply_overrides(data, overrides or [], origin), origin), origin


def source_name(job: JobSource) -> str:
    """How messages and submit.json name a job: its path as given, or `<python job NAME>`."""
    if isinstance(job, str | Path):
        return str(job)
    name = job.name if isinstance(job, spec.JobSpec) else job.get("name", "?")
    return f"<python job {name}>"


def load_and_resolve(
    job: JobSource, site: str, overrides: list[str] | None, check: bool = True
) -> spec.Resolved:
    loaded, where = load_job(job, overrides)
    site_profile = spec.load_site(sites.locate(site))
    resolved = spec.resolve(loaded, site_profile, where, str(site))
    if check:
        check_job(resolved, where)
    return resolved


def with_dependency(resolved: spec.Resolved, job_ids: list[str], kind: AfterKind) -> spec.Resolved:
    """The job made to wait for `job_ids` (`kind`), besides any `dependency` its spec sets (both must hold).
    Rendered by the scheduler seam as the job's --dependency; a backend that cannot wait refuses it."""
    if not job_ids:
        return resolved
    if kind not in AFTER_KINDS:
        raise InputError(f"after: {kind!r} is not one of {', '.join(AFTER_KINDS)}")
    bad = [job_id for job_id in job_ids if not job_id.isascii() or not job_id.isdigit()]
    if bad:
        raise InputError(
            f"after: {', '.join(bad)} is not a Slurm job id (a job of the local backend cannot be waited for)"
        )
    wait = f"{kind}:{':'.join(dict.fromkeys(job_ids))}"
    own = resolved.job.dependency
    if own and "?" in own:  # Slurm takes `,` (all of) or `?` (any of) in one dependency, not both
        raise InputError(f"after: the spec's dependency {own!r} is a choice (`?`); after= cannot add to it")
    job = msgspec.structs.replace(resolved.job, dependency=f"{own},{wait}" if own else wait)
    return msgspec.structs.replace(resolved, job=job)


class Submitted(msgspec.Struct):
    run: Run
    error: str | None = None


def submit(
    job: JobSource,
    site: str,
    overrides: list[str] | None = None,
    backend_name: str | None = None,
    index: Index | None = None,
    check: bool = True,
    after: list[str] | None = None,
    after_kind: AfterKind = "afterok",
    files: Callable[[RunDir], None] | None = None,
) -> Submitted:
    """Record, render and submit. The run directory keeps script and spec even if the scheduler refuses.
    `after`: job ids the job waits for (`after_kind`), as Slurm dependencies. `files` writes what the
    job needs into its run directory before it is scheduled (a function job's call)."""
    backend = select_backend(backend_name)
    # Validate before creating anything: a bad spec or an unusable home leaves no half-made run behind.
    resolved = with_dependency(load_and_resolve(job, site, overrides, check), after or [], after_kind)

    def write(run: RunDir) -> BatchRequest:
        request = backend.prepare(resolved, run.root)
        request.path.write_text(request.script)
        if files is not None:
            files(run)
        return request

    return submit_run(
        index,
        backend,
        resolved,
        origin(job, site, overrides, backend),
        write,
        lambda r: {"": backend.schedule(r)},
    )


FUNCTION_COMMAND = ["python", "-m", "hpctrain.command.call"]
"""What every rank of a function job runs: the call is the run directory's function/call.pkl."""


def submit_function(
    call: bytes,
    site: str,
    job: Mapping[str, Any],
    backend_name: str | None = None,
    after: list[str] | None = None,
    after_kind: AfterKind = "afterok",
) -> Submitted:
    """Submit a function job: `call` (rundir.function_call.dump_call) runs as a command job built from
    `job` (JobSpec fields: name, resources, env...); no restart after a failure unless `job` asks."""
    from hpctrain.rundir.function_call import write_call

    for taken in ("command", "train"):
        if taken in job:
            raise InputError(
                f"submit_function: job: {taken}: a function job runs its function, not a {taken}"
            )
    data = {"restart": {"max": 0}, **copy.deepcopy(dict(job)), "command": FUNCTION_COMMAND}
    return submit(
        data,
        site,
        None,
        backend_name,
        after=after,
        after_kind=after_kind,
        files=lambda run: write_call(run, call),
    )


def origin(job: JobSource, site: str, overrides: list[str] | None, backend: Backend) -> SubmitInfo:
    """submit.json: how the run was asked for, so that it can be asked for again (a job built in Python:
    its resolved spec.json beside it)."""
    from hpctrain.rundir import SubmitInfo

    return SubmitInfo(
        job=str(job_file(job).resolve()) if isinstance(job, str | Path) else source_name(job),
        site=site,
        overrides=overrides or [],
        backend=backend.name,
        cwd=str(Path.cwd()),
    )


def submit_run(
    index: Index | None,
    backend: Backend,
    resolved: spec.Resolved,
    asked: SubmitInfo,
    write: Callable[[RunDir], T],
    schedule: Callable[[T], dict[str, str]],
) -> Submitted:
    """The one submit path (a run, a sweep): a new run directory with the resolved spec and submit.json,
    then `write` (scripts, trial specs) and `schedule`, which returns the job id of each index entry it
    made, by the suffix of its run id ("" for the run itself; a sweep's later arrays are `+OFFSET`).

    SIGTERM, SIGHUP and SIGINT are held from the moment the run directory is made until its job id is
    recorded: one that comes while the files are written removes the directory before the scheduler
    is asked; later it waits for the job id. Whatever fails once the run directory exists, the
    directory is never left unindexed: a failure while writing removes it; the run is recorded (run id
    and directory, no job id) before the scheduler is asked, and its job id after. A submit killed
    even so (SIGKILL) leaves a recorded run whose job carries its run id, which `hpctrain index check`
    finds. A refusal (BackendError) is returned in Submitted.error.

    Everything it writes, and the job's logs (sbatch hands on its umask), is private to the user, or
    readable by the site's `share_with_group` (docs/security.md).
    """
    from hpctrain.rundir.io import private_files

    group = resolved.site.share_with_group
    with private_files(group), held_signals() as held:
        return _submit_private(index, backend, resolved, asked, write, schedule, group, held)


def _submit_private(
    index: Index | None,
    backend: Backend,
    resolved: spec.Resolved,
    asked: SubmitInfo,
    write: Callable[[RunDir], T],
    schedule: Callable[[T], dict[str, str]],
    group: str | None,
    held: Held,
) -> Submitted:
    from hpctrain.rundir import RunDir, write_json
    from hpctrain.rundir.io import share_run_dir
    from hpctrain.runs.index import Index, Run

    index = index or Index()
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
        state=JobState.PENDING,
        state_at=now,
        reason=SUBMITTING,
    )
    paths = RunDir(run_dir)
    try:
        if group is not None:
            share_run_dir(index.root, run_dir, group)
        paths.spec.write_bytes(spec.dumps(resolved))
        write_json(paths.submit_info, asked)
        written = write(paths)
        if held.signals:  # asked to stop before anything was submitted: stop
            raise KeyboardInterrupt
    except BaseException as err:
        _remove_or_record(index, run, f"the run directory could not be written: {_reason(err)}")
        raise
    index.add(run)  # the intent: from here on the run directory is known, and its job findable
    try:
        job_ids = schedule(written)
    except BaseException as err:
        # A Ctrl-C or a hang-up reaches sbatch too (it shares our process group): it may have
        # died after the controller took the job, which then carries the run id.
        found = _carried_job(backend, run_id) if held.signals else None
        if found is None:
            index.update_states([(run, JobState.SUBMIT_FAILED, _reason(err))])
            if isinstance(err, BackendError):
                return Submitted(run, run.reason)
            raise
        job_ids = {"": found}
    job_id = job_ids.pop("", None)
    more = [msgspec.structs.replace(run, run_id=run_id + key, job_id=job) for key, job in job_ids.items()]
    index.record_job(run, job_id, more)
    return Submitted(run)


# The reason of a run recorded before the scheduler was asked; a run that keeps it past a submit was
# cut short (`hpctrain index check` looks for its job).
SUBMITTING = "being submitted"
HELD_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)


class Held:
    """The signals that arrived while they were held."""

    def __init__(self) -> None:
        self.signals: list[int] = []


def _carried_job(backend: Backend, run_id: str) -> str | None:
    try:
        return backend.jobs_carrying([run_id]).get(run_id)
    except BackendError:
        return None


@contextlib.contextmanager
def held_signals() -> Iterator[Held]:
    """SIGTERM, SIGHUP (a dropped ssh session) and SIGINT wait until the block ends, then act as they
    would have (the previous handlers restored first). Only the main thread can hold signals; elsewhere
    the block runs as it is."""
    held = Held()
    if threading.current_thread() is not threading.main_thread():
        yield held
        return
    previous = {number: signal.getsignal(number) for number in HELD_SIGNALS}
    for number in HELD_SIGNALS:
        signal.signal(number, lambda number, frame: held.signals.append(number))
    try:
        yield held
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        for number in dict.fromkeys(held.signals):
            signal.raise_signal(number)


def _reason(err: BaseException) -> str:
    if isinstance(err, KeyboardInterrupt):
        return "interrupted while submitting (the job may have reached the scheduler: check squeue)"
    return str(err) or type(err).__name__


def _remove_or_record(index: Index, run: Run, why: str) -> None:
    """Nothing was submitted: remove the run directory, or, if that fails too, record why it exists."""
    shutil.rmtree(run.run_dir, ignore_errors=True)
    if run.run_dir.exists():
        run.state, run.reason = JobState.SUBMIT_FAILED, why
        with contextlib.suppress(OSError):  # the original error is the one to report
            index.add(run)
