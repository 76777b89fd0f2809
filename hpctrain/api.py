"""hpctrain's Python API: load, submit and follow jobs and sweeps; the CLI verbs format what it returns.

`import hpctrain` re-exports these names lazily, so the CLI and `import hpctrain` pay nothing for them.
Everything returned is a typed struct of the run-directory contract (RunStatus, Result, MetricLine,
SweepStatus, TrialStatus), never a dict; every failure is an exception of hpctrain.errors.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from hpctrain.errors import BackendError, FunctionFailed, HpctrainError, InputError, SpecError
from hpctrain.scheduler import NAMES  # costs no backend import
from hpctrain.scheduler.base import AFTER_KINDS, AfterKind
from hpctrain.submission import api_edge as edge

if TYPE_CHECKING:
    # Imported where used: `import hpctrain.api` must cost the CLI nothing it does not use.
    from hpctrain import spec
    from hpctrain.report.build import Written
    from hpctrain.rundir import MetricLine, Result, RunDir, RunRecord, SweepRecord
    from hpctrain.site.doctor import Finding
    from hpctrain.site.lookup import SiteEntry
    from hpctrain.spec import FieldDoc
    from hpctrain.submission.submit_path import JobSource, Request
    from hpctrain.sweep.status import SweepStatus, TrialStatus
    from hpctrain.tracking.index import Index
    from hpctrain.tracking.logs import LogMerger
    from hpctrain.tracking.status import RunStatus

__all__ = [
    "AFTER_KINDS",
    "BACKENDS",
    "EXAMPLE_SCRIPTS",
    "AfterKind",
    "BackendError",
    "DoctorReport",
    "FunctionFailed",
    "HpctrainError",
    "InputError",
    "JobSource",
    "NeverRuns",
    "NoLog",
    "NoResult",
    "NothingToReport",
    "Run",
    "SiteDraft",
    "SpecError",
    "Sweep",
    "WaitTimeout",
    "cancel",
    "doctor",
    "draft_site",
    "example_job",
    "example_jobs",
    "example_scripts",
    "fields",
    "find_run",
    "find_runs",
    "find_sweep",
    "list_runs",
    "list_sweeps",
    "load_job",
    "log_chunk",
    "log_tail",
    "ranked",
    "render",
    "run_index",
    "site_folder",
    "site_reference",
    "site_search_path",
    "sites",
    "spec_json",
    "statuses",
    "submit",
    "submit_function",
    "submit_sweep",
    "survey",
    "wait_all",
    "write_report",
]

BACKENDS = NAMES
"""The scheduler backends `backend=` takes: auto ($HPCTRAIN_BACKEND, else slurm), slurm (the Slurm
commands), pyslurm, local (this machine, no Slurm)."""


class WaitTimeout(HpctrainError):
    """`Run.wait` or `Sweep.wait` gave up: the run had not ended within the timeout."""


class NeverRuns(HpctrainError):
    """`Run.wait` or `wait_all` gave up at once: a run is pending and can never run as it is (an
    excluded node list that leaves its partition too few nodes, a dependency that can no longer be
    met). The message is the line `hpctrain status` prints: the cause and what to do."""


class NoResult(HpctrainError):
    """The run has no result (yet): it has not ended, or it failed before writing result.json."""


class NoLog(HpctrainError):
    """The run is tracked but the asked-for log does not exist (yet)."""


def example_jobs() -> dict[str, Path]:
    """The example job specs shipped with hpctrain, by name (submit one by its name)."""
    from hpctrain.spec.resources import example_jobs

    return example_jobs()


EXAMPLE_SCRIPTS = {"function-job": "hpctrain.examples.function_job", "pipeline": "hpctrain.examples.pipeline"}
"""The example Python scripts shipped with hpctrain, by name: the module `python -m` runs."""


def example_scripts() -> dict[str, Path]:
    """The example Python scripts shipped with hpctrain, by name (run one with `python -m MODULE`, the
    module in EXAMPLE_SCRIPTS)."""
    import importlib.util

    found = {}
    for name, module in EXAMPLE_SCRIPTS.items():
        located = importlib.util.find_spec(module)
        if located is not None and located.origin:
            found[name] = Path(located.origin)
    return found


def example_job(name: str) -> Path:
    """The file of the shipped example `name`; SpecError naming the examples when there is none."""
    from hpctrain.spec.resources import job_file

    return job_file(edge.text(name, "example_job"))


def sites(describe: bool = True) -> list[SiteEntry]:
    """Every site profile `site=NAME` can reach (first match per name wins; the others are `shadowed`);
    `describe`: read each profile's description too."""
    from hpctrain.site.lookup import listing

    return listing(describe=edge.flag(describe, "describe"))


def site_search_path() -> list[tuple[str, Path]]:
    """Where site names are looked up, in order: (what sets the folder, the folder)."""
    from hpctrain.site.lookup import search_path

    return search_path()


def fields(what: Literal["job", "site", "files"], under: str = "") -> list[FieldDoc]:
    """The documented fields of the job spec, the site profile or the run directory's files (`under`: a
    file such as result.json, a struct such as Result, or a field prefix such as train.); SpecError when
    nothing matches."""
    from hpctrain import rundir, spec

    edge.text(what, "fields")
    field = edge.text(under, "under")
    if what == "files":
        structs = rundir.file_structs()
        if field in structs:
            kinds, field = structs[field], ""
        else:
            kinds = rundir.file_struct_kinds()
        docs = [row for kind in kinds for row in spec.field_docs(kind, kind.__name__ + ".")]
    elif what in ("job", "site"):
        docs = spec.field_docs(spec.JobSpec if what == "job" else spec.Site)
    else:
        raise InputError(f"fields: {what!r} is not one of job, site, files")
    field = field.rstrip(".")
    rows = [r for r in docs if not field or r.name == field or r.name.startswith(field + ".")]
    if not rows:
        if what == "files":
            missing, listed = "file or field", f"the files: {', '.join(rundir.file_structs())}"
        else:
            missing, listed = "field", f"`hpctrain explain {what}` lists them"
        raise SpecError(f"explain {what}: no {missing} {under!r}; {listed}")
    return rows


def run_index() -> Index:
    """The index of this user's runs (index.jsonl and its archive): check, compact, adopt cut-short
    submits. Warnings about unreadable lines are left to its check."""
    from hpctrain.tracking.index import Index
    from hpctrain.tracking.index_lines import silence_warnings

    silence_warnings()
    return Index()


def spec_json(resolved: spec.Resolved) -> str:
    """The resolved spec as the run directory's spec.json holds it."""
    from hpctrain import spec

    if not isinstance(resolved, spec.Resolved):
        raise InputError(f"spec_json: expected a resolved spec, not {edge.type_name(resolved)}")
    return spec.dumps(resolved).decode()


def load_job(job: JobSource, overrides: Sequence[str] = ()) -> spec.JobSpec:
    """The job as a typed `JobSpec`, with `overrides` (`dotted.key=value`, as `--set` on the command line)
    applied; a path, an example's name, a JobSpec or a mapping. Bad input raises SpecError."""
    from hpctrain.submission.submit_path import load_job as load

    return load(edge.job(job), edge.texts(overrides, "overrides"))[0]


def render(
    job: JobSource,
    site: str,
    overrides: Sequence[str] = (),
    backend: str | None = None,
    check: bool = True,
) -> Request:
    """The resolved spec and the batch script the job would submit (a dry run: nothing is written)."""
    from hpctrain.submission.submit_path import prepare

    job, site, overrides = edge.job(job), edge.site(site), edge.texts(overrides, "overrides")
    return prepare(job, site, overrides, edge.backend(backend), check=edge.flag(check, "check"))


def submit(
    job: JobSource,
    site: str,
    overrides: Sequence[str] = (),
    backend: str | None = None,
    after: Iterable[Run | str] = (),
    after_kind: AfterKind = "afterok",
    check: bool = True,
    from_run: Run | str | None = None,
) -> Run:
    """Validate, render, record and submit the job; its Run handle.

    `site`: a site profile's name or path. `backend`: slurm, pyslurm or local (default $HPCTRAIN_BACKEND,
    else auto). `after`: runs (or Slurm job ids) the job waits for; `after_kind` says for what (a Slurm
    dependency, added to any `dependency` the spec sets). `check`: the entrypoint and path checks.
    `from_run`: an earlier run (or its job id or run id) whose last checkpoint the job starts from, at
    its step, training on to its own train.steps (the same model: entrypoint and train.options; see
    `hpctrain submit --from`). A refusal by the scheduler raises BackendError; the run stays recorded
    as SUBMIT_FAILED.
    """
    from hpctrain.submission.submit_path import submit as submit_run

    job, site, overrides = edge.job(job), edge.site(site), edge.texts(overrides, "overrides")
    backend, check = edge.backend(backend), edge.flag(check, "check")
    waits = _waits(after, edge.text(after_kind, "after_kind"), backend)  # type: ignore[arg-type]
    if from_run is not None and not isinstance(from_run, Run | str):
        raise InputError(f"from_run: expected a Run or a run's key, not {edge.type_name(from_run)}")
    start = from_run.run_id if isinstance(from_run, Run) else from_run
    done = submit_run(
        job, site, overrides, backend, check=check, after=waits, after_kind=after_kind, from_run=start
    )
    if done.error:
        raise BackendError(f"{done.error} (the script and resolved spec are kept in {done.run.run_dir})")
    return Run(done.run)


def _waits(after: object, kind: AfterKind, backend: str | None) -> list[str]:
    """The job ids `after` names (a lone run or string is one), each checked against what is known of
    it: Slurm drops a dependency on a job it has forgotten and starts the job at once, so one that can
    never be met (afterok on a failed run), or on a job nobody knows, is refused here."""
    if isinstance(after, Run | str):
        after = [after]
    if not isinstance(after, Iterable) or isinstance(after, bytes | Mapping):
        raise InputError(f"after: expected runs or job ids, not {edge.type_name(after)}")
    waits = list(after)
    for one in waits:
        if not isinstance(one, Run | str):
            raise InputError(f"after: expected a Run or a job id string, not {edge.type_name(one)} {one!r}")
    if not waits:
        return []
    from hpctrain.submission.submit_path import check_dependencies
    from hpctrain.tracking.index import Index

    index = Index()
    keys = [one for one in waits if isinstance(one, str)]
    found, unknown = index.find(keys) if keys else ([], [])
    by_key = {key: run for run in found for key in (run.job_id, run.run_id)}
    records = [one.record if isinstance(one, Run) else by_key.get(one) for one in waits]
    for one in waits:
        if isinstance(one, Run) and not one.job_id:
            raise InputError(f"after: run {one.run_id} has no job id (its submission failed)")
    tracked = [r for r in records if r is not None]
    check_dependencies(index, tracked, [k for k in unknown if k.isascii() and k.isdigit()], kind, backend)
    pairs = zip(waits, records, strict=True)
    return [r.job_id if r is not None and r.job_id else str(one) for one, r in pairs]


def submit_function(
    fn: Callable[..., Any],
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    *,
    site: str,
    resources: spec.Resources | Mapping[str, Any] | None = None,
    ranks: Literal[0, "all"] = 0,
    name: str | None = None,
    job: Mapping[str, Any] | None = None,
    backend: str | None = None,
    after: Iterable[Run | str] = (),
    after_kind: AfterKind = "afterok",
) -> Run:
    """Run `fn(*args, **kwargs)` in an allocation, as submitit does; `Run.result()` returns its value.

    The call is pickled here with cloudpickle: a function that cannot be (a closure over a lock or an
    open file) is refused with an InputError before anything is submitted. `ranks`: 0 calls it on rank 0
    (the default; with one task, the job's only rank), "all" on every rank, each with torchrun's
    variables (RANK, WORLD_SIZE, MASTER_ADDR...). `resources`: as a job's `resources` (default one task);
    `name`: the job's name (default from the function's); `job`: any other JobSpec fields (env, setup,
    python, time...). A function job is not restarted after a failure unless `job` sets `restart`.
    `backend`, `after` and `after_kind` as for `submit`.
    """
    from hpctrain.rundir.function_call import dump_call
    from hpctrain.submission.submit_path import submit_function as submit_call

    call = dump_call(fn, args, kwargs or {}, ranks)
    data = dict(job or {})
    if name is not None or "name" not in data:
        data["name"] = name or _function_job_name(fn)
    if resources is not None:
        data["resources"] = resources if isinstance(resources, Mapping) else _builtins(resources)
    waits = _waits(after, after_kind, backend)
    done = submit_call(call, site, data, backend, after=waits, after_kind=after_kind)
    if done.error:
        raise BackendError(f"{done.error} (the script and resolved spec are kept in {done.run.run_dir})")
    return Run(done.run)


def _function_job_name(fn: Callable[..., Any]) -> str:
    """`fn-NAME` from the function's name, in the letters a job name may hold."""
    word = re.sub(r"[^A-Za-z0-9_.-]+", "", getattr(fn, "__name__", "")) or "call"
    return f"fn-{word}"[:64]


def _builtins(value: Any) -> Any:
    import msgspec

    return msgspec.to_builtins(value)


def list_runs(keys: Sequence[str] = (), everything: bool = False, limit: int | None = None) -> list[Run]:
    """Tracked runs: those named by job id, run id (or its date-time prefix) or job name (every run of
    it; a lone string is one key; none known: NotTracked; some unknown: a warning on stderr), else the
    recent ones (active, or ended within a day), or with `everything` every run, newest first, at most
    `limit`. Run directories of submits killed before they recorded their run are recorded first, as
    never submitted (only recent ones, unless every run is listed)."""
    from hpctrain.tracking.index import Index
    from hpctrain.tracking.status import select

    keys, everything = edge.texts(keys, "keys"), edge.flag(everything, "everything")
    limit = edge.optional(edge.count, limit, "limit")
    if everything and not keys and limit is not None:
        index = Index()
        index.adopt_unindexed(recent=True)
        return [Run(record) for record in index.runs(limit=limit)]
    return [Run(record) for record in select(keys, everything)][:limit]


def find_runs(keys: Sequence[str]) -> tuple[list[Run], list[str]]:
    """The runs named by job id or run id, and the keys that name no tracked run."""
    from hpctrain.tracking.index import Index

    found, missing = Index().find(edge.texts(keys, "keys"))
    return [Run(record) for record in found], missing


def find_run(key: str) -> Run:
    """The one run a job id or run id names (a job name: its newest run); NotTracked when none."""
    return list_runs([edge.text(key, "find_run")])[0]


class Run:
    """A submitted run: its index record (`record`, the contract's Run struct) and what can be asked of it."""

    def __init__(self, record: RunRecord) -> None:
        self.record = record

    def __repr__(self) -> str:
        return f"Run(job_id={self.job_id!r}, run_id={self.run_id!r}, name={self.name!r})"

    @property
    def job_id(self) -> str | None:
        """The scheduler's job id; None when submission failed."""
        return self.record.job_id

    @property
    def run_id(self) -> str:
        """The run directory's name."""
        return self.record.run_id

    @property
    def name(self) -> str:
        """The job's name."""
        return self.record.name

    @property
    def run_dir(self) -> Path:
        """The run directory: spec, script, logs, metrics, result (docs/run-directory.md)."""
        return self.record.run_dir

    @property
    def started_from(self) -> str | None:
        """The earlier run's checkpoint this run starts from (`submit(..., from_run=)`), in words:
        the folder, its step and run; None for a run that starts afresh."""
        from hpctrain.submission.carry_on import linked

        return linked(self.record.run_dir)

    def status(self) -> RunStatus:
        """One poll (one scheduler query) and the run directory read: state, progress, failures."""
        from hpctrain.tracking.status import reconcile_statuses

        return reconcile_statuses([self.record])[0]

    def wait(
        self, timeout: float | None = None, progress: Callable[[RunStatus], None] | None = None
    ) -> RunStatus:
        """Poll (one batched scheduler query each time, the delay growing from 1 s to 5 s) until the run
        has ended; its last status. `progress` sees every poll's status. WaitTimeout after `timeout`
        seconds (checked at each poll); NeverRuns when the run is pending and can never run as it is."""
        edge.function(progress, "progress")
        return wait_all([self], timeout, None if progress is None else lambda s: progress(s[0]))[0]

    def ended(self) -> bool:
        """Whether the run has ended, after one poll."""
        from hpctrain.tracking.index import Index
        from hpctrain.tracking.poll import ended, poll_and_record

        poll_and_record(Index(), [self.record])
        return ended(self.record)

    def result(self, timeout: float | None = None) -> Result | Any:
        """result.json: the final metrics, steps and times. NoResult when there is none (yet).

        A function job's (`submit_function`): the function's value, once the run has ended (this waits,
        WaitTimeout after `timeout` seconds); FunctionFailed, whose message ends with the traceback from
        the job, when it raised on a rank; NoResult when the job ended without an outcome (killed,
        cancelled, out of memory: see its logs)."""
        from hpctrain.rundir import RunDir, Unreadable, function_call

        root = RunDir(self.run_dir)
        if function_call.is_function_run(root):
            if not self.ended():
                self.wait(timeout)
            done, value = function_call.result(root)
            if not done:
                raise NoResult(
                    f"run {self.run_id} (job {self.job_id}) ended {self.record.state} without the function's "
                    f"value: {value}; its logs: hpctrain logs {self.job_id or self.run_id}"
                )
            return value
        found = root.read_result()
        if found is None:
            if self.ended():
                ended_as = _state_text(self.record)
                raise NoResult(f"run {self.run_id} (job {self.job_id}) ended {ended_as} without a result")
            raise NoResult(f"run {self.run_id} (job {self.job_id}) has no result yet ({self.record.state})")
        if isinstance(found, Unreadable):
            raise NoResult(str(found))
        return found

    def metrics(self) -> list[MetricLine]:
        """Every line of metrics.jsonl as it stands (train, eval, memory, event and rank-time lines), in
        order; lines that cannot be read are left out."""
        from hpctrain import rundir

        root = rundir.RunDir(self.run_dir)
        decoded = (rundir.decode_line(raw, str(root.metrics)) for raw in rundir.whole_lines(root.metrics))
        return [line for line in decoded if not isinstance(line, rundir.Unreadable)]

    def log_path(self, rank: int | None = None, element: int | None = None) -> Path:
        """The batch log, or one rank's log, of the run or of one array element (default: the first);
        a log behind a symbolic link out of the run directory is refused."""
        root = self._log_root(element)
        path = root.batch_log if rank is None else root.rank_log(edge.count(rank, "rank"))
        self.refuse_links([path])
        return path

    def logs(self, rank: int | None = None, element: int | None = None) -> str:
        """The text of the batch log, or of one rank's log; NoLog when it does not exist (yet)."""
        path = self.log_path(rank, element)
        if not path.is_file():
            raise NoLog(self.missing_log(path))
        from hpctrain import rundir

        return b"\n".join(rundir.whole_lines(path)).decode(errors="replace")

    def merged_logs(
        self, rank: int | None = None, node: str | None = None, element: int | None = None
    ) -> LogMerger:
        """Every rank's log (or one rank's, or the ranks' on one node) merged by time, each line prefixed
        `[rank N]`: `drain()` yields what is new."""
        from hpctrain.tracking.logs import LogMerger, rank_logs

        root = self._log_root(element)
        node = edge.optional(edge.text, node, "node")
        self.refuse_links([root.logs, *rank_logs(root).values()])
        return LogMerger(root, None if rank is None else [edge.count(rank, "rank")], node)

    def rank_logs(self, element: int | None = None) -> dict[int, Path]:
        """Every rank's log of the run (or of one array element), by rank."""
        from hpctrain.tracking.logs import rank_logs

        return rank_logs(self._log_root(element))

    def missing_log(self, path: Path) -> str:
        """Why a log cannot be read: its name and the logs that the run does have."""
        from hpctrain.rundir import RunDir

        root = RunDir(self.run_dir)
        present = [root, *(root.element(i) for i in root.elements())]
        names = [str(p.relative_to(root.root)) for where in present for p in where.log_files()]
        return (
            f"no log {path.relative_to(root.root)} yet for job {self.job_id}"
            f" (present: {', '.join(names[:20]) or 'none'})"
        )

    def _log_root(self, element: int | None) -> RunDir:
        from hpctrain.rundir import RunDir

        element = edge.optional(edge.count, element, "element")
        root = RunDir(self.run_dir)
        if element is None and not root.batch_log.exists():
            started = root.elements()
            element = started[0] if started else None
        return root if element is None else root.element(element)

    def refuse_links(self, paths: Iterable[Path]) -> None:
        """A log that is a symbolic link, or lies in a linked folder of the run directory, is an error:
        logs are files of the run, never what a link planted there points to."""
        from hpctrain.rundir import leaves

        for path in paths:
            if why := leaves(self.run_dir, path):
                raise HpctrainError(f"refusing to read {path}: {why}")

    def report(self, out: Path | None = None) -> Written:
        """Figures and report.md of the run (its state polled now; the recorded one if that fails)."""
        import sys

        import msgspec

        from hpctrain.rundir import RunDir
        from hpctrain.tracking.index import Index
        from hpctrain.tracking.poll import ended, poll_and_record

        out = edge.optional(edge.path, out, "out")
        tracked = self.record
        try:
            (polled,) = poll_and_record(Index(), [tracked])
        except HpctrainError as err:
            print(f"hpctrain: warning: state not polled ({err}); showing the recorded one", file=sys.stderr)
        else:
            if polled.info is not None:
                tracked = msgspec.structs.replace(tracked, state=polled.info.state.value)
        return _report_dir(
            RunDir(tracked.run_dir),
            out,
            title=tracked.name,
            state=tracked.state,
            job_id=tracked.job_id or "",
            ended=ended(tracked),
            run_id=tracked.run_id,
        )

    def cancel(self) -> bool:
        """Cancel the run's job (one poll, one scheduler call); False when it had already ended (then
        nothing changes)."""
        return bool(cancel([self]))


# A log's last lines are looked for in at most this many bytes from its end.
MAX_TAIL_BYTES = 64 << 20


def log_tail(path: Path, lines: int) -> list[str]:
    """The last `lines` lines of a log, read from a bounded window at its end."""
    from hpctrain.rundir import TAIL_BYTES, tail_lines

    path, lines = edge.path(path, "path"), edge.count(lines, "lines")
    return tail_lines(path, lines, limit=min(MAX_TAIL_BYTES, max(TAIL_BYTES, lines * 512)))


def log_chunk(path: Path, offset: int) -> bytes | None:
    """The next bounded chunk of a log from `offset` (None or empty: nothing new; a link or FIFO: None)."""
    from hpctrain.rundir import read_at
    from hpctrain.tracking.logs import CHUNK

    path, offset = edge.path(path, "path"), edge.count(offset, "offset")
    return read_at(path, offset, CHUNK)


def wait_all(
    handles: Sequence[Run],
    timeout: float | None = None,
    progress: Callable[[list[RunStatus]], None] | None = None,
    interval: float | None = None,
    goodput: bool = True,
) -> list[RunStatus]:
    """Poll every run (one batched query per poll) until all have ended; their last statuses.
    `progress` sees each poll; WaitTimeout after `timeout` seconds; NeverRuns as soon as a pending
    run can never run as it is (what `hpctrain status` warns of); `interval`: the longest delay;
    `goodput`: the last statuses carry the goodput split."""
    from hpctrain.tracking.status import MIN_INTERVAL_S, wait_until_ended

    handles = edge.handles(handles, Run, "wait_all")
    timeout, interval = (
        edge.optional(edge.seconds, timeout, "timeout"),
        edge.optional(edge.seconds, interval, "interval"),
    )
    edge.function(progress, "progress")
    goodput = edge.flag(goodput, "goodput")
    deadline = None if timeout is None else time.monotonic() + timeout

    def on_poll(statuses: list[RunStatus], done: bool) -> None:
        if progress is not None:
            progress(statuses)
        if not done:
            never = [
                f"job {h.job_id}: {s.blocked.warning()}"
                for h, s in zip(handles, statuses, strict=True)
                if s.blocked is not None and s.blocked.certain
            ]
            if never:
                raise NeverRuns("; ".join(never))
        if not done and deadline is not None and time.monotonic() >= deadline:
            names = ", ".join(f"job {h.job_id} ({s.state})" for h, s in zip(handles, statuses, strict=True))
            raise WaitTimeout(f"not ended after {timeout:g} s: {names}")

    return wait_until_ended([h.record for h in handles], on_poll, interval or MIN_INTERVAL_S, goodput=goodput)


def statuses(handles: Sequence[Run], brief: bool = False, goodput: bool = True) -> list[RunStatus]:
    """One poll of many runs (one scheduler query per backend); `brief`: an ended run that did not fail
    is read no further than its result (the table of many runs); `goodput`: each status carries the
    goodput split (not with `brief`)."""
    from hpctrain.tracking.status import reconcile_statuses

    handles = edge.handles(handles, Run, "statuses")
    brief, goodput = edge.flag(brief, "brief"), edge.flag(goodput, "goodput")
    return reconcile_statuses([h.record for h in handles], brief=brief, goodput=goodput)


def cancel(handles: Sequence[Run]) -> list[Run]:
    """Cancel the runs' jobs (one poll, then one scheduler call per backend); the runs whose cancel was
    asked for. A run that has already ended is left as it is (not in the list): nothing is cancelled,
    nothing recorded."""
    from hpctrain.scheduler import select_backend
    from hpctrain.tracking.index import Index
    from hpctrain.tracking.poll import CANCEL_REQUESTED, ended, poll_and_record

    handles = edge.handles(handles, Run, "cancel")
    index = Index()
    poll_and_record(index, [h.record for h in handles if h.job_id])
    asked = [h for h in handles if h.job_id and not ended(h.record)]
    by_backend: dict[str, list[RunRecord]] = {}
    for handle in asked:
        by_backend.setdefault(handle.record.backend, []).append(handle.record)
    for backend_name, group in by_backend.items():
        select_backend(backend_name).cancel([r.job_id for r in group if r.job_id])
        index.update_states((r, r.state, CANCEL_REQUESTED) for r in group)
    return asked


def _state_text(record: RunRecord) -> str:
    """The run's state as `status` shows it: `CANCELLED (by you)` when who cancelled it is known."""
    from hpctrain.tracking.poll import CANCELLED_BY

    if record.state == "CANCELLED" and record.reason.startswith(CANCELLED_BY):
        return f"{record.state} (by {record.reason.removeprefix(CANCELLED_BY)})"
    return str(record.state)


# ---------------------------------------------------------------------------------------------
# Sweeps
# ---------------------------------------------------------------------------------------------


def submit_sweep(
    job: JobSource,
    site: str,
    overrides: Sequence[str] = (),
    grid: Sequence[str] = (),
    backend: str | None = None,
    **options: Any,
) -> Sweep:
    """Submit the job's sweep (`sweep:` in the spec, plus `grid`: `key=v1,v2`) as job arrays; its handle.
    `options`: sampler, budget, round_size, random, seed, max_parallel, metric, mode, max_trials (as
    `hpctrain sweep`'s flags), and `progress` (told what each round of an optuna sweep did; such a
    sweep runs its rounds before this returns)."""
    from hpctrain.rundir import home
    from hpctrain.sweep import plan

    if not isinstance(job, str | Path):
        raise InputError(f"job: a sweep's job is a path or an example's name, not {edge.type_name(job)}")
    overrides, grid = edge.texts(overrides, "overrides"), edge.texts(grid, "grid")
    edge.function(options.get("progress"), "progress")
    edge.plain_data({k: v for k, v in options.items() if k != "progress"}, "options")
    record = plan.submit(job, edge.site(site), overrides, grid, edge.backend(backend), **options)
    return Sweep(home() / "runs" / record.sweep_id, record)


def list_sweeps(keys: Sequence[str] = (), require: bool = True, by_name: bool = False) -> list[Sweep]:
    """The sweeps named by sweep id (or a prefix, or an array's job id), else every tracked sweep; with
    `by_name`, a key that names none so is a job name: every sweep of that name, newest first. An
    unknown key raises InputError, unless `require` is false (then it is left out)."""
    from hpctrain import rundir
    from hpctrain.sweep import plan
    from hpctrain.tracking.index import Index

    keys, require = edge.texts(keys, "keys"), edge.flag(require, "require")
    by_name = edge.flag(by_name, "by_name")
    index = Index()
    if not keys:
        roots = sorted({r.run_dir for r in index.runs()}, key=str)
        found = [(root, plan.load(root)) for root in roots]
        return [Sweep(root, rec) for root, rec in found if isinstance(rec, plan.SweepRecord)]
    out = []
    for key in keys:
        match = plan.find(index, key)
        named = _sweeps_named(index, key) if match is None and by_name else []
        if match is None and not named:
            if require:
                raise InputError(f"{key} is not a sweep tracked by hpctrain (see `hpctrain sweep status`)")
            continue
        for root, record in [match] if match is not None else named:
            if isinstance(record, rundir.Unreadable):
                raise InputError(str(record))
            out.append(Sweep(root, record))
    return out


def _sweeps_named(index: Index, name: str) -> list[tuple[Path, SweepRecord]]:
    from hpctrain.sweep import plan

    roots = dict.fromkeys(r.run_dir for r in index.runs() if r.name == name)  # newest first
    found = [(root, plan.load(root)) for root in roots]
    return [(root, record) for root, record in found if isinstance(record, plan.SweepRecord)]


def find_sweep(key: str) -> Sweep:
    """The one sweep a sweep id (or an array's job id) names; InputError when none."""
    return list_sweeps([edge.text(key, "find_sweep")])[0]


class Sweep:
    """A submitted sweep: its record (sweep.json: trials, arrays, metric) and its trials' states."""

    def __init__(self, root: Path, record: SweepRecord) -> None:
        self.root = root
        self.record = record

    def __repr__(self) -> str:
        return f"Sweep(sweep_id={self.sweep_id!r}, trials={len(self.record.trials)})"

    @property
    def sweep_id(self) -> str:
        """The sweep's run directory's name."""
        return self.record.sweep_id

    def status(self) -> SweepStatus:
        """Every trial's state, metric and step, from one poll; the best trial so far."""
        return survey([self])[0]

    def trials(self) -> list[TrialStatus]:
        """Every trial, best first (trials without a metric last)."""
        status = self.status()
        return ranked(status.trials, status.mode)

    def best(self) -> TrialStatus | None:
        """The trial with the best metric so far; None while no trial has one."""
        return self.status().best

    def wait(
        self, timeout: float | None = None, progress: Callable[[SweepStatus], None] | None = None
    ) -> SweepStatus:
        """Poll until every trial has ended; the last status. WaitTimeout after `timeout` seconds."""
        from hpctrain.sweep.status import FINAL
        from hpctrain.tracking.status import MIN_INTERVAL_S

        timeout = edge.optional(edge.seconds, timeout, "timeout")
        edge.function(progress, "progress")
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = 1.0
        while True:
            status = self.status()
            if progress is not None:
                progress(status)
            if all(t.state in FINAL for t in status.trials):
                return status
            if deadline is not None and time.monotonic() >= deadline:
                raise WaitTimeout(f"sweep {self.sweep_id} not ended after {timeout:g} s: {status.counts}")
            time.sleep(delay)
            delay = min(MIN_INTERVAL_S, delay * 2)

    def report(self, out: Path | None = None) -> Written:
        """The sweep's report: the metric per parameter (`out` may name that FILE.png), trials, best."""
        from hpctrain.report.sweep import report_sweep

        with _writing(out):
            return report_sweep(self.root, self.record, edge.optional(edge.path, out, "out"))

    def resume(self, progress: Callable[[str], None] | None = None) -> SweepRecord:
        """Carry on an optuna sweep in the foreground: wait for the trials in flight, ask again those that
        were cancelled, and run rounds until its budget is spent; `progress` hears what each round did."""
        from hpctrain.sweep.study import resume

        edge.function(progress, "progress")
        self.record = resume(self.root, progress)
        return self.record

    def cancel(self) -> list[str]:
        """Cancel every array of the sweep (one scheduler call); the array job ids."""
        from hpctrain.scheduler import select_backend
        from hpctrain.tracking.index import Index
        from hpctrain.tracking.poll import CANCEL_REQUESTED

        ids = [c.job_id for c in self.record.arrays if c.job_id]
        select_backend(self.record.backend).cancel(ids)
        index = Index()
        index.update_states((r, r.state, CANCEL_REQUESTED) for r in index.runs() if r.run_dir == self.root)
        return ids


def ranked(trials: Sequence[TrialStatus], mode: str) -> list[TrialStatus]:
    """The trials best first by their metric (`mode` min or max); those without one last, by index."""
    from hpctrain.sweep.status import TrialStatus, rank

    return rank(edge.handles(trials, TrialStatus, "ranked"), edge.text(mode, "mode"))


def survey(handles: Sequence[Sweep]) -> list[SweepStatus]:
    """The status of every sweep given, from one poll."""
    from hpctrain.sweep.status import survey as survey_records

    return survey_records([(h.root, h.record) for h in edge.handles(handles, Sweep, "survey")])


# ---------------------------------------------------------------------------------------------
# Reports
# ---------------------------------------------------------------------------------------------


class DoctorReport:
    """What `doctor` found: the profile's name, every finding (scope, check, PASS/WARN/FAIL/SKIP, detail)
    and the nodes that failed a check."""

    def __init__(self, site: str, findings: list[Finding], bad_nodes: list[str]) -> None:
        self.site = site
        self.findings = findings
        self.bad_nodes = bad_nodes

    @property
    def ok(self) -> bool:
        return not any(f.status == "FAIL" for f in self.findings)


def doctor(
    site: str | Path,
    partition: str | None = None,
    job: bool = True,
    tolerance: float = 0.5,
    timeout: float = 180.0,
) -> DoctorReport:
    """The site profile against the live cluster: accounting, partitions, limits, GRES, node states,
    container runtimes, then (with `job`) a preflight job on the partition's healthy nodes, where a
    node `tolerance` under the median fails. BackendError when the cluster cannot be read."""
    from hpctrain import spec
    from hpctrain.scheduler.slurm.facts import ClusterFacts
    from hpctrain.site import containers
    from hpctrain.site import doctor as checks
    from hpctrain.site.lookup import locate

    partition, job = edge.optional(edge.text, partition, "partition"), edge.flag(job, "job")
    tolerance, timeout = edge.seconds(tolerance, "tolerance"), edge.seconds(timeout, "timeout")
    profile = spec.load_site(locate(edge.site(site)))
    name, _ = profile.partition(partition)
    facts = ClusterFacts.read()
    findings = [*checks.accounting_findings(facts), checks.requeue_finding(profile, facts)]
    findings += checks.node_findings(profile, facts)
    findings += checks.container_findings(profile, containers.detect(facts))
    if job and name in facts.partitions:
        nodes = checks.healthy_nodes(findings, facts.partition_nodes(name))
        report = checks.run_preflight(profile, facts, name, nodes, tolerance, timeout)
        findings += checks.preflight_findings(profile, report, nodes)
    bad = sorted({f.scope for f in findings if f.status == "FAIL" and f.scope in facts.nodes})
    return DoctorReport(profile.name, findings, bad)


class SiteDraft:
    """A site profile read off the live cluster: its data (it loads as a Site), the notes for the
    reviewer, and the YAML text with those notes as comments."""

    def __init__(self, name: str, data: dict[str, Any], notes: list[str], text: str) -> None:
        self.name = name
        self.data = data
        self.notes = notes
        self.text = text


def draft_site(name: str, probe: bool = True, timeout: float = 120.0) -> SiteDraft:
    """A site profile named `name` from what the live cluster reports (partitions, limits, GRES,
    accounts, container runtimes), and with `probe` a job's view of a compute node's network. Nothing
    is written. SpecError for a bad name; BackendError when the cluster cannot be read."""
    from hpctrain import spec
    from hpctrain.scheduler.slurm.facts import ClusterFacts
    from hpctrain.site import containers
    from hpctrain.site.builder import build_site, probe_or_none, render_yaml

    probe, timeout = edge.flag(probe, "probe"), edge.seconds(timeout, "timeout")
    if not re.match(spec.NAME, edge.text(name, "name")):
        raise SpecError(f"init-site: {name!r} is not a site name (letters, digits, . _ -)")
    facts = ClusterFacts.read()
    found, why = (None, "--no-probe") if not probe else probe_or_none(facts, timeout)
    data, notes = build_site(name, facts, found, containers.detect(facts))
    if found is None:
        notes.append(f"Network probe job did not run ({why}).")
    spec.decode(spec.Site, data, f"site {name} read from the cluster")  # what is written must load
    return SiteDraft(name, data, notes, render_yaml(data, notes))


def site_folder() -> Path:
    """The user's own site profiles (~/.config/hpctrain/sites/), where `--site NAME` finds them."""
    from hpctrain.site.lookup import user_folder

    return user_folder()


def site_reference(name: str, written: Path) -> str:
    """What `--site` must say to reach the profile written at `written`: its name where the lookup
    finds that file by it, else its path (shell-quoted)."""
    import shlex

    from hpctrain.site.lookup import locate

    name, written = edge.text(name, "name"), edge.path(written, "written")
    try:
        if locate(name).resolve() == written.resolve():
            return name
    except (SpecError, OSError):
        pass
    return shlex.quote(str(written))


class NothingToReport(HpctrainError):
    """The key names neither a tracked job or sweep nor a run directory."""


def write_report(target: str | Path, out: Path | None = None) -> Written:
    """Figures (PNG) and a one-page summary (report.md) of a run, an array job or a sweep, named by job id,
    run id, sweep id or the path of its run directory; `out`: their folder (default: report/ in the run
    directory). Works on a run still going (a snapshot) and on one that ended; matplotlib draws them."""
    from hpctrain import rundir
    from hpctrain.sweep import plan
    from hpctrain.tracking.index import Index, check_key

    key = target if isinstance(target, str) else str(edge.path(target, "target"))
    out = edge.optional(edge.path, out, "out")
    path = Path(check_key(key))
    if key not in (".", "..") and path.is_dir():
        record = plan.load(path)
        if isinstance(record, plan.SweepRecord):
            return Sweep(path, record).report(out)
        root = rundir.RunDir(path)
        if {rundir.METRICS, rundir.SPEC, rundir.RESULT} & root.names or root.elements():
            return _report_dir(root, out, title=path.name, state="", job_id="", ended=True)
    found = list_sweeps([key], require=False)
    if found:
        return found[0].report(out)
    runs_, _ = Index().find([key])
    if not runs_:
        raise NothingToReport(f"{key} is neither a job, run or sweep tracked by hpctrain nor a run directory")
    return Run(runs_[0]).report(out)


def _report_dir(run: RunDir, out: Path | None, **about: str | bool) -> Written:
    """One run, or the elements of an array job (trials without a sweep) when the root has no metrics."""
    from hpctrain import rundir
    from hpctrain.report.build import FOLDER, Trial, report_run, report_trials
    from hpctrain.report.summary import Subject

    subject = Subject(root=str(run.root), **about)  # type: ignore[arg-type]
    folder = out or run.root / FOLDER
    elements = run.elements()
    with _writing(folder):
        if elements and rundir.METRICS not in run.names:
            trials = [Trial(f"element {i}", run.element(i)) for i in elements]
            return report_trials(trials, subject, folder)
        return report_run(run, subject, folder)


@contextlib.contextmanager
def _writing(out: object) -> Iterator[None]:
    """A report that cannot be written (a folder under /proc, a full disk) is one line naming where."""
    try:
        yield
    except OSError as err:
        where = err.filename or out
        raise HpctrainError(f"report: cannot write {where}: {err.strerror or err}") from None


def __getattr__(name: str) -> Any:
    """The contract's structs, by name, for type hints (`hpctrain.api.RunStatus`); imported on first use."""
    module = _STRUCTS.get(name)
    if module is None:
        raise AttributeError(f"module 'hpctrain.api' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


_STRUCTS: Mapping[str, str] = {
    "Blocked": "hpctrain.scheduler.base",
    "FieldDoc": "hpctrain.spec",
    "JobSource": "hpctrain.submission.submit_path",
    "JobSpec": "hpctrain.spec",
    "JobState": "hpctrain.scheduler.base",
    "NotTracked": "hpctrain.tracking.status",
    "Resources": "hpctrain.spec",
    "Train": "hpctrain.spec",
    "MAX_TRIALS": "hpctrain.spec.sweep",
    "SAMPLERS": "hpctrain.spec.sweep",
    "Resolved": "hpctrain.spec",
    "RunStatus": "hpctrain.tracking.status",
    "Result": "hpctrain.rundir",
    "MetricLine": "hpctrain.rundir",
    "REQUIRED": "hpctrain.spec.docs",
    "SweepStatus": "hpctrain.sweep.status",
    "TrialStatus": "hpctrain.sweep.status",
}
