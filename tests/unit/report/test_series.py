"""report.series: every line of a run read by kind, counted problems instead of exceptions, `finite`."""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from hpctrain import rundir
from hpctrain.report.series import MAX_MAGNITUDE, Problems, decode_many, finite, read_run
from hpctrain.rundir import RunDir, TrainLine
from tests.unit.report_runs import T0, write_run


def kinds_in(path: Path) -> dict[str, int]:
    """How many lines of each kind a metrics file holds, counted with the json module."""
    counts: dict[str, int] = {}
    for text in path.read_text().splitlines():
        kind = json.loads(text)["kind"]
        counts[kind] = counts.get(kind, 0) + 1
    return counts


def test_every_line_of_a_run_lands_in_its_kind(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", intervals=30, ranks=4, workers=2)
    counts = kinds_in(run.metrics)
    series = read_run(run)
    assert len(series.train) == counts["train"]
    assert len(series.evals) == counts["eval"]
    assert len(series.events) == counts["event"]
    assert len(series.ranks) == counts["ranks"]
    assert sorted(series.memory) == [0, 1, 2, 3]
    assert series.lines == sum(counts.values())
    assert sorted(series.workers) == [0, 1] and all(len(lines) == 30 for lines in series.workers.values())
    assert [(a.attempt, a.event) for a in series.attempts] == [
        (0, "start"),
        (0, "end"),
        (1, "start"),
        (1, "end"),
    ]
    assert series.problems.counts == {}


def test_start_time_and_restarts(tmp_path: Path) -> None:
    series = read_run(write_run(tmp_path / "run", intervals=30))
    assert series.start_time == T0
    assert [e.event for e in series.restarts] == ["resumed"]
    assert series.restarts[0].restart_count == 1


def test_an_empty_directory_is_an_empty_series(tmp_path: Path) -> None:
    series = read_run(RunDir(tmp_path))
    assert series.lines == 0 and not series.train and series.start_time is None
    assert series.problems.lines() == []


def test_unreadable_lines_are_counted_with_the_first_reason_and_the_rest_is_read(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", intervals=10)
    good = len(read_run(run).train)
    with run.metrics.open("a") as out:
        out.write("not json\n")
        out.write('{"kind":"train","step":"ten"}\n')
        out.write('{"kind":"train","step":500,"loss":0.5}\n')
    series = read_run(run)
    assert len(series.train) == good + 1 and series.train[-1].step == 500
    assert series.problems.counts == {rundir.METRICS: 2}
    (line,) = series.problems.lines()
    assert line.startswith(f"{rundir.METRICS}: 2 unreadable (")


def test_a_worker_file_holding_another_kind_of_line_is_a_problem(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", intervals=5, workers=1)
    with run.worker_metrics(0).open("a") as out:
        out.write('{"kind":"event","event":"start","step":0}\n')
    series = read_run(run)
    assert len(series.workers[0]) == 5
    where = f"{rundir.WORKER_METRICS}/worker-0.jsonl"
    assert series.problems.counts == {where: 1}
    assert "EventLine where worker lines are train lines" in series.problems.first[where]


def test_problems_count_per_file_and_keep_the_first_reason() -> None:
    problems = Problems()
    problems.add("a", "first")
    problems.add("a", "second")
    problems.add("b", "other")
    assert problems.lines() == ["a: 2 unreadable (first)", "b: 1 unreadable (other)"]


def test_the_cached_column_is_built_once(tmp_path: Path) -> None:
    series = read_run(write_run(tmp_path / "run", intervals=5))
    first = series.column("train", "loss")
    assert series.column("train", "loss") is first
    assert first.tolist() == [line.loss for line in series.train]


@given(st.one_of(st.floats(), st.integers(), st.booleans(), st.text(max_size=3), st.none()))
def test_finite_is_a_float_within_the_magnitude_or_none(value: object) -> None:
    found = finite(value)
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if number and not math.isnan(value) and abs(value) <= MAX_MAGNITUDE:  # type: ignore[arg-type]
        assert found == float(value)  # type: ignore[arg-type]
    else:
        assert found is None


LINE = st.one_of(
    st.builds(
        lambda step, loss: json.dumps({"kind": "train", "step": step, "loss": loss}).encode(),
        st.integers(0, 10**6),
        st.floats(-1e6, 1e6),
    ),
    st.sampled_from(
        [b"{", b"[1,2]", b'{"kind":"nope"}', b"{}{}", b'{"kind":"train","step":1}{"kind":"train"}']
    ),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(LINE, max_size=20))
def test_decoding_a_batch_gives_what_decoding_each_line_gives(batch: list[bytes]) -> None:
    problems, alone = Problems(), Problems()
    together = decode_many(batch, "m", problems)
    one_by_one = [x for raw in batch for x in decode_many([raw], "m", alone)]
    assert together == one_by_one
    assert problems.counts == alone.counts
    valid = sum(1 for raw in batch if raw.startswith(b'{"kind": "train"'))
    assert len(together) == valid and all(isinstance(x, TrainLine) for x in together)


def test_a_run_read_while_a_line_is_half_written_leaves_that_line_out() -> None:
    with tempfile.TemporaryDirectory() as folder:
        run = write_run(Path(folder) / "run", intervals=5)
        whole = read_run(run).lines
        with run.metrics.open("a") as out:
            out.write('{"kind":"train","step":99')
        assert read_run(run).lines == whole
