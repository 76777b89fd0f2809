"""The run-directory contract: every path of a run, the struct of each file, atomic writers, total readers.

The runtime writes these files and the login-side CLI reads them, both through this package
(torch-free): paths and RunDir here, the structs in ``structs.py``, reading and writing in ``io.py``.
Readers never raise: a file that is missing reads as ``None``, one that does not decode as
:class:`Unreadable` with a one-line reason. Reads are bounded in bytes, so one huge or hostile file
costs the same as a small one.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from hpctrain.rundir.io import (
    FIRST_WINDOW,
    HEAD_BYTES,
    MAX_JSON_BYTES,
    MAX_LINE_BYTES,
    MAX_LISTED,
    TAIL_BYTES,
    append_line,
    decode,
    decode_line,
    head_and_tail,
    list_names,
    metric_line,
    numbered,
    read_json,
    tail_lines,
    whole_lines,
    write_json,
)
from hpctrain.rundir.lines import (
    METRIC_KINDS,
    EvalLine,
    EventLine,
    MemoryLine,
    MetricLine,
    RankTimesLine,
    TrainLine,
)
from hpctrain.rundir.structs import (
    AttemptLine,
    ExitCode,
    FailureReport,
    HangReport,
    Heartbeat,
    RankBeat,
    RankState,
    Record,
    Result,
    SpecSummary,
    SubmitInfo,
    Unreadable,
    WorkerStats,
)

# The file names: each spelled once, in hpctrain/rundir_names.py.
from hpctrain.rundir_names import (
    ARRAY_PREFIX,
    ATTEMPTS,
    BATCH_LOG,
    CHECKPOINTS,
    EXIT_CODES,
    FAILURES,
    FINAL_MODEL,
    HANG_REPORT,
    HEARTBEATS,
    LOCAL_CANCELLED,
    LOCAL_EXIT_CODE,
    LOGS,
    METRICS,
    PIDS,
    PREEMPT_FLAG,
    PREFLIGHT_EXCLUDE,
    PREFLIGHT_REPORT,
    RECORD,
    REQUEUE_REQUEST,
    RESULT,
    SCRIPT,
    SLURM_ARRAY_BATCH_LOG,
    SLURM_NODE_LOG,
    SLURM_PREFLIGHT_LOG,
    SLURM_RANK_LOG,
    SPEC,
    STACKS,
    SUBMIT,
    TENSORBOARD,
    WORKER_METRICS,
    rank_log_name,
    template_files,
)

if TYPE_CHECKING:
    import msgspec

# ---------------------------------------------------------------------------------------------
# The run directory.
# ---------------------------------------------------------------------------------------------


class _File:
    """A path of the run directory as an attribute: ``run.result`` is ``run.root / RESULT``."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, run: RunDir, owner: type | None = None) -> Path:
        return run.root / self.name


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
        names = frozenset(list_names(self.root))
        if self.snapshot:
            self._names = names
        return names

    def __repr__(self) -> str:
        return f"RunDir({str(self.root)!r})"

    def __fspath__(self) -> str:
        return str(self.root)

    # -- paths ---------------------------------------------------------------------------------
    spec = _File(SPEC)
    script = _File(SCRIPT)
    submit_info = _File(SUBMIT)
    record = _File(RECORD)
    metrics = _File(METRICS)
    result = _File(RESULT)
    failures = _File(FAILURES)
    logs = _File(LOGS)
    pids = _File(PIDS)
    exit_codes = _File(EXIT_CODES)
    preempt_flag = _File(PREEMPT_FLAG)
    requeue_request = _File(REQUEUE_REQUEST)
    checkpoints = _File(CHECKPOINTS)
    worker_metrics_dir = _File(WORKER_METRICS)
    heartbeats = _File(HEARTBEATS)
    final_model = _File(FINAL_MODEL)
    local_exit_code = _File(LOCAL_EXIT_CODE)
    local_cancelled = _File(LOCAL_CANCELLED)
    preflight_report = _File(PREFLIGHT_REPORT)
    preflight_exclude = _File(PREFLIGHT_EXCLUDE)
    attempts = _File(ATTEMPTS)
    tensorboard = _File(TENSORBOARD)

    @property
    def hang_report(self) -> Path:
        return self.failures / HANG_REPORT

    @property
    def stacks(self) -> Path:
        return self.failures / STACKS

    def rank_stacks(self, rank: int) -> Path:
        """The watchdog's dump of one rank's Python stacks (py-spy and faulthandler)."""
        return self.stacks / f"rank-{rank}.txt"

    def _file(self, name: str) -> str:
        """A path as a plain string: readers over a thousand runs avoid pathlib's parsing."""
        return f"{self._root}/{name}"

    def failure(self, rank: int | str) -> Path:
        return self.failures / f"rank-{rank}.json"

    def rank_log(self, rank: int | str) -> Path:
        return self.logs / rank_log_name(rank)

    def node_log(self, node: str) -> Path:
        return self.logs / f"node-{node}.log"

    def pid(self, rank: int) -> Path:
        return self.pids / f"rank-{rank}"

    def worker_metrics(self, worker: int | str) -> Path:
        return self.worker_metrics_dir / f"worker-{worker}.jsonl"

    def heartbeat(self, node: str) -> Path:
        return self.heartbeats / f"node-{node}.json"

    @property
    def batch_log(self) -> Path:
        """The batch script's log; an array element's lives in the array's logs/ as batch-N.log."""
        if self.element_of is not None:
            return self.element_of.logs / f"batch-{self.index}.log"
        return self.logs / BATCH_LOG

    def batch_logs(self) -> list[Path]:
        if self.element_of is not None:
            return [self.batch_log]
        return [self.logs / n for n in list_names(self.logs) if n.startswith("batch") and n.endswith(".log")]

    def log_files(self) -> list[Path]:
        return [self.logs / n for n in list_names(self.logs) if n.endswith(".log")]

    def element(self, index: int) -> RunDir:
        return RunDir(
            self.root / f"{ARRAY_PREFIX}{index}", element_of=self, index=index, snapshot=self.snapshot
        )

    def elements(self) -> list[int]:
        """Indices of the array elements that have started (made their folder)."""
        return sorted(i for i, _ in numbered(sorted(self.names), ARRAY_PREFIX))

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

    def write_record(self, record: Record) -> Path:
        return self._write(self.record, record)

    def write_heartbeat(self, beat: Heartbeat) -> Path:
        return self._write(self.heartbeat(beat.node), beat)

    def append_metric(self, line: MetricLine) -> None:
        self._names = None
        append_line(self.metrics, line)

    # -- readers (total) -----------------------------------------------------------------------
    def read_result(self) -> Result | Unreadable | None:
        if self._names is not None and RESULT not in self._names:
            return None
        return read_json(self._file(RESULT), Result)

    def read_spec_summary(self) -> SpecSummary | Unreadable | None:
        return read_json(self.spec, SpecSummary, max_bytes=4 * MAX_JSON_BYTES)

    def read_record(self) -> Record | Unreadable | None:
        return read_json(self.record, Record)

    def read_submit_info(self) -> SubmitInfo | Unreadable | None:
        return read_json(self.submit_info, SubmitInfo)

    def read_failures(self, limit: int = 64) -> list[FailureReport | Unreadable]:
        """Up to `limit` failure reports (a thousand dead ranks tell no more than the first few)."""
        if FAILURES not in self.names:
            return []
        # Only rank-N.json: hang.json and the NCCL dumps live there too.
        names = [n for _, n in numbered(list_names(self.failures), "rank-", ".json")][:limit]
        found = [read_json(self.failures / n, FailureReport) for n in names]
        return [f for f in found if f is not None]

    def read_heartbeats(self, limit: int = MAX_LISTED) -> list[Heartbeat | Unreadable]:
        names = [n for n in list_names(self.heartbeats) if n.endswith(".json")][:limit]
        found = [read_json(self.heartbeats / n, Heartbeat) for n in names]
        return [f for f in found if f is not None]

    def metric_lines(self, head: int = 64, tail: int = 40) -> tuple[list[bytes], list[bytes]]:
        """The first `head` and last `tail` whole lines of metrics.jsonl, undecoded, none in both."""
        if METRICS not in self.names:
            return [], []
        return head_and_tail(self.metrics, head, tail)

    def read_metrics(self, head: int = 64, tail: int = 40) -> list[MetricLine | Unreadable]:
        """The first `head` and the last `tail` whole lines, decoded, in file order (blank ones skipped)."""
        first, last = self.metric_lines(head, tail)
        where = str(self.metrics)
        return [decode_line(line, where) for line in first + last if line.strip()]

    def read_worker_metrics(self) -> dict[int, TrainLine | Unreadable]:
        """The latest line of each parameter-server worker's metrics file."""
        out: dict[int, TrainLine | Unreadable] = {}
        if WORKER_METRICS not in self.names:
            return out
        for worker, name in numbered(list_names(self.worker_metrics_dir), "worker-", ".jsonl"):
            path = self.worker_metrics_dir / name
            lines = tail_lines(path, 1, limit=MAX_LINE_BYTES, whole_only=True)
            latest = decode_line(lines[-1].encode(), str(path)) if lines else None
            if isinstance(latest, TrainLine | Unreadable):
                out[worker] = latest
        return out

    def read_exit_codes(self) -> list[ExitCode]:
        """Every well-formed `JOBID STATUS` line of exit-codes (others are skipped)."""
        out = []
        for line in tail_lines(self.exit_codes, 64, limit=16 << 10):
            parts = line.split()
            if len(parts) == 2 and parts[1].lstrip("-").isdigit():
                out.append(ExitCode(parts[0], parts[1]))
        return out


def file_structs() -> dict[str, tuple[type[msgspec.Struct], ...]]:
    """The struct(s) of each JSON file of a run directory, by its path there (N: a number).

    What `hpctrain explain files` and docs/run-directory.md's field tables show.
    """
    shape = RunDir("")
    return {
        shape.metrics.as_posix(): (TrainLine, EvalLine, MemoryLine, EventLine, RankTimesLine),
        shape.worker_metrics("N").as_posix(): (TrainLine,),
        shape.result.as_posix(): (Result,),
        shape.failure("N").as_posix(): (FailureReport,),
        shape.hang_report.as_posix(): (HangReport,),
        shape.heartbeat("<node>").as_posix(): (Heartbeat,),
        shape.attempts.as_posix(): (AttemptLine,),
        shape.record.as_posix(): (Record,),
        shape.submit_info.as_posix(): (SubmitInfo,),
    }


def file_struct_kinds() -> tuple[type[msgspec.Struct], ...]:
    """Every struct of `file_structs`, once, in its order."""
    return tuple(dict.fromkeys(kind for kinds in file_structs().values() for kind in kinds))


__all__ = [
    "ARRAY_PREFIX",
    "ATTEMPTS",
    "BATCH_LOG",
    "CHECKPOINTS",
    "EXIT_CODES",
    "FAILURES",
    "FINAL_MODEL",
    "FIRST_WINDOW",
    "HANG_REPORT",
    "HEAD_BYTES",
    "HEARTBEATS",
    "LOCAL_CANCELLED",
    "LOCAL_EXIT_CODE",
    "LOGS",
    "MAX_JSON_BYTES",
    "MAX_LINE_BYTES",
    "MAX_LISTED",
    "METRICS",
    "METRIC_KINDS",
    "PIDS",
    "PREEMPT_FLAG",
    "PREFLIGHT_EXCLUDE",
    "PREFLIGHT_REPORT",
    "RECORD",
    "REQUEUE_REQUEST",
    "RESULT",
    "SCRIPT",
    "SLURM_ARRAY_BATCH_LOG",
    "SLURM_NODE_LOG",
    "SLURM_PREFLIGHT_LOG",
    "SLURM_RANK_LOG",
    "SPEC",
    "STACKS",
    "SUBMIT",
    "TAIL_BYTES",
    "TENSORBOARD",
    "WORKER_METRICS",
    "AttemptLine",
    "EvalLine",
    "EventLine",
    "ExitCode",
    "FailureReport",
    "HangReport",
    "Heartbeat",
    "MemoryLine",
    "MetricLine",
    "RankBeat",
    "RankState",
    "RankTimesLine",
    "Record",
    "Result",
    "RunDir",
    "SpecSummary",
    "SubmitInfo",
    "TrainLine",
    "Unreadable",
    "WorkerStats",
    "append_line",
    "decode",
    "decode_line",
    "file_struct_kinds",
    "file_structs",
    "head_and_tail",
    "list_names",
    "metric_line",
    "numbered",
    "rank_log_name",
    "read_json",
    "tail_lines",
    "template_files",
    "whole_lines",
    "write_json",
]
