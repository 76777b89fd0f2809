"""The run-directory contract: every path of a run, the struct of each file, atomic writers, total readers.

The runtime writes these files and the login-side CLI reads them, both through this module (torch-free).
Readers never raise: a file that is missing reads as ``None``, one that does not decode as
:class:`Unreadable` with a one-line reason. Reads are bounded in bytes, so one huge or hostile file
costs the same as a small one.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

import msgspec

# ---------------------------------------------------------------------------------------------
# File names: each spelled here once.
# ---------------------------------------------------------------------------------------------

SPEC = "spec.json"
SCRIPT = "job.sbatch"
SUBMIT = "submit.json"
RECORD = "record.json"
METRICS = "metrics.jsonl"
RESULT = "result.json"
FAILURES = "failures"
LOGS = "logs"
BATCH_LOG = "batch.log"
PIDS = "pids"
EXIT_CODES = "exit-codes"
PREEMPT_FLAG = "preempt.flag"
REQUEUE_REQUEST = "requeue.request"
CHECKPOINTS = "checkpoints"
WORKER_METRICS = "metrics"
HEARTBEATS = "heartbeats"
FINAL_MODEL = "final_model.pt"
LOCAL_EXIT_CODE = "local-exit-code"
LOCAL_CANCELLED = "local-cancelled"
ARRAY_PREFIX = "array-"

# Slurm filename patterns (--output): %t task rank, %n node name, %a array index.
SLURM_RANK_LOG = "rank-%t.log"
SLURM_NODE_LOG = "node-%n.log"
SLURM_ARRAY_BATCH_LOG = "batch-%a.log"

# Bounds of every read: a hostile or runaway file costs no more than this.
MAX_JSON_BYTES = 1 << 20
MAX_LINE_BYTES = 64 << 10
TAIL_BYTES = 256 << 10
MAX_LISTED = 4096


def rank_log_name(rank: int | str) -> str:
    return f"rank-{rank}.log"


def template_files() -> dict[str, str]:
    """The names the batch-script templates use, passed as the render context's ``files``."""
    return {
        "logs": LOGS,
        "spec": SPEC,
        "batch_log": BATCH_LOG,
        "array_batch_log": SLURM_ARRAY_BATCH_LOG,
        "rank_log": SLURM_RANK_LOG,
        "node_log": SLURM_NODE_LOG,
        "array_prefix": ARRAY_PREFIX,
        "preempt_flag": PREEMPT_FLAG,
        "requeue_request": REQUEUE_REQUEST,
        "exit_codes": EXIT_CODES,
    }


# ---------------------------------------------------------------------------------------------
# The structs of each file.
# ---------------------------------------------------------------------------------------------


class Unreadable(msgspec.Struct, frozen=True):
    """A file (or line) that exists but does not decode: shown as one line, never raised."""

    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: unreadable ({self.reason})"


class _Line(msgspec.Struct, kw_only=True, omit_defaults=True, tag_field="kind"):
    time: float | None = None
    elapsed_s: float | None = None


class TrainLine(_Line, tag="train"):
    """A training progress line; the parameter-server fields are set by PS servers and workers."""

    step: int
    steps: int | None = None
    loss: float | None = None
    lr: float | None = None
    samples_per_s: float | None = None
    step_time_s: float | None = None
    peak_mem_mb: float | None = None
    tokens_per_s: float | None = None
    mfu: float | None = None
    mode: str | None = None
    staleness_mean: float | None = None
    staleness_max: int | None = None
    workers_alive: int | None = None
    worker: int | None = None
    version: int | None = None
    compute_s: float | None = None
    wait_s: float | None = None


class EvalLine(_Line, tag="eval"):
    step: int
    loss: float | None = None
    accuracy: float | None = None
    by: str | None = None


class MemoryLine(_Line, tag="memory"):
    """Bytes one rank holds (params, grads, optimizer), after the first optimizer step."""

    rank: int
    rank_bytes: dict[str, int] = {}
    peak_mem_mb: float | None = None


class EventLine(_Line, tag="event"):
    """A moment in the run (start, resumed, checkpoint, preempted, failed, done, worker_dropped...)."""

    event: str
    step: int | None = None
    path: str | None = None
    layout: str | None = None
    world_size: int | None = None
    launcher: str | None = None
    job_id: str | None = None
    restart_count: int | None = None
    requeue: bool | None = None
    wall_time_s: float | None = None
    save_s: float | None = None
    written_s: float | None = None
    problem: str | None = None
    error: str | None = None
    worker: int | None = None
    reason: str | None = None
    detail: dict[str, Any] | None = None
    """Fields this struct has no name for (kept, not lost)."""


MetricLine = TrainLine | EvalLine | MemoryLine | EventLine
METRIC_KINDS: dict[str, type[_Line]] = {
    "train": TrainLine,
    "eval": EvalLine,
    "memory": MemoryLine,
    "event": EventLine,
}


class WorkerStats(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One parameter-server worker at the end of training."""

    status: str = "running"
    reason: str = ""
    steps: int = 0
    samples: int = 0
    samples_per_s: float = 0.0
    loss: float | None = None


class Result(msgspec.Struct, kw_only=True, omit_defaults=True):
    """result.json: how training ended. One shape for every strategy; PS runs also set the PS fields."""

    status: str = "completed"
    step: int
    steps: int
    final_loss: float | None = None
    eval_loss: float | None = None
    eval_accuracy: float | None = None
    wall_time_s: float | None = None
    train_time_s: float | None = None
    samples: int | None = None
    samples_per_s: float | None = None
    step_time_median_s: float | None = None
    layout: str | None = None
    world_size: int | None = None
    mode: str | None = None
    servers: int | None = None
    workers: int | None = None
    nodes: dict[str, list[str]] | None = None
    staleness_mean: float | None = None
    staleness_max: int | None = None
    per_worker: dict[str, WorkerStats] | None = None


class FailureReport(msgspec.Struct, kw_only=True):
    """failures/rank-N.json: who failed, where, and why (the runtime's own error text)."""

    rank: int
    hostname: str = ""
    error_type: str = ""
    message: str = ""
    where: str | None = None
    time: float | None = None

    @property
    def error(self) -> str:
        return f"{self.error_type}: {self.message}" if self.error_type else self.message


class RankBeat(msgspec.Struct):
    step: int
    phase: str
    time: float


class Heartbeat(msgspec.Struct, kw_only=True):
    """heartbeats/node-<name>.json: the last sign of life of every rank on one node."""

    node: str
    time: float
    ranks: dict[int, RankBeat] = {}


class Record(msgspec.Struct, kw_only=True):
    """record.json: the run's own copy of its line in the login node's index."""

    run_id: str
    job_id: str | None
    name: str
    site: str
    backend: str
    submitted_at: float
    state: str
    state_at: float
    reason: str = ""


class SubmitInfo(msgspec.Struct, kw_only=True):
    """submit.json: how the run was submitted, to submit it again."""

    job: str
    site: str
    overrides: list[str] = []
    backend: str = ""
    cwd: str = ""


class ExitCode(msgspec.Struct, frozen=True):
    """One line of exit-codes, appended by the batch script: `JOBID STATUS`."""

    job_id: str
    code: str


# ---------------------------------------------------------------------------------------------
# Writers and readers.
# ---------------------------------------------------------------------------------------------

T = TypeVar("T")
_encoder = msgspec.json.Encoder()
_line_decoder = msgspec.json.Decoder(MetricLine)
_DECODE_ERRORS = (msgspec.DecodeError, msgspec.ValidationError, RecursionError, ValueError, TypeError)


def write_json(path: Path, value: msgspec.Struct) -> Path:
    """Atomically: a unique temp name then a rename, so concurrent writers and readers never see half."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    try:
        tmp.write_bytes(msgspec.json.format(_encoder.encode(value)) + b"\n")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def append_line(path: Path, value: msgspec.Struct) -> None:
    """One write of one whole line: a reader tailing the file sees whole lines or a partial last one."""
    data = _encoder.encode(value) + b"\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        while data:
            data = data[os.write(fd, data) :]
    finally:
        os.close(fd)


def metric_line(kind: str, **fields: Any) -> MetricLine:
    """Build a metrics line from keywords; an event's unnamed keywords go to its ``detail``."""
    cls = METRIC_KINDS.get(kind)
    if cls is None:
        raise ValueError(f"unknown metrics kind {kind!r} (one of {', '.join(METRIC_KINDS)})")
    known = set(cls.__struct_fields__)
    extra = {k: v for k, v in fields.items() if k not in known}
    if extra and cls is not EventLine:
        raise TypeError(f"{kind} lines have no field {', '.join(sorted(extra))}")
    fields = {k: v for k, v in fields.items() if k in known}
    if extra:
        fields["detail"] = {**(fields.get("detail") or {}), **extra}
    fields.setdefault("time", round(time.time(), 3))
    return msgspec.convert(fields, cls, strict=False)  # type: ignore[return-value]


def _open_regular(path: Path) -> tuple[int, int] | str | None:
    """(fd, size) of a regular file, None if absent, else why it cannot be read (never blocks on a FIFO)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as err:
        return err.strerror or type(err).__name__
    try:
        info = os.fstat(fd)
    except OSError as err:
        os.close(fd)
        return err.strerror or type(err).__name__
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        return "a directory, not a file" if stat.S_ISDIR(info.st_mode) else "not a regular file"
    return fd, info.st_size


def read_json(path: Path, shape: type[T], max_bytes: int = MAX_JSON_BYTES) -> T | Unreadable | None:
    """The file decoded as `shape`; None if absent; Unreadable if it is anything but that."""
    opened = _open_regular(path)
    if opened is None:
        return None
    if isinstance(opened, str):
        return Unreadable(str(path), opened)
    fd, size = opened
    try:
        if size > max_bytes:
            return Unreadable(str(path), f"{size} bytes, more than {max_bytes}")
        data = os.read(fd, max_bytes + 1)
    except OSError as err:
        return Unreadable(str(path), err.strerror or type(err).__name__)
    finally:
        os.close(fd)
    return decode(data, shape, str(path))


def decode(data: bytes, shape: type[T], where: str) -> T | Unreadable:
    try:
        return msgspec.json.decode(data, type=shape)
    except _DECODE_ERRORS as err:
        return Unreadable(where, _one_line(err))


def _one_line(err: BaseException) -> str:
    if isinstance(err, RecursionError):
        return "nested too deeply"
    text = str(err).splitlines()[0] if str(err) else type(err).__name__
    return text[:200]


def tail_bytes(path: Path, limit: int = TAIL_BYTES) -> bytes:
    """At most the last `limit` bytes of a regular file (b"" if absent or not a file): one seek, one read."""
    return _tail(path, limit)[0]


def _tail(path: Path, limit: int) -> tuple[bytes, bool]:
    """(the last `limit` bytes, whether the file goes on before them)."""
    opened = _open_regular(path)
    if opened is None or isinstance(opened, str):
        return b"", False
    fd, size = opened
    try:
        start = max(0, size - limit)
        return os.pread(fd, min(limit, size), start), start > 0
    except OSError:
        return b"", False
    finally:
        os.close(fd)


def tail_lines(path: Path, count: int, limit: int = TAIL_BYTES, whole_only: bool = False) -> list[str]:
    """The last `count` lines within the last `limit` bytes; linear in `limit`, whatever the file.

    With `whole_only`, a last line without its newline (a writer mid-append) is left out.
    """
    if count <= 0:
        return []
    data, cut = _tail(path, limit)
    lines = data.split(b"\n")
    if cut:
        lines = lines[1:]  # the window starts inside a line
    if lines and (lines[-1] == b"" or whole_only):
        lines.pop()
    return [line.decode("utf-8", "replace") for line in lines[-count:]]


def head_lines(path: Path, count: int, limit: int = TAIL_BYTES) -> list[str]:
    """The first `count` whole lines within the first `limit` bytes."""
    opened = _open_regular(path)
    if opened is None or isinstance(opened, str):
        return []
    fd, _ = opened
    try:
        data = os.read(fd, limit)
    except OSError:
        return []
    finally:
        os.close(fd)
    lines = data.split(b"\n")[:-1]  # the last piece has no newline (yet, or within the window)
    return [line.decode("utf-8", "replace") for line in lines[:count]]


def decode_lines(lines: list[str], where: str) -> list[MetricLine | Unreadable]:
    out: list[MetricLine | Unreadable] = []
    for line in lines:
        if not line.strip():
            continue
        if len(line) > MAX_LINE_BYTES:
            out.append(Unreadable(where, f"a line of {len(line)} characters"))
            continue
        try:
            out.append(_line_decoder.decode(line))
        except _DECODE_ERRORS as err:
            out.append(Unreadable(where, _one_line(err)))
    return out


def _listdir(folder: Path) -> list[str]:
    try:
        with os.scandir(folder) as entries:
            names = []
            for entry in entries:
                names.append(entry.name)
                if len(names) >= MAX_LISTED:
                    break
            return sorted(names)
    except OSError:
        return []


def _numbered(names: list[str], prefix: str, suffix: str = "") -> Iterator[tuple[int, str]]:
    for name in names:
        middle = name[len(prefix) : len(name) - len(suffix)] if suffix else name[len(prefix) :]
        if name.startswith(prefix) and name.endswith(suffix) and middle.isascii() and middle.isdigit():
            yield int(middle), name


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

    def __init__(self, root: Path | str, element_of: RunDir | None = None, index: int | None = None) -> None:
        self.root = Path(root)
        self.element_of = element_of
        self.index = index

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

    def failure(self, rank: int) -> Path:
        return self.failures / f"rank-{rank}.json"

    def rank_log(self, rank: int | str) -> Path:
        return self.logs / rank_log_name(rank)

    def node_log(self, node: str) -> Path:
        return self.logs / f"node-{node}.log"

    def pid(self, rank: int) -> Path:
        return self.pids / f"rank-{rank}"

    def worker_metrics(self, worker: int) -> Path:
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
        return [self.logs / n for n in _listdir(self.logs) if n.startswith("batch") and n.endswith(".log")]

    def log_files(self) -> list[Path]:
        return [self.logs / n for n in _listdir(self.logs) if n.endswith(".log")]

    def element(self, index: int) -> RunDir:
        return RunDir(self.root / f"{ARRAY_PREFIX}{index}", element_of=self, index=index)

    def elements(self) -> list[int]:
        """Indices of the array elements that have started (made their folder)."""
        return sorted(i for i, _ in _numbered(_listdir(self.root), ARRAY_PREFIX))

    # -- writers -------------------------------------------------------------------------------
    def write_result(self, result: Result) -> Path:
        return write_json(self.result, result)

    def write_failure(self, report: FailureReport) -> Path:
        self.failures.mkdir(parents=True, exist_ok=True)
        return write_json(self.failure(report.rank), report)

    def write_record(self, record: Record) -> Path:
        return write_json(self.record, record)

    def write_heartbeat(self, beat: Heartbeat) -> Path:
        self.heartbeats.mkdir(parents=True, exist_ok=True)
        return write_json(self.heartbeat(beat.node), beat)

    def append_metric(self, line: MetricLine) -> None:
        append_line(self.metrics, line)

    # -- readers (total) -----------------------------------------------------------------------
    def read_result(self) -> Result | Unreadable | None:
        return read_json(self.result, Result)

    def read_record(self) -> Record | Unreadable | None:
        return read_json(self.record, Record)

    def read_submit_info(self) -> SubmitInfo | Unreadable | None:
        return read_json(self.submit_info, SubmitInfo)

    def read_failures(self) -> list[FailureReport | Unreadable]:
        names = [n for n in _listdir(self.failures) if n.endswith(".json")]
        found = [read_json(self.failures / n, FailureReport) for n in names]
        return [f for f in found if f is not None]

    def read_heartbeats(self) -> list[Heartbeat | Unreadable]:
        names = [n for n in _listdir(self.heartbeats) if n.endswith(".json")]
        found = [read_json(self.heartbeats / n, Heartbeat) for n in names]
        return [f for f in found if f is not None]

    def read_metrics(self, tail: int = 40, head: int = 64) -> list[MetricLine | Unreadable]:
        """The first `head` and the last `tail` whole lines, in file order, each line once."""
        data, cut = _tail(self.metrics, TAIL_BYTES)
        if not cut:  # the whole file: head and tail come from one read
            lines = [x.decode("utf-8", "replace") for x in data.split(b"\n")[:-1]]
            chosen = lines if len(lines) <= head + tail else lines[:head] + lines[-tail:]
        else:
            chosen = head_lines(self.metrics, head) + tail_lines(self.metrics, tail, whole_only=True)
        return decode_lines(chosen, str(self.metrics))

    def read_worker_metrics(self) -> dict[int, TrainLine | Unreadable]:
        """The latest line of each parameter-server worker's metrics file."""
        out: dict[int, TrainLine | Unreadable] = {}
        for worker, name in _numbered(_listdir(self.worker_metrics_dir), "worker-", ".jsonl"):
            path = self.worker_metrics_dir / name
            lines = decode_lines(tail_lines(path, 1, whole_only=True), str(path))
            if lines and isinstance(lines[-1], TrainLine | Unreadable):
                out[worker] = lines[-1]
        return out

    def read_exit_codes(self) -> list[ExitCode]:
        """Every well-formed `JOBID STATUS` line of exit-codes (others are skipped)."""
        out = []
        for line in tail_lines(self.exit_codes, 64, limit=16 << 10):
            parts = line.split()
            if len(parts) == 2 and parts[1].lstrip("-").isdigit():
                out.append(ExitCode(parts[0], parts[1]))
        return out
