"""Submit = prepare (the backend's dry run: resolved spec + rendered script), then schedule it: one path
for runs and sweeps, which records every run directory it makes in the index."""

from __future__ import annotations

import contextlib
import copy
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from hpctrain import spec
from hpctrain.errors import InputError
from hpctrain.scheduler import select_backend
from hpctrain.scheduler.base import AFTER_KINDS, AfterKind, BackendError, JobState
from hpctrain.scheduler.render import DoctorJob, mountable, slurm_directive_path
from hpctrain.site import lookup as sites
from hpctrain.spec.resources import job_file
from hpctrain.submission.entry_check import check_job

if TYPE_CHECKING:
    # Imported where a run is recorded: `render` (a dry run) records nothing and starts faster.
    from hpctrain.rundir import RunDir, SubmitInfo
    from hpctrain.scheduler.base import Backend, BatchRequest
    from hpctrain.tracking.index import Index, RunRecord

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
    loaded = spec.decode(spec.JobSpec, spec.apply_overrides(data, overrides or [], origin), origin)
    return spec.with_workdir(loaded, Path.cwd()), origin


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


def can_still_start(state: str, kind: AfterKind) -> bool:
    """Whether a job waiting (`kind`) for a job that ended in `state` may start."""
    if kind == "afterok":
        return state == JobState.COMPLETED.value
    if kind == "afternotok":
        return state != JobState.COMPLETED.value
    return True


def check_dependencies(
    index: Index, tracked: list[RunRecord], untracked: list[str], kind: AfterKind, backend_name: str | None
) -> None:
    """Refuse a dependency that can never be met, before anything is written. Slurm forgets an ended job
    after MinJobAge and then drops a dependency on it: the job would start at once, whatever `kind`
    said. So the tracked runs are polled (one query per backend) and judged by the state they ended
    in, and a job id hpctrain does not track must be one the scheduler knows."""
    from hpctrain.tracking.poll import ended, poll_and_record

    if kind not in AFTER_KINDS:
        raise InputError(f"after: {kind!r} is not one of {', '.join(AFTER_KINDS)}")
    backend = select_backend(backend_name)
    if backend.name == "local":
        return  # it refuses any dependency itself: it starts jobs at once
    poll_and_record(index, tracked)
    for run in tracked:
        if ended(run) and not can_still_start(run.state, kind):
            raise InputError(
                f"after: job {run.job_id} ({run.name}) ended {run.state}, so {kind} can never be met"
                " (Slurm, once it forgets that job, would drop the dependency and start this one at once)"
            )
    if not untracked:
        return
    known = backend.poll(untracked)
    for job_id in untracked:
        info = known.get(job_id)
        if info is None or info.state is JobState.UNKNOWN:
            raise InputError(
                f"after: job {job_id} is neither tracked by hpctrain nor known to the scheduler"
                " (Slurm would drop the dependency and start this job at once)"
            )
        if info.state.terminal and not can_still_start(info.state.value, kind):
            raise InputError(f"after: job {job_id} ended {info.state}, so {kind} can never be met")


class Submitted(msgspec.Struct):
    run: RunRecord
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
    from_run: str | None = None,
    files: Callable[[RunDir], None] | None = None,
) -> Submitted:
    """Record, render and submit. The run directory keeps script and spec even if the scheduler refuses.
    `after`: job ids the job waits for (`after_kind`), as Slurm dependencies. `from_run`: a run whose
    last checkpoint the job starts from (launch/carry_on.py). `files` writes what the job needs into
    its run directory before it is scheduled (a function job's call)."""
    from hpctrain.submission import carry_on

    backend = select_backend(backend_name)
    # Validate before creating anything: a bad spec or an unusable home leaves no half-made run behind.
    resolved = with_dependency(load_and_resolve(job, site, overrides, check), after or [], after_kind)
    start = carry_on.find_origin(from_run, resolved, source_name(job)) if from_run is not None else None

    def write(run: RunDir) -> BatchRequest:
        if start is not None:
            carry_on.link(run, start)
        snapshot_code(resolved, run)
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


def snapshot_code(resolved: spec.Resolved, run: RunDir) -> None:
    """A command job's code snapshot (code.snapshot) into the run directory; says what it copied."""
    if not resolved.job.snapshot:
        return
    from hpctrain.submission import code_snapshot

    taken = code_snapshot.take(Path(resolved.job.workdir or "."), run.code)
    print(f"hpctrain: {taken.line()}", file=sys.stderr)


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
    # The function was pickled whole: no code snapshot of the current folder unless `job` asks for one.
    defaults = {"restart": {"max": 0}, "code": {"snapshot": False}}
    data = {**defaults, **copy.deepcopy(dict(job)), "command": FUNCTION_COMMAND}
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
    from hpctrain.rundir import write_json
    from hpctrain.tracking.index import Index

    index = index or Index()
    # A container job's mounts cannot carry some characters of its run directory: refused before any write.
    mountable(index.root / "runs", resolved.job.container)

    def files(run: RunDir) -> T:
        run.spec.write_bytes(spec.dumps(resolved))
        write_json(run.submit_info, asked)
        return write(run)

    job, site = resolved.job, resolved.site
    return _submit_recorded(index, backend, job.name, site.name, site.share_with_group, files, schedule)


def submit_doctor_job(job: DoctorJob, backend: Backend, index: Index | None = None) -> Submitted:
    """`hpctrain doctor`'s preflight job, by submit_run's path and rules: a run directory recorded in
    the index before the scheduler is asked, the script the backend's `prepare` renders, its `schedule`
    (pyslurm where the site has it). A refusal is returned in Submitted.error."""

    def write(run: RunDir) -> BatchRequest:
        request = backend.prepare(job, run.root)
        request.path.write_text(request.script)
        return request

    group = job.site.share_with_group
    return _submit_recorded(
        index, backend, job.name, job.site.name, group, write, lambda r: {"": backend.schedule(r)}
    )


def _submit_recorded(
    index: Index | None,
    backend: Backend,
    name: str,
    site: str,
    group: str | None,
    write: Callable[[RunDir], T],
    schedule: Callable[[T], dict[str, str]],
) -> Submitted:
    from hpctrain.rundir.io import private_files

    with private_files(group), held_signals() as held:
        return _submit_private(index, backend, name, site, write, schedule, group, held)


def _submit_private(
    index: Index | None,
    backend: Backend,
    name: str,
    site: str,
    write: Callable[[RunDir], T],
    schedule: Callable[[T], dict[str, str]],
    group: str | None,
    held: Held,
) -> Submitted:
    from hpctrain.rundir import RunDir
    from hpctrain.rundir.io import share_run_dir
    from hpctrain.tracking.index import Index, RunRecord

    index = index or Index()
    slurm_directive_path(index.root / "runs")
    run_id, run_dir = index.new_run_dir(name)
    now = time.time()
    run = RunRecord(
        run_id=run_id,
        job_id=None,
        name=name,
        site=site,
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


def submit_more(index: Index, entry: RunRecord, group: str | None, schedule: Callable[[], str]) -> None:
    """A further job of a run that is recorded already (an Optuna sweep's next round), by submit_run's
    rule and under its private files and held signals: its index entry (`entry`, a `+OFFSET` run id in
    the run's directory) is recorded first, then the scheduler asked (`schedule` returns the job id),
    then the job id recorded. Whatever `schedule` raises marks the entry SUBMIT_FAILED, then goes on."""
    from hpctrain.rundir.io import private_files

    entry.job_id, entry.state, entry.reason = None, JobState.PENDING, SUBMITTING
    with private_files(group), held_signals():
        index.add(entry)
        try:
            job_id = schedule()
        except BaseException as err:
            index.update_states([(entry, JobState.SUBMIT_FAILED, _reason(err))])
            raise
        index.record_job(entry, job_id)


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


def _remove_or_record(index: Index, run: RunRecord, why: str) -> None:
    """Nothing was submitted: remove the run directory, or, if that fails too, record why it exists."""
    shutil.rmtree(run.run_dir, ignore_errors=True)
    if run.run_dir.exists():
        run.state, run.reason = JobState.SUBMIT_FAILED, why
        with contextlib.suppress(OSError):  # the original error is the one to report
            index.add(run)
