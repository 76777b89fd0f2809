"""The pyslurm backend: the Backend interface over Slurm's C API, for clusters whose Slurm matches pyslurm."""

from __future__ import annotations

import shutil
import signal as signals
import subprocess
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from hpctrain.scheduler.base import (
    Backend,
    BackendError,
    JobInfo,
    JobState,
    Limits,
    incomplete_arrays,
    merge_accounting,
    merge_component,
)
from hpctrain.scheduler.slurm.blocked import never_runs
from hpctrain.scheduler.slurm.cli import SlurmCliBackend
from hpctrain.scheduler.slurm.facts import expand_hostlist, major_minor, slurm_release
from hpctrain.scheduler.slurm.nodes import HeldJob, held_release, is_dead, scontrol_release
from hpctrain.scheduler.slurm.parse import slurm_state
from hpctrain.spec import memory_mb, time_minutes

if TYPE_CHECKING:
    from hpctrain.rundir import RunDir
    from hpctrain.scheduler.render import BatchOptions

# pyslurm 23.2 introduced the object API this backend uses (JobSubmitDescription, Jobs.load,
# Job.cancel, db.Jobs). The 17.11/18.08 releases on PyPI only have the old dict API
# (pyslurm.job().submit_batch_job), which hpctrain does not drive.
MIN_PYSLURM = (23, 2)

# slurm_errno.h's "Invalid job id specified": what slurm_load_job answers for a job slurmctld does not
# hold (never submitted, or purged after MinJobAge).
ESLURM_INVALID_JOB_ID = 2017

# A poll of at most this many jobs loads each by its id (slurm_load_job, plus pyslurm's own load of
# the steps of a job that has started); beyond it, one query serves them all. pyslurm binds no load
# of several ids nor of one user's jobs, so that query is `squeue --me` (one RPC that slurmctld
# filters to the user's jobs) where squeue is installed, else pyslurm's load of every job slurmctld
# holds, filtered here. Measured on the 25.11 test cluster with 10,000 held jobs of another user
# (docs/benchmarks.md): a job by id costs 3-5 ms, squeue --me about 60 ms, the whole queue about
# 20 us per job held (160-280 ms). By id beats squeue up to about 15 jobs, the whole queue up to
# about 50: each limit sits below its meeting point.
PER_ID_LIMIT = 12
PER_ID_LIMIT_WITHOUT_SQUEUE = 50

SEVERAL_RECORDS = object()
"""What a load by id gives for an array or hetjob that pyslurm cannot load one record of."""

# `scontrol --version` must not hang the backend selector on a login node whose Slurm is broken.
VERSION_TIMEOUT_S = 10.0


# ----------------------------------------------------------------------------------------------
# Is pyslurm usable here?
# ----------------------------------------------------------------------------------------------


def cluster_slurm_version() -> tuple[tuple[int, int] | None, str]:
    """The installed Slurm's (major, minor), from the client tools, with the text it came from."""
    for tool in ("scontrol", "sinfo"):
        if shutil.which(tool) is None:
            continue
        try:
            proc = subprocess.run(
                [tool, "--version"], capture_output=True, text=True, timeout=VERSION_TIMEOUT_S, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as err:
            return None, f"{tool} --version failed: {err}"
        version = major_minor(proc.stdout)
        if version is not None:
            return version, proc.stdout.strip()
    return None, "neither scontrol nor sinfo is on PATH"


def import_pyslurm() -> tuple[ModuleType | None, str]:
    """The pyslurm module, or None and why not."""
    try:
        import pyslurm
    except ModuleNotFoundError as err:
        if err.name == "pyslurm":
            return None, "pyslurm is not installed"
        return None, f"pyslurm failed to import: {err}"
    # A pyslurm built against another libslurm fails to load its extension (ImportError naming
    # libslurm.so.NN), and its import-time slurm_init() can raise when slurm.conf is unreadable.
    except Exception as err:
        return None, f"pyslurm failed to import: {type(err).__name__}: {err}"
    return pyslurm, ""


def pyslurm_version(module: ModuleType) -> str:
    version = getattr(module, "__version__", None)
    if version is None and callable(getattr(module, "version", None)):
        version = module.version()
    return str(version or "unknown")


def available(module: ModuleType | None = None) -> tuple[bool, str]:
    """Whether pyslurm can drive this cluster: importable, new API, and built for this Slurm release."""
    if module is None:
        module, why = import_pyslurm()
        if module is None:
            return False, why
    version = pyslurm_version(module)
    built_for = major_minor(version)
    if built_for is None:
        return False, f"pyslurm reports no usable version ({version!r})"
    if built_for < MIN_PYSLURM or not hasattr(module, "JobSubmitDescription"):
        return False, (
            f"pyslurm {version} has the old pre-23.2 API (pyslurm.job()); hpctrain's pyslurm backend "
            f"needs pyslurm >= {MIN_PYSLURM[0]}.{MIN_PYSLURM[1]} (JobSubmitDescription, Jobs.load)"
        )
    cluster, detail = cluster_slurm_version()
    if cluster is None:
        return False, f"cannot tell this cluster's Slurm version: {detail}"
    if cluster != built_for:
        # A pyslurm release compiles only against the Slurm headers of the same major release.
        return False, (
            f"pyslurm {version} is built for Slurm {slurm_release(built_for)}, this cluster runs "
            f"{detail}; install a pyslurm {slurm_release(cluster)}.x release or use the command-line backend"
        )
    return True, f"pyslurm {version} matches {detail}"


# ----------------------------------------------------------------------------------------------
# Batch options (render.batch_options) -> JobSubmitDescription attributes
# ----------------------------------------------------------------------------------------------
# sbatch reads a script's #SBATCH lines itself; slurmctld never does. Render hands the same options
# to this backend as data, so nothing is parsed back from the script; an option without a
# translation here is refused, never dropped.


@dataclass(frozen=True)
class Option:
    attr: str
    convert: Callable[[str], Any] = str
    flag: Any = None
    """Value when the option is given without one (`--exclusive`); None: a value is required."""


def _signal(value: str) -> dict[str, Any]:
    """sbatch's `[{R|B}:]SIG[@TIME]` in pyslurm's dict form (pyslurm wants `SIGUSR1`, not `USR1`)."""
    flags, _, rest = value.rpartition(":")
    name, _, lead_time = rest.partition("@")
    if name.isdigit():
        number = int(name)
    else:
        name = name.upper()
        name = name if name.startswith("SIG") else f"SIG{name}"
        try:
            number = signals.Signals[name].value
        except KeyError:
            raise ValueError(f"{value!r}: unknown signal {name}") from None
    out: dict[str, Any] = {"signal": number, "batch_only": "B" in flags.upper()}
    if "R" in flags.upper():
        out["allow_reservation_overlap"] = True
    if lead_time:
        out["time"] = int(lead_time)
    return out


EXPEDITE = "expedite"
"""`--requeue=expedite` (Slurm 25.05+): the one option value that pyslurm cannot send."""


def _boolean(value: str) -> bool:
    return value.lower() in ("yes", "true", "1")


def _requeue(value: str) -> bool:
    if value.lower() == EXPEDITE:
        # pyslurm 25.11 sets no EXPEDITED_REQUEUE flag: read as a boolean it would turn requeue off.
        raise ValueError("pyslurm cannot ask for an expedited requeue; sbatch submits such a job")
    return _boolean(value)


OPTIONS: dict[str, Option] = {
    "job-name": Option("name"),
    "output": Option("standard_output"),
    "error": Option("standard_error"),
    "open-mode": Option("log_files_open_mode"),
    "time": Option("time_limit", time_minutes),
    "time-min": Option("time_limit_min", time_minutes),
    "signal": Option("signal", _signal),
    "requeue": Option("is_requeueable", _requeue, flag=True),
    "no-requeue": Option("is_requeueable", _boolean, flag=False),
    "no-kill": Option("kill_on_node_fail", _boolean, flag=False),
    "account": Option("account"),
    "qos": Option("qos"),
    "array": Option("array"),
    "dependency": Option("dependencies"),
    "kill-on-invalid-dep": Option("kill_on_invalid_dependency", _boolean),
    "partition": Option("partitions"),
    "nodes": Option("nodes"),
    "ntasks": Option("ntasks", int),
    "ntasks-per-node": Option("ntasks_per_node", int),
    "cpus-per-task": Option("cpus_per_task", int),
    "gres": Option("gres_per_node"),
    # --gpus-per-node=N and --gres=gpu:N both become tres_per_node gres/gpu:N.
    "gpus-per-node": Option("gres_per_node", lambda v: f"gpu:{v}"),
    "mem": Option("memory_per_node", memory_mb),
    "mem-per-cpu": Option("memory_per_cpu", memory_mb),
    "constraint": Option("constraints"),
    "exclusive": Option("resource_sharing", lambda v: v or "no", flag="no"),
    "exclude": Option("excluded_nodes"),
    "nodelist": Option("required_nodes"),
    "reservation": Option("reservations"),
    "licenses": Option("licenses"),
    "begin": Option("begin_time"),
    "mail-type": Option("mail_types"),
    "mail-user": Option("mail_user"),
    "chdir": Option("working_directory"),
    "comment": Option("comment"),
}


def sbatch_only(batch: BatchOptions) -> str | None:
    """Why sbatch, not pyslurm, must submit this job (which pyslurm 25.11 cannot express), or None."""
    if len(batch) > 1:
        return "a heterogeneous job (pyslurm binds no slurm_submit_batch_het_job)"
    if any(d.option == "requeue" and (d.value or "").lower() == EXPEDITE for d in batch[0]):
        return "--requeue=expedite (pyslurm sets no EXPEDITED_REQUEUE flag)"
    return None


def unsupported_options(batch: BatchOptions) -> list[str]:
    """What in `batch` this backend cannot submit (empty: all of it translates)."""
    return [f"--{d.option}" for component in batch for d in component if d.option not in OPTIONS]


def apply_options(description: Any, batch: BatchOptions) -> None:
    """Set a JobSubmitDescription's attributes from the batch options; later ones win, as in sbatch."""
    problems = unsupported_options(batch)
    if problems:
        raise BackendError(
            "the pyslurm backend cannot translate these batch options: "
            f"{', '.join(problems)}; submit with the command-line backend (sbatch) instead"
        )
    if len(batch) > 1:
        raise BackendError("pyslurm submits no heterogeneous jobs (no slurm_submit_batch_het_job binding)")
    for directive in batch[0]:
        option = OPTIONS[directive.option]
        try:
            value = option.flag if directive.value is None else option.convert(directive.value)
        except ValueError as err:
            raise BackendError(f"{directive.text}: {err}") from None
        setattr(description, option.attr, value)
    if getattr(description, "ntasks", None) is None and getattr(description, "nodes", None):
        # sbatch counts nodes x --ntasks-per-node (one task per node by default) where no --ntasks
        # is given; pyslurm would send 1 task, which slurmctld refuses for a job of several nodes
        # ("Requested node configuration is not available").
        fewest_nodes = int(str(description.nodes).split("-", 1)[0])
        description.ntasks = fewest_nodes * (getattr(description, "ntasks_per_node", None) or 1)


# ----------------------------------------------------------------------------------------------
# The backend
# ----------------------------------------------------------------------------------------------


def elapsed_text(seconds: int | None) -> str:
    """Seconds in squeue's spelling (`M:SS`, `H:MM:SS`, `D-HH:MM:SS`), so status tables look alike."""
    if not seconds:
        return "0:00"
    days, rest = divmod(int(seconds), 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}-{hours:02d}:{minutes:02d}:{secs:02d}"
    if hours:
        return f"{hours}:{minutes:02d}:{secs:02d}"
    return f"{minutes}:{secs:02d}"


def _base_id(job: Any) -> str:
    """Hetjob components and array tasks are reported under the id that submit() returned."""
    for attr in ("heterogeneous_id", "array_id"):
        value = getattr(job, attr, None)
        if value:
            return str(value)
    return str(job.id)


def _exit_code(job: Any) -> str:
    code = getattr(job, "exit_code", None)
    if code is None:
        return ""
    return f"{code}:{getattr(job, 'exit_code_signal', None) or 0}"


def job_info(job: Any, source: str) -> JobInfo:
    """A JobInfo from a pyslurm.Job (slurmctld) or pyslurm.db.Job (slurmdbd): their field names differ."""
    reason = getattr(job, "state_reason", None) or ""
    nodes = getattr(job, "allocated_nodes", None) or getattr(job, "nodelist", None) or ""
    seconds = getattr(job, "run_time", None) or getattr(job, "elapsed_time", None)
    info = JobInfo(
        _base_id(job), slurm_state(job.state), reason="" if reason == "None" else reason,
        exit_code=_exit_code(job), nodes=nodes, elapsed=elapsed_text(seconds), source=source,
        extra={"slurm_state": job.state},
    )  # fmt: skip
    if info.state is JobState.PENDING:
        # Slurm's reason only: judging node lists would cost a partition RPC (the command line's does).
        info.blocked = never_runs(info.job_id, info.reason, None, dict)
    return info


def array_element(job: Any) -> str:
    """An array job's record as squeue names it: `123_4`, or `123_[5-9]` for its still pending
    elements; "" for a job that is no array."""
    array_id = getattr(job, "array_id", None)
    if not array_id:
        return ""
    task = getattr(job, "array_task_id", None)
    if task is not None:
        return f"{array_id}_{task}"
    waiting = getattr(job, "array_tasks_waiting", None)
    if waiting:
        return f"{array_id}_[{waiting}]"
    # pyslurm reads a zero task id as "no value" (None), so element 0 comes without its index.
    return f"{array_id}_0"


def collect(jobs: Iterable[Any], wanted: set[str], source: str) -> dict[str, JobInfo]:
    """The wanted jobs among all loaded ones; components and array tasks merge under their base id."""
    found: dict[str, JobInfo] = {}
    for job in jobs:
        if _base_id(job) in wanted:
            merge_component(found, job_info(job, source), array_element(job))
    return found


class PyslurmBackend(Backend):
    """Submit, poll and cancel through pyslurm; a poll asks slurmctld for the polled jobs only."""

    name = "pyslurm"
    many_by_squeue = True
    """Polls of many jobs ask `squeue --me` where it is installed (see _many); each backend settles
    it once, from PATH, when it is made."""

    def __init__(self, module: ModuleType | None = None) -> None:
        if module is None:
            module, why = import_pyslurm()
            if module is None:
                raise BackendError(f"the pyslurm backend is not usable: {why}")
        self.pyslurm = module
        self.many_by_squeue = self.many_by_squeue and shutil.which("squeue") is not None
        # Polls of up to this many plain jobs load each by its id.
        self.per_id_limit = PER_ID_LIMIT if self.many_by_squeue else PER_ID_LIMIT_WITHOUT_SQUEUE
        # RPCs made, by name: how the contract tests check what a poll costs.
        self.rpc_calls: Counter[str] = Counter()

    def _rpc(self, what: str, call: Callable[[], Any]) -> Any:
        """Count an RPC and turn pyslurm's errors into one-line BackendErrors."""
        self.rpc_calls[what] += 1
        try:
            return call()
        except (ValueError, TypeError) as err:  # pyslurm validates descriptions before sending them
            raise BackendError(f"{what}: {err}") from None
        except Exception as err:
            if isinstance(err, getattr(self.pyslurm, "PyslurmError", ())):
                raise BackendError(f"{what} failed: {err}") from None
            raise

    def submit(self, script: Path, run_dir: Path, batch: BatchOptions | None = None) -> str:
        if batch is None:
            raise BackendError(
                f"the pyslurm backend submits scripts rendered by hpctrain (with their options as data), "
                f"not {script}; submit it with the command-line backend (sbatch)"
            )
        if sbatch_only(batch):
            # sbatch submits what pyslurm cannot express (reading the script's own #SBATCH lines);
            # polls and cancels of the job stay on pyslurm.
            return SlurmCliBackend().submit(script, run_dir, batch)
        # Passing the path (not the text) makes pyslurm read the file itself and send it as the batch
        # script; working_directory stays unset unless --chdir says, so pyslurm uses the current
        # directory, as sbatch does.
        description = self.pyslurm.JobSubmitDescription(script=str(script))
        apply_options(description, batch)
        job_id = self._rpc("submit", description.submit)
        return str(job_id)

    def poll(
        self, job_ids: Iterable[str], array_sizes: Mapping[str, int] | None = None
    ) -> dict[str, JobInfo]:
        wanted = {str(j) for j in job_ids}
        if not wanted:
            return {}
        found = self._from_controller(wanted, set(array_sizes or {}))
        partial = incomplete_arrays(found, array_sizes or {})
        missing = wanted - found.keys()
        if missing or partial:
            for job_id, info in self._from_database(missing | partial).items():
                found[job_id] = merge_accounting(found[job_id], info) if job_id in found else info
        for job_id in wanted - found.keys():
            found[job_id] = JobInfo(
                job_id,
                JobState.UNKNOWN,
                reason="not known to slurmctld; no accounting record",
                source="pyslurm",
            )
        return found

    def _from_controller(self, wanted: set[str], arrays: set[str]) -> dict[str, JobInfo]:
        """The wanted jobs slurmctld still holds: each loaded by its id while they are few, else (and
        for arrays and hetjobs) one query for them all (_many)."""
        one_by_one = wanted - arrays if len(wanted) <= self.per_id_limit else set()
        whole = wanted - one_by_one
        found: dict[str, JobInfo] = {}
        for job_id in sorted(one_by_one):
            job = self._job_or_none(job_id)
            if job is None:
                continue  # slurmctld has forgotten it (or it is no Slurm id): slurmdbd's turn
            if (
                job is SEVERAL_RECORDS
                or getattr(job, "array_id", None)
                or getattr(job, "heterogeneous_id", None)
            ):
                # slurmctld answers an array's or hetjob's id with all of its records, but
                # pyslurm's Job.load keeps only the first.
                whole.add(job_id)
                continue
            found[job_id] = job_info(job, "pyslurm")
        if whole:
            found.update(self._rpc("load_jobs", lambda: self._many(whole)))
        return found

    def _many(self, wanted: set[str]) -> dict[str, JobInfo]:
        """Many jobs (or arrays) in one controller query. pyslurm 25.11 offers only the load of every
        job slurmctld holds, whose cost grows with the whole queue (2.6x squeue's time with 10,000 held
        jobs of others, docs/benchmarks.md); squeue --me asks for this user's jobs alone, filtered by
        slurmctld, so it serves wherever it is installed."""
        if self.many_by_squeue:
            return SlurmCliBackend().own_jobs(wanted)
        return collect(self.pyslurm.Jobs.load().values(), wanted, "pyslurm")

    def _job_or_none(self, job_id: str) -> Any | None:
        """One job from slurmctld (slurm_load_job), None where it holds no job of that id, or
        SEVERAL_RECORDS where pyslurm could not load the one record of an array or hetjob."""
        if not job_id.isdigit():
            return None

        def load() -> Any | None:
            try:
                return self.pyslurm.Job.load(int(job_id))
            except getattr(self.pyslurm, "RPCError", ()) as err:
                if getattr(err, "errno", None) == ESLURM_INVALID_JOB_ID:
                    return None
                raise
            except KeyError:
                # pyslurm 25.11 files the steps it loads with a job under the job's own id; an
                # array's or hetjob's id also brings the steps of its other elements or components.
                return SEVERAL_RECORDS

        return self._rpc("load_job", load)

    def _from_database(self, missing: set[str]) -> dict[str, JobInfo]:
        """Jobs that slurmctld has purged (MinJobAge), from slurmdbd in one query; none without accounting."""
        ids = [int(j) for j in missing if j.isdigit()]
        if not ids:
            return {}
        db = self.pyslurm.db
        try:
            jobs = self._rpc("db_load_jobs", lambda: db.Jobs.load(db.JobFilter(ids=ids)))
        except BackendError:
            return {}
        # db.Jobs is a list in some pyslurm releases and a cluster-keyed map in others.
        return collect(jobs.values() if hasattr(jobs, "values") else jobs, missing, "pyslurm-db")

    def jobs_carrying(self, run_ids: Iterable[str]) -> dict[str, str]:
        # A rare lookup (`index check` after a submit was cut short): the command line's, which reads
        # the comment from squeue and sacct.
        return SlurmCliBackend().jobs_carrying(run_ids)

    def cancel(self, job_ids: Iterable[str]) -> None:
        # pyslurm has no batch cancel: one slurm_kill_job RPC per job, as scancel sends.
        for job_id in job_ids:
            if not str(job_id).isdigit():
                raise BackendError(f"cancel: {job_id!r} is not a Slurm job id")
            job = self.pyslurm.Job(int(job_id))
            self._rpc("cancel", job.cancel)

    def limits(self) -> Limits:
        # pyslurm's configuration and association objects differ between its releases; a sweep
        # asks once, so the command line's answer serves.
        return SlurmCliBackend().limits()

    def release_held(self, held: Iterable[tuple[RunDir, JobInfo]]) -> list[str]:
        released = []
        for run, info in held:
            changes = held_release(run, info, lambda job_id=info.job_id: self._held(job_id), self._dead)
            if changes is None:
                continue
            if changes["required"] == []:
                # Dropping a pin takes an empty ReqNodeList (slurm_update_job reads NULL as "no
                # change"), and pyslurm sends an empty list or "" as NULL: the pin would stay beside
                # the new exclusion and the job never start (BadConstraints). scontrol sends "".
                scontrol_release(info.job_id, changes)
                released.append(info.job_id)
                continue
            description = self.pyslurm.JobSubmitDescription(begin_time="now")
            if changes["excluded"] is not None:
                description.excluded_nodes = changes["excluded"]
            if changes["required"] is not None:
                description.required_nodes = changes["required"]
            job = self.pyslurm.Job(int(info.job_id))
            try:
                self._rpc("modify", lambda job=job, d=description: job.modify(d))
            except BackendError:
                continue  # the next poll tries again, as scontrol's failure is left for it
            released.append(info.job_id)
        return released

    def _held(self, job_id: str) -> HeldJob:
        job = self._rpc("load_job", lambda: self.pyslurm.Job.load(int(job_id)))
        return HeldJob(
            submitted_at=float(getattr(job, "submit_time", None) or 0),
            starts_at=float(getattr(job, "start_time", None) or 0),
            excluded=_node_list(getattr(job, "excluded_nodes", None)),
            required=_node_list(getattr(job, "required_nodes", None)),
        )

    def _dead(self, nodes: list[str]) -> list[str]:
        known = self._rpc("load_nodes", self.pyslurm.Nodes.load)
        states = {name: str(getattr(node, "state", "")) for name, node in known.items()}
        return [node for node in nodes if is_dead(states.get(node, "DOWN"))]

    def test_only(self, script: Path) -> str:
        # pyslurm wraps no slurm_job_will_run.
        raise BackendError(
            "pyslurm has no test-only submission (no slurm_job_will_run binding); "
            "use the command-line backend for --test-only"
        )


def _node_list(value: Any) -> list[str]:
    """pyslurm gives node lists as a list or as Slurm's text (`node[1-2]`), depending on its release."""
    if not value:
        return []
    return list(value) if isinstance(value, list | tuple) else expand_hostlist(str(value))
