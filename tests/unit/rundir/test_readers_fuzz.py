"""Fuzz: random bytes and well-formed-but-wrong JSON in every file of a run directory never crash the CLI.

Each example records one run in a fresh index, fills its run directory (and an array element's)
with generated content, then runs `status`, `status --json`, `list` and `logs` in-process: exit
code 0, 1 or 2, no traceback, each within 5 s. `report` (figures of every line) gets the same files
and lines that decode but hold extreme values; it must always write its page (exit 0).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpctrain.rundir import (
    CHECKPOINT_MANIFEST,
    AttemptLine,
    CheckpointManifest,
    EvalLine,
    EventLine,
    FailureReport,
    FileSum,
    HangReport,
    Heartbeat,
    MemoryLine,
    NodeFacts,
    PreflightReport,
    RankTimesLine,
    Result,
    RunDir,
    RunRecord,
    SubmitInfo,
    TrainLine,
    Unreadable,
)
from hpctrain.runtime import checkpoint_folder
from hpctrain.site import doctor
from hpctrain.spec import load_site
from tests.conftest import SITES
from tests.unit.tracked_runs import cli, home_env, track

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)


def wrong_shape(*structs: type) -> st.SearchStrategy[dict[str, object]]:
    """Objects with the structs' own field names (and `kind`) holding values of any JSON type."""
    names = sorted({"kind", *(name for s in structs for name in s.__struct_fields__)})
    kinds = st.sampled_from(["train", "eval", "memory", "event", "ranks", "other"]) | JSON
    return st.dictionaries(st.sampled_from(names), JSON, max_size=8).flatmap(
        lambda d: kinds.map(lambda k: {**d, "kind": k}) if "kind" in d else st.just(d)
    )


def encoded(objects: st.SearchStrategy[object]) -> st.SearchStrategy[bytes]:
    return objects.map(lambda o: json.dumps(o, allow_nan=True).encode())


def content(*structs: type) -> st.SearchStrategy[bytes]:
    return st.one_of(
        st.binary(max_size=300),
        encoded(JSON),
        encoded(wrong_shape(*structs)),
        st.integers(1, 20_000).map(lambda n: b"[" * n),
    )


def lines(*structs: type) -> st.SearchStrategy[bytes]:
    """A JSON-lines file: wrong lines among right-looking ones, maybe without the final newline."""
    one = content(*structs).map(lambda b: b.replace(b"\n", b" "))
    return st.tuples(st.lists(one, max_size=8), st.booleans()).map(
        lambda pair: b"\n".join(pair[0]) + (b"\n" if pair[1] else b"")
    )


SRUN = st.builds(
    lambda node, tasks, what: f"srun: error: {node}: tasks {tasks}: {what}".encode(),
    st.text(min_size=1, max_size=8).filter(lambda t: not any(c.isspace() for c in t)),
    st.from_regex(r"[0-9,\-]{1,40}", fullmatch=True),
    st.text(max_size=30),
)

FILES: dict[str, st.SearchStrategy[bytes]] = {
    "result.json": content(Result),
    "metrics.jsonl": lines(TrainLine, MemoryLine, RankTimesLine, EventLine),
    "failures/rank-0.json": content(FailureReport),
    "failures/0.json": content(FailureReport),
    "metrics/worker-0.jsonl": lines(TrainLine),
    "attempts.jsonl": lines(AttemptLine),
    "exit-codes": st.binary(max_size=100) | st.just(b"999999 0\n"),
    "record.json": content(RunRecord),
    "spec.json": encoded(st.fixed_dictionaries({"job": JSON, "site": JSON})) | st.binary(max_size=50),
    "heartbeats/node-n1.json": content(Heartbeat),
    "heartbeats/node-n2.json": content(Heartbeat),
    "failures/hang.json": content(HangReport),
    "failures/stacks/rank-0.txt": st.binary(max_size=200),
    "logs/batch.log": st.lists(SRUN | st.binary(max_size=80), max_size=6).map(b"\n".join),
    "logs/rank-0.log": st.binary(max_size=200),
    "array-0/metrics.jsonl": lines(TrainLine),
    "array-0/result.json": content(Result),
    "logs/batch-0.log": st.lists(SRUN, max_size=3).map(b"\n".join),
    "logs/node-n1.log": st.binary(max_size=200),
    "submit.json": content(SubmitInfo),
    "preflight.json": content(PreflightReport, NodeFacts),
    "preflight-exclude": st.binary(max_size=50),
    "checkpoints/step-00000010/manifest.json": content(CheckpointManifest, FileSum),
    "failures/attempt-0/rank-0.json": content(FailureReport),
    "requeue.request": st.binary(max_size=30),
    "preempt.flag": st.binary(max_size=10),
    "pids/rank-0": st.binary(max_size=20),
}

STATES = st.sampled_from(["FAILED", "COMPLETED", "RUNNING", "PREEMPTED", "CANCELLED", "SUBMIT_FAILED"])
VERBS = [
    ["status"],
    ["status", "--json"],
    ["status", "local-999999"],
    ["status", "local-999999", "--json"],
    ["list"],
    ["logs", "local-999999"],
    ["logs", "local-999999", "--rank", "0", "-n", "3"],
    ["logs", "local-999999", "--element", "0"],
]


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(
    files=st.fixed_dictionaries({}, optional=FILES),
    directories=st.sets(st.sampled_from(sorted(FILES)), max_size=2),
    state=STATES,
)
def test_no_file_content_crashes_status_list_or_logs(
    files: dict[str, bytes], directories: set[str], state: str
) -> None:
    with tempfile.TemporaryDirectory() as folder:
        home = Path(folder)
        with home_env(home):
            fill(track(home, "local-999999", state), files, directories)
            for verb in VERBS:
                outcome = cli(*verb)
                assert outcome.code in (0, 1, 2), (verb, outcome)
                assert "Traceback" not in outcome.stderr, (verb, outcome.stderr)
                assert outcome.seconds < 5, (verb, outcome.seconds)


def fill(run: RunDir, files: dict[str, bytes], directories: set[str]) -> None:
    """Write the generated files into the run directory; those in `directories` become folders."""
    for name, data in files.items():
        path = run.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if name in directories:
            path.unlink(missing_ok=True)  # record.json exists already
            path.mkdir()
        else:
            path.write_bytes(data)


def report_ok(files: dict[str, bytes], directories: set[str], state: str) -> None:
    """`hpctrain report` of the run: its page written (exit 0), one line per problem, no traceback."""
    with tempfile.TemporaryDirectory() as folder:
        home = Path(folder)
        with home_env(home):
            run = track(home, "local-999999", state)
            fill(run, files, directories)
            outcome = cli("report", "local-999999", "-o", str(home / "out"))
            assert outcome.code == 0, outcome
            assert "Traceback" not in outcome.stderr, outcome.stderr
            assert (home / "out" / "report.md").is_file()


REPORT_SETTINGS = settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)


@REPORT_SETTINGS
@given(
    files=st.fixed_dictionaries({}, optional=FILES),
    directories=st.sets(st.sampled_from(sorted(FILES)), max_size=2),
    state=STATES,
)
def test_no_file_content_crashes_report(files: dict[str, bytes], directories: set[str], state: str) -> None:
    report_ok(files, directories, state)


# Lines that decode (the right kinds and types) but hold what no run writes: huge and negative numbers,
# ragged rank lists, out-of-range stragglers, text that is markup to matplotlib or Markdown.
NUMBER = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False),
    st.integers(-(10**30), 10**30),
    st.integers(10**300, 10**400),
    st.none(),
)
INT = st.integers(-(2**63), 2**63) | st.integers(10**300, 10**400)
TEXT = st.text(max_size=30) | st.sampled_from(["$x^2$", "$", "a|b`<script>", "\x00\n\x1b[31m", "_{x}"])
RANKS = st.lists(st.floats(allow_nan=False) | st.integers(-5, 5), max_size=12)
EXTREME = st.one_of(
    st.builds(TrainLine, step=INT, loss=NUMBER, time=NUMBER, samples_per_s=NUMBER, step_time_s=NUMBER,
              tokens_per_s=NUMBER, mfu=NUMBER, staleness_mean=NUMBER, worker=st.none() | INT),
    st.builds(EvalLine, step=INT, loss=NUMBER, accuracy=NUMBER, time=NUMBER),
    st.builds(EventLine, event=TEXT | st.sampled_from(["checkpoint", "resumed", "failed"]),
              step=st.none() | INT, time=NUMBER, reason=st.none() | TEXT),
    st.builds(MemoryLine, rank=INT, rank_bytes=st.dictionaries(TEXT, INT, max_size=4), peak_mem_mb=NUMBER),
    st.builds(RankTimesLine, step=INT, time=NUMBER, compute_s=RANKS, wait_s=RANKS,
              nodes=st.lists(TEXT, max_size=12), stragglers=st.lists(INT, max_size=4)),
)  # fmt: skip


def jsonl(lines: list[msgspec.Struct]) -> bytes:
    return b"".join(msgspec.json.encode(line) + b"\n" for line in lines)


@REPORT_SETTINGS
@given(
    metrics=st.lists(EXTREME, max_size=40).map(jsonl),
    workers=st.lists(st.builds(TrainLine, step=INT, time=NUMBER, samples_per_s=NUMBER, compute_s=NUMBER,
                               wait_s=NUMBER), max_size=10).map(jsonl),
    state=STATES,
)  # fmt: skip
def test_lines_with_extreme_values_never_crash_report(metrics: bytes, workers: bytes, state: str) -> None:
    report_ok({"metrics.jsonl": metrics, "metrics/worker-3.jsonl": workers}, set(), state)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=content(PreflightReport, NodeFacts)
    | encoded(st.builds(dict, facts=st.lists(wrong_shape(NodeFacts))))
)
def test_any_preflight_report_reads_as_findings_or_one_line(data: bytes) -> None:
    """doctor (on the login node) and the supervisor read preflight.json as written by a job."""
    with tempfile.TemporaryDirectory() as folder:
        run = RunDir(folder)
        run.preflight_report.write_bytes(data)
        report = run.read_preflight()
        assert isinstance(report, PreflightReport | Unreadable)
        found = doctor.preflight_findings(
            load_site(SITES / "local.yaml"),
            report if isinstance(report, PreflightReport) else str(report),
            ["n1"],
        )
        assert found and all(f.status in ("PASS", "WARN", "FAIL") for f in found)
        if isinstance(report, Unreadable):
            assert found[0].status == "FAIL" and "preflight.json: unreadable" in found[0].detail


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=content(CheckpointManifest, FileSum), shard=st.binary(max_size=64))
def test_any_checkpoint_manifest_is_verified_or_refused_in_one_line(data: bytes, shard: bytes) -> None:
    """A checkpoint is loaded only when its manifest decodes and every file matches it."""
    with tempfile.TemporaryDirectory() as folder:
        run = RunDir(folder)
        step = run.checkpoint(5)
        step.mkdir(parents=True)
        (step / "server-0.pt").write_bytes(shard)
        (step / CHECKPOINT_MANIFEST).write_bytes(data)
        seen: list[dict[str, object]] = []
        chosen = checkpoint_folder.newest_good(run.checkpoints, lambda _, **fields: seen.append(fields))
        problem = checkpoint_folder.verify(step)
        assert (chosen is None) == (problem is not None)
        if problem is not None:
            assert "\n" not in problem and seen == [{"path": str(step), "problem": problem}]
