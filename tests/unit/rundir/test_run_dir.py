"""The run-directory contract: every struct round-trips writer -> reader; every reader is total."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpctrain import rundir
from hpctrain.rundir import (
    EvalLine,
    EventLine,
    FailureReport,
    Heartbeat,
    MemoryLine,
    RankBeat,
    Result,
    RunDir,
    RunRecord,
    SpecSummary,
    SubmitInfo,
    TrainLine,
    Unreadable,
    WorkerStats,
)
from hpctrain.rundir import names as rundir_names
from hpctrain.scheduler.base import JobState
from tests.conftest import REPO
from tests.unit.code_strings import code_strings


@pytest.fixture
def run(tmp_path: Path) -> RunDir:
    return RunDir(tmp_path / "run")


def test_paths_of_a_run_and_of_an_array_element(run: RunDir) -> None:
    assert run.result == run.root / "result.json"
    assert run.rank_log(3) == run.root / "logs" / "rank-3.log"
    assert run.failure(2) == run.root / "failures" / "rank-2.json"
    assert run.heartbeat("node1") == run.root / "heartbeats" / "node-node1.json"
    assert run.worker_metrics(1) == run.root / "metrics" / "worker-1.jsonl"
    assert run.pid(0) == run.root / "pids" / "rank-0"
    element = run.element(4)
    assert element.root == run.root / "array-4"
    assert element.batch_log == run.root / "logs" / "batch-4.log"  # Slurm's batch-%a.log
    assert element.rank_log(0) == run.root / "array-4" / "logs" / "rank-0.log"
    for i in (10, 2):
        run.element(i).root.mkdir(parents=True)
    (run.root / "array-x").mkdir()
    assert run.elements() == [2, 10]
    assert run.checkpoint(100) == run.root / "checkpoints" / "step-00000100"
    assert run.rank_stacks(5) == run.root / "failures" / "stacks" / "rank-5.txt"
    assert run.failed_attempt(2) == run.root / "failures" / "attempt-2"
    assert run.hang_report == run.root / "failures" / "hang.json"


FAMILIES = [v for v in vars(rundir_names).values() if isinstance(v, rundir_names.Numbered)]


@given(family=st.sampled_from(FAMILIES), number=st.integers(0, 10**12), other=st.text(max_size=12))
def test_a_name_family_parses_back_its_own_names_only(
    family: rundir_names.Numbered, number: int, other: str
) -> None:
    assert family.number(family.name(number)) == number
    assert family.key(family.name(other)) == (other or None)
    if not (other.isascii() and other.isdigit()):
        assert family.number(family.name(other)) is None
    if family.suffix:
        assert family.number(family.name(number) + ".tmp") is None


# Anything that looks like a file of a run directory: the contract's names are not the only ones
# caught, so a new file spelled outside rundir/ (sweep.json once was) fails too.
FILE_LIKE = re.compile(r"^[\w.+%-]+\.(json|jsonl|log|sbatch|txt|flag|pid|pt|request)$")


def spelled_run_directory_names(
    source: str, names: set[str], prefixes: tuple[str, ...]
) -> list[tuple[int, str]]:
    """(line, text) of each string of the code (not a docstring) that is a run-directory name:
    one of the contract's, one that starts with one of its families' prefixes, or one shaped like a file."""
    return [
        (line, text)
        for line, text in code_strings(source)
        if not any(c.isspace() for c in text)
        and (text in names or text.startswith(prefixes) or FILE_LIKE.match(text))
    ]


def user_script(path: Path) -> bool:
    """An example written as a user writes a script (hpctrain/examples/*_script.py, importing nothing of
    hpctrain): the files it names are its own, not the run directory's."""
    source = path.read_text()
    return (
        path.parent.name == "examples"
        and path.stem.endswith("_script")
        and "import hpctrain" not in source
        and "from hpctrain" not in source
    )


def contract_names() -> tuple[set[str], tuple[str, ...]]:
    names = {
        v for k, v in vars(rundir_names).items() if k.isupper() and isinstance(v, str) and set(v) & set(".-")
    }
    return names, tuple(f.prefix for f in FAMILIES)


def test_no_module_outside_the_contract_spells_a_run_directory_name() -> None:
    names, prefixes = contract_names()
    package = Path(rundir.__file__).resolve().parents[1]
    found = [
        f"{path.relative_to(package)}:{line}: {text!r}"
        for path in sorted(package.rglob("*.py"))
        if "rundir" not in path.relative_to(package).parts and not user_script(path)
        for line, text in spelled_run_directory_names(path.read_text(), names, prefixes)
    ]
    assert found == []


@pytest.mark.parametrize(
    "source",
    ['FILE = "sweep.json"', 'path = root / "trials-final.json"', 'f"job+{offset}.sbatch"', 'x = "rank-"'],
)
def test_the_guard_catches_a_name_the_contract_does_not_list(source: str) -> None:
    assert spelled_run_directory_names(source, *contract_names())


def test_template_names_match_the_paths(run: RunDir) -> None:
    files = rundir.template_files()
    assert files["array_prefix"] + "3" == run.element(3).root.name
    assert run.root / files["exit_codes"] == run.exit_codes and run.root / files["spec"] == run.spec


def test_every_template_name_is_used_by_a_template() -> None:
    """A name no template reads is one more place a rename must reach for nothing."""
    text = "".join(path.read_text() for path in (REPO / "templates").rglob("*.j2"))
    unused = [key for key in rundir.template_files() if f"files.{key} " not in text]
    assert not unused


def test_result_round_trip_with_parameter_server_fields(run: RunDir) -> None:
    run.root.mkdir()
    result = Result(
        step=10,
        steps=10,
        final_loss=0.25,
        eval_accuracy=0.9,
        mode="async",
        staleness_mean=1.5,
        staleness_max=4,
        per_worker={"0": WorkerStats(status="dropped", reason="killed", steps=3, samples=96)},
    )
    run.write_result(result)
    assert run.read_result() == result
    assert [p.name for p in run.root.iterdir()] == ["result.json"]  # no temp file left


def test_every_file_struct_round_trips(run: RunDir) -> None:
    run.root.mkdir()
    report = FailureReport(rank=3, hostname="n2", error_type="RuntimeError", message="boom", where="x.py:1")
    run.write_failure(report)
    assert run.read_failures() == [report]
    assert report.error == "RuntimeError: boom"
    record = RunRecord(
        run_id="r",
        job_id="7",
        name="n",
        site="s",
        backend="slurm",
        submitted_at=1.0,
        state=JobState.RUNNING,
        state_at=2.0,
    )
    run.write_record(record)
    assert run.read_record() == record
    beat = Heartbeat(
        node="node1", time=5.0, ranks={0: RankBeat(12, "train", 5.0), 1: RankBeat(12, "eval", 4.0)}
    )
    run.write_heartbeat(beat)
    assert run.read_heartbeats() == [beat]
    rundir.write_json(run.submit_info, SubmitInfo(job="j.yaml", site="local", overrides=["a=1"]))
    assert run.read_submit_info() == SubmitInfo(job="j.yaml", site="local", overrides=["a=1"])


def test_metrics_lines_round_trip_through_the_tagged_union(run: RunDir) -> None:
    run.root.mkdir()
    lines = [
        rundir.metric_line("event", event="start", step=0, layout="ddp", world_size=4),
        rundir.metric_line("train", step=1, steps=2, loss=0.5, samples_per_s=10.0),
        rundir.metric_line("memory", rank=1, rank_bytes={"params": 10}, peak_mem_mb=2.0),
        rundir.metric_line("eval", step=2, loss=0.4, accuracy=0.8),
        rundir.metric_line("event", event="checkpoint", step=2, something_new=[1, 2]),
    ]
    for line in lines:
        run.append_metric(line)
    assert run.read_metrics() == lines
    assert [type(x) for x in lines] == [EventLine, TrainLine, MemoryLine, EvalLine, EventLine]
    assert lines[-1].detail == {"something_new": [1, 2]}  # an unnamed event field is kept
    with pytest.raises(TypeError):
        rundir.metric_line("train", step=1, no_such_field=1)


def test_worker_metrics_and_exit_codes(run: RunDir) -> None:
    run.worker_metrics_dir.mkdir(parents=True)
    rundir.append_line(run.worker_metrics(0), TrainLine(step=1, worker=0, samples_per_s=5.0))
    rundir.append_line(run.worker_metrics(0), TrainLine(step=2, worker=0, samples_per_s=6.0))
    run.worker_metrics(1).write_text('{"kind":"train","step":"two"}\n')
    found = run.read_worker_metrics()
    assert found[0] == TrainLine(step=2, worker=0, samples_per_s=6.0)
    assert isinstance(found[1], Unreadable)
    run.exit_codes.write_text("12 0\ngarbage\n13 137\n14\n")
    assert [(c.job_id, c.code) for c in run.read_exit_codes()] == [("12", "0"), ("13", "137")]


def test_spec_summary_reads_requeue_and_array(run: RunDir) -> None:
    run.root.mkdir()
    run.spec.write_text('{"job": {"array": "0-1", "preemption": {"requeue": false}}, "site": {}}')
    summary = run.read_spec_summary()
    assert isinstance(summary, SpecSummary) and summary.array == "0-1" and not summary.requeues
    run.spec.write_text('{"job": {}, "site": {"preemption": {"requeue": true}}}')
    assert run.read_spec_summary().requeues  # type: ignore[union-attr]


# Each reader on hostile content: a value or an Unreadable, never an exception.
HOSTILE: list[bytes] = [
    b"",
    b"[1]",
    b"null",
    b'"text"',
    b"\xff\xfe{",
    b'{"step": "n/a", "steps": 3}',
    b'{"rank": "all"}',
    b"[" * 100_000,
    b'{"step": 1, "steps": 2, "nodes": ' + b"[" * 100_000 + b"}",
    b'{"step": 1e400, "steps": 2}',
    b'{"step": 123456789012345678901234567890, "steps": 2}',
    b'{"kind": ["train"]}',
    b'{"step": 1, "steps": 2}' + b" " * 10,
]


@pytest.mark.parametrize("content", HOSTILE, ids=range(len(HOSTILE)))
def test_json_readers_are_total(run: RunDir, content: bytes) -> None:
    run.failures.mkdir(parents=True)
    run.heartbeats.mkdir()
    for path in (run.result, run.record, run.submit_info, run.spec, run.failure(0), run.heartbeat("n")):
        path.write_bytes(content)
    values = [
        run.read_result(),
        run.read_record(),
        run.read_submit_info(),
        run.read_spec_summary(),
        *run.read_failures(),
        *run.read_heartbeats(),
    ]
    assert all(v is None or isinstance(v, msgspec.Struct) for v in values)
    for line in content.split(b"\n"):
        run.metrics.write_bytes(line + b"\n")
        assert all(isinstance(x, msgspec.Struct) for x in run.read_metrics())


def test_a_directory_a_fifo_and_a_huge_file_are_unreadable_not_errors(run: RunDir) -> None:
    run.result.mkdir(parents=True)
    assert "directory" in run.read_result().reason  # type: ignore[union-attr]
    os.mkfifo(run.record)  # opening a FIFO for reading would block forever
    assert isinstance(run.read_record(), Unreadable)
    assert rundir.tail_lines(run.record, 5) == []
    run.failures.mkdir()
    with open(run.failure(0), "wb") as handle:
        handle.truncate(rundir.MAX_JSON_BYTES + 1)
    assert "bytes" in run.read_failures()[0].reason  # type: ignore[union-attr]
    run.metrics.mkdir()
    assert run.read_metrics() == []


def test_missing_files_read_as_none_or_empty(run: RunDir) -> None:
    assert run.read_result() is None and run.read_record() is None
    assert run.read_failures() == [] and run.read_metrics() == [] and run.read_worker_metrics() == {}
    assert run.read_exit_codes() == [] and run.elements() == [] and run.batch_logs() == []


def test_tail_is_bounded_whatever_the_file(run: RunDir, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 40 MB metrics file without a newline took 108 s: now a bounded head and tail are read."""
    run.root.mkdir()
    with open(run.metrics, "wb") as handle:
        handle.write(b'{"kind":"train","step":1}\n')
        handle.write(b"x" * (40 << 20))
    read = {"bytes": 0}

    def counted(reader: Callable[..., bytes]) -> Callable[..., bytes]:
        def wrapper(*args: int) -> bytes:
            data = reader(*args)
            read["bytes"] += len(data)
            return data

        return wrapper

    monkeypatch.setattr(os, "read", counted(os.read))
    monkeypatch.setattr(os, "pread", counted(os.pread))
    lines = run.read_metrics()
    tail = rundir.tail_lines(run.metrics, 40)
    monkeypatch.undo()
    assert 0 < read["bytes"] <= 4 * (rundir.TAIL_BYTES + rundir.HEAD_BYTES)  # of 40 MB
    assert isinstance(lines[0], TrainLine)  # the head still reads
    assert len(tail) == 1 and len(tail[0]) <= rundir.TAIL_BYTES


def test_tail_lines_leaves_out_a_partial_last_line_when_asked(run: RunDir) -> None:
    run.root.mkdir()
    run.metrics.write_text('{"kind":"train","step":1}\n{"kind":"train","st')
    assert rundir.tail_lines(run.metrics, 5, whole_only=True) == ['{"kind":"train","step":1}']
    assert len(rundir.tail_lines(run.metrics, 5)) == 2
    assert [x.step for x in run.read_metrics()] == [1]  # type: ignore[union-attr]


def test_a_long_file_reads_its_head_and_its_tail_once_each(run: RunDir) -> None:
    run.root.mkdir()
    with open(run.metrics, "w") as handle:
        for step in range(100_000):
            handle.write(f'{{"kind":"train","step":{step}}}\n')
    steps = [x.step for x in run.read_metrics(tail=3, head=2)]  # type: ignore[union-attr]
    assert steps == [0, 1, 99_997, 99_998, 99_999]


def test_atomic_writes_never_show_half_a_file(run: RunDir) -> None:
    """Concurrent writers and a reader: every read is a whole Result."""
    import threading

    run.root.mkdir()
    stop = threading.Event()
    errors: list[object] = []

    def write(worker: int) -> None:
        while not stop.is_set():
            run.write_result(
                Result(step=worker, steps=10, per_worker={str(i): WorkerStats() for i in range(50)})
            )

    threads = [threading.Thread(target=write, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    try:
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            found = run.read_result()
            if not (found is None or isinstance(found, Result)):
                errors.append(found)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert errors == []
    assert not [p for p in run.root.iterdir() if p.name != "result.json"]


@pytest.mark.parametrize(
    "text",
    [
        # The first record.json: no run_dir.
        b'{"run_id":"r","job_id":"7","name":"n","site":"s","backend":"slurm","submitted_at":1.0,'
        b'"state":"RUNNING","state_at":2.0,"reason":""}',
        # With run_dir and restarts (null), as the index's copy was written until the one run record.
        b'{"run_id":"r","job_id":null,"name":"n","site":"s","backend":"slurm","submitted_at":1.0,'
        b'"state":"SUBMIT_FAILED","state_at":2.0,"reason":"refused","run_dir":"/x/r","restarts":null}',
    ],
)
def test_record_json_of_earlier_versions_decodes(run: RunDir, text: bytes) -> None:
    run.root.mkdir()
    run.record.write_bytes(text)
    record = run.read_record()
    assert isinstance(record, rundir.RunRecord) and record.run_id == "r" and record.submitted_at == 1.0
    assert record.state in (JobState.RUNNING, JobState.SUBMIT_FAILED)
    assert record.run_dir in (Path(), Path("/x/r")) and record.restarts is None
