"""RunDir: every path of one run directory, its typed writers and its total readers."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

# The file names: each spelled once, in hpctrain/rundir/names.py.
from hpctrain.rundir import names as file_names
from hpctrain.rundir.io import (
    MAX_JSON_BYTES,
    MAX_LINE_BYTES,
    MAX_LISTED,
    append_line,
    decode_line,
    head_and_tail,
    list_names,
    numbered,
    read_json,
    tail_lines,
    write_json,
)
from hpctrain.rundir.lines import (
    MetricLine,
    TrainLine,
)
from hpctrain.rundir.names import Numbered
from hpctrain.rundir.structs import (
    ExitCode,
    FailureReport,
    Heartbeat,
    LogProgressState,
    PreflightReport,
    Result,
    RunRecord,
    SpecSummary,
    SubmitInfo,
    Unreadable,
)

if TYPE_CHECKING:
    import msgspec


def home() -> Path:
    """Where hpctrain keeps this user's runs and their index: $HPCTRAIN_HOME, else ~/.hpctrain."""
    return Path(os.environ.get("HPCTRAIN_HOME") or Path.home() / ".hpctrain").expanduser().resolve()


class _File:
    """A path of the run directory as an attribute: ``run.result`` is ``run.root / file_names.RESULT``."""

    def __init__(self, *parts: str) -> None:
        self.name = "/".join(parts)

    def __get__(self, run: RunDir, owner: type | None = None) -> Path:
        return run.root / self.name


class _Member:
    """A numbered path in a folder of the run directory as a method: ``run.rank_log(3)`` is
    ``run.root / LOGS / RANK_LOG.name(3)``."""

    def __init__(self, folder: str, family: Numbered) -> None:
        self.folder = folder
        self.family = family

    def __get__(self, run: RunDir, owner: type | None = None) -> Callable[[int | str], Path]:
        return lambda key: run.root / self.folder / self.family.name(key)


class RunDir:
    """One run directory (or one array element's); every path of it, and its typed files."""

    def __init__(
        self,
        root: Path | str,
        element_of: RunDir | None = None,
        index: int | None = None,
        snapshot: bool = False,
    ) -> None:
        self.root = root if isinstance(root, Path) else Path(root)
        self._root = os.fspath(root)
        self.element_of = element_of
        self.index = index
        self.snapshot = snapshot
        self._names: frozenset[str] | None = None

    @property
    def names(self) -> frozenset[str]:
        """What the directory holds. With `snapshot`, listed once for the object's life: a poll
        over a thousand run directories then skips what is absent without trying to open it."""
        if self._names is not None:
            return self._names
        names = frozenset(list_names(self.root, self.top))
        if self.snapshot:
            self._names = names
        return names

    @property
    def top(self) -> Path:
        """The outermost run directory (an array element's array): its readers follow no link below it."""
        return self.root if self.element_of is None else self.element_of.top

    def __repr__(self) -> str:
        return f"RunDir({str(self.root)!r})"

    def __fspath__(self) -> str:
        return str(self.root)

    # -- paths ---------------------------------------------------------------------------------
    spec = _File(file_names.SPEC)
    trial_env = _File(file_names.TRIAL_ENV)
    script = _File(file_names.SCRIPT)
    submit_info = _File(file_names.SUBMIT)
    record = _File(file_names.RECORD)
    metrics = _File(file_names.METRICS)
    log_progress = _File(file_names.LOG_PROGRESS)
    result = _File(file_names.RESULT)
    failures = _File(file_names.FAILURES)
    logs = _File(file_names.LOGS)
    pids = _File(file_names.PIDS)
    exit_codes = _File(file_names.EXIT_CODES)
    preempt_flag = _File(file_names.PREEMPT_FLAG)
    requeue_request = _File(file_names.REQUEUE_REQUEST)
    grow_back_request = _File(file_names.GROW_BACK_REQUEST)
    checkpoints = _File(file_names.CHECKPOINTS)
    function_call = _File(file_names.FUNCTION, file_names.FUNCTION_CALL)
    function_value = _File(file_names.FUNCTION, file_names.FUNCTION_VALUE)
    worker_metrics_dir = _File(file_names.WORKER_METRICS)
    heartbeats = _File(file_names.HEARTBEATS)
    final_model = _File(file_names.FINAL_MODEL)
    local_exit_code = _File(file_names.LOCAL_EXIT_CODE)
    local_cancelled = _File(file_names.LOCAL_CANCELLED)
    preflight_report = _File(file_names.PREFLIGHT_REPORT)
    preflight_exclude = _File(file_names.PREFLIGHT_EXCLUDE)
    attempts = _File(file_names.ATTEMPTS)
    tensorboard = _File(file_names.TENSORBOARD)
    hang_report = _File(file_names.FAILURES, file_names.HANG_REPORT)
    stacks = _File(file_names.FAILURES, file_names.STACKS)
    sweep = _File(file_names.SWEEP)
    trials_final = _File(file_names.TRIALS_FINAL)
    stopped = _File(file_names.STOPPED)
    code = _File(file_names.CODE)
    nccl_trace = _File(file_names.FAILURES, file_names.NCCL_TRACE)

    failure = _Member(file_names.FAILURES, file_names.RANK_FAILURE)
    function_outcome = _Member(file_names.FUNCTION, file_names.FUNCTION_OUTCOME)
    failed_attempt = _Member(file_names.FAILURES, file_names.FAILED_ATTEMPT)  # an attempt that was retried
    # The watchdog's dump of one rank's Python stacks (py-spy, then faulthandler).
    rank_stacks = _Member(f"{file_names.FAILURES}/{file_names.STACKS}", file_names.RANK_STACKS)
    rank_log = _Member(file_names.LOGS, file_names.RANK_LOG)
    node_log = _Member(file_names.LOGS, file_names.NODE_LOG)
    pid = _Member(file_names.PIDS, file_names.RANK_PID)
    worker_metrics = _Member(file_names.WORKER_METRICS, file_names.WORKER_METRICS_FILE)
    heartbeat = _Member(file_names.HEARTBEATS, file_names.NODE_HEARTBEAT)
    checkpoint = _Member(file_names.CHECKPOINTS, file_names.CHECKPOINT)  # complete once its manifest is in it

    def _file(self, name: str) -> str:
        """A path as a plain string: readers over a thousand runs avoid pathlib's parsing."""
        return f"{self._root}/{name}"

    @property
    def batch_log(self) -> Path:
        """The batch script's log; an array element's lives in the array's logs/ as batch-N.log."""
        if self.element_of is not None:
            return self.element_of.logs / file_names.ARRAY_BATCH_LOG.name(str(self.index))
        return self.logs / file_names.BATCH_LOG

    def batch_logs(self) -> list[Path]:
        if self.element_of is not None:
            return [self.batch_log]
        element_log = file_names.ARRAY_BATCH_LOG
        names = list_names(self.logs, self.top)
        return [self.logs / n for n in names if n == file_names.BATCH_LOG or element_log.key(n) is not None]

    def log_files(self) -> list[Path]:
        return [self.logs / n for n in list_names(self.logs, self.top) if n.endswith(".log")]

    def chunk_script(self, offset: int) -> Path:
        """A sweep's batch script of the array whose first trial is `offset` (the first is job.sbatch)."""
        return self.script if offset == 0 else self.root / file_names.CHUNK_SCRIPT.name(offset)

    def element(self, index: int) -> RunDir:
        folder = self.root / file_names.ARRAY_ELEMENT.name(index)
        return RunDir(folder, element_of=self, index=index, snapshot=self.snapshot)

    def elements(self) -> list[int]:
        """Indices of the array elements that have started (made their folder)."""
        return sorted(i for i, _ in numbered(sorted(self.names), file_names.ARRAY_ELEMENT))

    # -- writers -------------------------------------------------------------------------------
    def _write(self, path: Path, value: msgspec.Struct) -> Path:
        """Every JSON writer: its folder made when it is a subfolder, the listing snapshot dropped."""
        self._names = None
        if path.parent != self.root:
            path.parent.mkdir(parents=True, exist_ok=True)
        return write_json(path, value)

    def write_result(self, result: Result) -> Path:
        return self._write(self.result, result)

    def write_failure(self, report: FailureReport) -> Path:
        return self._write(self.failure(report.rank), report)

    def write_record(self, record: RunRecord) -> Path:
        return self._write(self.record, record)

    def write_heartbeat(self, beat: Heartbeat) -> Path:
        return self._write(self.heartbeat(beat.node), beat)

    def write_preflight(self, report: PreflightReport) -> Path:
        return self._write(self.preflight_report, report)

    def write_log_progress(self, state: LogProgressState) -> Path:
        return self._write(self.log_progress, state)

    def append_metric(self, line: MetricLine) -> None:
        self._names = None
        append_line(self.metrics, line)

    # -- readers (total) -----------------------------------------------------------------------
    def read_result(self) -> Result | Unreadable | None:
        if self._names is not None and file_names.RESULT not in self._names:
            return None
        return read_json(self._file(file_names.RESULT), Result, below=self.top)

    def read_spec_summary(self) -> SpecSummary | Unreadable | None:
        return read_json(self.spec, SpecSummary, max_bytes=4 * MAX_JSON_BYTES, below=self.top)

    def read_preflight(self) -> PreflightReport | Unreadable | None:
        # Every rank's facts: a few hundred bytes each, so a large job's report is megabytes.
        return read_json(
            self.preflight_report, PreflightReport, max_bytes=16 * MAX_JSON_BYTES, below=self.top
        )

    def read_log_progress(self) -> LogProgressState | Unreadable | None:
        if self._names is not None and file_names.LOG_PROGRESS not in self._names:
            return None
        return read_json(self._file(file_names.LOG_PROGRESS), LogProgressState, below=self.top)

    def read_record(self) -> RunRecord | Unreadable | None:
        return read_json(self.record, RunRecord, below=self.top)

    def read_submit_info(self) -> SubmitInfo | Unreadable | None:
        return read_json(self.submit_info, SubmitInfo, below=self.top)

    def read_failures(self, limit: int = 64) -> list[FailureReport | Unreadable]:
        """Up to `limit` failure reports (a thousand dead ranks tell no more than the first few)."""
        if file_names.FAILURES not in self.names:
            return []
        # Only rank-N.json: hang.json and the NCCL dumps live there too.
        names = [n for _, n in numbered(list_names(self.failures, self.top), file_names.RANK_FAILURE)][:limit]
        found = [read_json(self.failures / n, FailureReport, below=self.top) for n in names]
        return [f for f in found if f is not None]

    def read_heartbeats(self, limit: int = MAX_LISTED) -> list[Heartbeat | Unreadable]:
        beats = file_names.NODE_HEARTBEAT
        names = [n for n in list_names(self.heartbeats, self.top) if beats.key(n) is not None][:limit]
        found = [read_json(self.heartbeats / n, Heartbeat, below=self.top) for n in names]
        return [f for f in found if f is not None]

    def metric_lines(self, head: int = 64, tail: int = 40) -> tuple[list[bytes], list[bytes]]:
        """The first `head` and last `tail` whole lines of metrics.jsonl, undecoded, none in both."""
        if file_names.METRICS not in self.names:
            return [], []
        return head_and_tail(self.metrics, head, tail, below=self.top)

    def read_metrics(self, head: int = 64, tail: int = 40) -> list[MetricLine | Unreadable]:
        """The first `head` and the last `tail` whole lines, decoded, in file order (blank ones skipped)."""
        first, last = self.metric_lines(head, tail)
        where = str(self.metrics)
        return [decode_line(line, where) for line in first + last if line.strip()]

    def read_worker_metrics(self) -> dict[int, TrainLine | Unreadable]:
        """The latest line of each parameter-server worker's metrics file."""
        out: dict[int, TrainLine | Unreadable] = {}
        if file_names.WORKER_METRICS not in self.names:
            return out
        folder = self.worker_metrics_dir
        for worker, name in numbered(list_names(folder, self.top), file_names.WORKER_METRICS_FILE):
            path = folder / name
            lines = tail_lines(path, 1, limit=MAX_LINE_BYTES, whole_only=True, below=self.top)
            latest = decode_line(lines[-1].encode(), str(path)) if lines else None
            if isinstance(latest, TrainLine | Unreadable):
                out[worker] = latest
        return out

    def read_exit_codes(self) -> list[ExitCode]:
        """Every well-formed `JOBID STATUS` line of exit-codes (others are skipped)."""
        out = []
        for line in tail_lines(self.exit_codes, 64, limit=16 << 10, below=self.top):
            parts = line.split()
            if len(parts) == 2 and parts[1].lstrip("-").isdigit():
                out.append(ExitCode(parts[0], parts[1]))
        return out
