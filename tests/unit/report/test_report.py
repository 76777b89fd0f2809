"""`hpctrain report` on made-up run directories: every figure, the straggler in the heat map, the summary
page, total reading of every line, and no torch. Real runs: tests/integration/test_report_cluster.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hpctrain import rundir
from hpctrain.report.columns import segments
from hpctrain.report.series import read_run
from hpctrain.rundir import RunDir
from tests.conftest import REPO
from tests.unit.report_runs import add_rank_times, write_run
from tests.unit.tracked_runs import Outcome, cli, home_env, track

pytest.importorskip("matplotlib", reason="hpctrain report draws with matplotlib (the test extra has it)")

FIGURES = {
    "report-loss.png",
    "report-throughput.png",
    "report-ranks.png",
    "report-memory.png",
    "report-ps.png",
}


def png(path: Path) -> bool:
    return path.is_file() and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 5000


def test_every_figure_and_the_summary_of_a_run_with_a_requeue_a_straggler_and_workers(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", intervals=120, workers=3)
    outcome = cli("report", str(run.root), "-o", str(tmp_path / "out"))
    assert outcome.code == 0, outcome.stderr
    written = {p.name for p in (tmp_path / "out").iterdir()}
    assert written == FIGURES | {"report.md"}
    assert all(png(tmp_path / "out" / name) for name in FIGURES)
    page = (tmp_path / "out" / "report.md").read_text()
    assert "rank 3 on node2" in page and "| restarts / requeues | 1 (resumed at step 600) |" in page
    assert (
        "RuntimeError: rank 2 lost" in page
        and "| attempts (attempts.jsonl) | 2: rank_failure, completed |" in page
    )
    for name in FIGURES:
        assert f"]({name})" in page
    assert "figure: " in outcome.stdout and "report.md" in outcome.stdout


def test_the_slowed_rank_is_the_hottest_row_of_the_heat_map(tmp_path: Path) -> None:
    from hpctrain.report.ranks import rank_matrices

    series = read_run(write_run(tmp_path, intervals=60, ranks=8, slow_rank=5))
    relative, share, steps = rank_matrices(series)
    slow = [i for i, step in enumerate(steps) if step > 300]  # the rank is slow in the second half
    assert len(slow) > 10 and relative[:, slow].mean(axis=1).argmax() == 5
    assert relative[5, slow].min() > 1.3
    assert share[:, slow].mean(axis=1).argmin() == 5  # everyone else waits for it


def test_a_resumed_run_is_drawn_as_segments_that_never_fold_back(tmp_path: Path) -> None:
    series = read_run(write_run(tmp_path, intervals=100))
    parts = segments(series.train)
    assert len(parts) == 2 and len(series.restarts) == 1
    for first, end in parts:
        steps = [line.step for line in series.train[first:end]]
        assert steps == sorted(steps)


def test_a_run_that_has_not_written_anything_gets_a_page_and_no_figures(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with home_env(home):
        run = track(home, "local-1", "PENDING")
        (run.root / "spec.json").write_text("{}")
        outcome = cli("report", "local-1")
    assert outcome.code == 0, outcome.stderr
    page = (run.root / "report" / "report.md").read_text()
    assert "metrics.jsonl has no lines yet" in page and "snapshot" in page
    assert not list((run.root / "report").glob("*.png"))


def test_unknown_target_is_one_line(tmp_path: Path) -> None:
    with home_env(tmp_path):
        outcome = cli("report", "no-such-job")
    assert outcome.code == 1 and "neither a job, run or sweep" in outcome.stderr
    assert "Traceback" not in outcome.stderr


def test_heat_map_from_rank_times_added_to_a_plain_run(tmp_path: Path) -> None:
    """The path the integration test takes with a real run's metrics: `ranks` lines added afterwards."""
    run = write_run(tmp_path / "run", intervals=40, slow_rank=None)
    lines = run.metrics.read_bytes().splitlines()
    run.metrics.write_bytes(b"\n".join(x for x in lines if b'"kind":"ranks"' not in x) + b"\n")
    assert (
        add_rank_times(run, slow_rank=2, from_step=100) == len(read_run(run).train) > 40
    )  # a restart replays
    from hpctrain.report.ranks import rank_matrices

    relative, _, steps = rank_matrices(read_run(run))
    assert relative[:, 15:].mean(axis=1).argmax() == 2 and steps[0] == 10


def test_whole_lines_reads_every_line_in_chunks_and_leaves_out_a_partial_last(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rundir.io, "READ_CHUNK", 7)  # many chunk boundaries inside lines
    path = tmp_path / "f"
    path.write_bytes(b"one\ntwo two\n\nthree three three\nfour (being written)")
    assert list(rundir.whole_lines(path)) == [b"one", b"two two", b"", b"three three three"]
    assert list(rundir.whole_lines(path, max_bytes=40)) == [b"", b"three three three"]  # from inside line 2
    assert list(rundir.whole_lines(tmp_path / "absent")) == []
    os.mkfifo(tmp_path / "fifo")
    assert list(rundir.whole_lines(tmp_path / "fifo")) == []  # never blocks on a FIFO


def test_runaway_line_is_kept_to_its_head_and_reads_as_unreadable(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    good = b'{"kind":"train","step":1,"loss":1.0}\n'
    run.metrics.write_bytes(good + b"x" * (3 * rundir.MAX_LINE_BYTES) + b"\n" + good)
    series = read_run(run)
    assert len(series.train) == 2 and series.problems.counts == {"metrics.jsonl": 1}


def test_report_imports_neither_torch_nor_does_any_other_verb_import_matplotlib(tmp_path: Path) -> None:
    write_run(tmp_path / "run", intervals=20, workers=1)
    code = (
        "import sys\n"
        "from hpctrain.cli.main import build_parser, main\n"
        "build_parser()\n"  # every verb's arguments, as completion builds them
        "assert 'matplotlib' not in sys.modules, 'a verb imported matplotlib'\n"
        f"assert main(['report', {str(tmp_path / 'run')!r}]) == 0\n"
        "assert 'matplotlib' in sys.modules and 'torch' not in sys.modules, 'report imported torch'\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_a_requeue_that_resumes_at_its_own_step_splits_the_curve_at_the_restart() -> None:
    """A preemption checkpoints where it stops, so the steps keep growing: the time of the `resumed`
    line is what ends the segment (no line is drawn across the wait in the queue)."""
    from hpctrain.rundir import EventLine, TrainLine

    train = [TrainLine(step=s, loss=1.0, time=t) for s, t in ((10, 1.0), (20, 2.0), (30, 90.0), (40, 91.0))]
    assert segments(train, [EventLine(event="resumed", step=20, time=89.0)]) == [(0, 2), (2, 4)]
    assert segments(train) == [(0, 4)]
    assert segments(train, [EventLine(event="resumed", time=None)]) == [(0, 4)]


def _report_with(monkeypatch: pytest.MonkeyPatch, cores: int, run: RunDir, out: Path) -> Outcome:
    """`hpctrain report RUN -o OUT` as if the machine had `cores` cores (1: drawn without forking)."""
    from hpctrain.report import parallel

    monkeypatch.setattr(parallel, "cores", lambda: cores)
    return cli("report", str(run.root), "-o", str(out))


def test_figures_drawn_in_forked_processes_are_those_drawn_in_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = write_run(tmp_path / "run", intervals=80, workers=2)
    for cores in (1, 3):
        outcome = _report_with(monkeypatch, cores, run, tmp_path / f"cores-{cores}")
        assert outcome.code == 0, outcome.stderr
    serial, forked = tmp_path / "cores-1", tmp_path / "cores-3"
    assert {p.name for p in serial.iterdir()} == {p.name for p in forked.iterdir()} == FIGURES | {"report.md"}
    for name in FIGURES:
        assert (serial / name).read_bytes() == (forked / name).read_bytes(), name

    def page(folder: Path) -> list[str]:
        return [line for line in (folder / "report.md").read_text().splitlines() if "; written " not in line]

    assert page(serial) == page(forked)


class Unpicklable(Exception):
    def __init__(self, reason: str, extra: int) -> None:  # pickle calls it with `reason` only
        super().__init__(reason)


@pytest.mark.parametrize(
    ("error", "line"),
    [
        (ValueError("a\nbad value"), "hpctrain: error: unexpected ValueError: a bad value"),
        (Unpicklable("not sent whole", 1), "unexpected FigureFailed: Unpicklable: not sent whole"),
    ],
)
def test_a_figure_that_raises_in_a_drawing_process_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: Exception, line: str
) -> None:
    from hpctrain.report import ranks

    parent = os.getpid()
    where = tmp_path / "pid"

    def broken(series: object, path: Path, title: str) -> Path:
        where.write_text(str(os.getpid()))
        raise error

    monkeypatch.setattr(ranks, "heatmap_figure", broken)
    outcome = _report_with(monkeypatch, 2, write_run(tmp_path / "run", intervals=20), tmp_path / "out")
    assert int(where.read_text()) != parent  # it failed in the child
    assert outcome.code == 1 and line in outcome.stderr
    assert outcome.stderr.count("\n") == 1 and "Traceback" not in outcome.stderr


def test_a_drawing_process_that_dies_is_an_error_not_a_hang(tmp_path: Path) -> None:
    import signal

    from hpctrain.report.parallel import DrawerDied, Job, draw_all, shares

    parent = os.getpid()

    def die() -> Path:
        if os.getpid() != parent:  # never in pytest's own process
            os.kill(os.getpid(), signal.SIGKILL)
        raise AssertionError("the job that dies was drawn in the parent")

    jobs = [Job("here", lambda: tmp_path, weight=2), Job("killed", die), Job("also killed", lambda: None)]
    assert shares(jobs, 2) == [[0], [1, 2]]  # the first share is the parent's
    with pytest.raises(DrawerDied, match=r"figures killed, also killed ended \(signal 9\)"):
        draw_all(jobs, workers=2)
    assert draw_all(jobs[:1] + jobs[2:], workers=2) == [tmp_path, None]


def test_a_long_curve_keeps_its_spikes_when_thinned() -> None:
    import numpy as np

    from hpctrain.report.columns import MAX_POINTS, Points

    y = np.ones(100_000)
    y[54_321], y[77_777] = 9.0, -3.0  # one interval each: a stride of 25 would most likely miss them
    points = Points.of(np.arange(len(y), dtype=float), y)
    assert len(points.x) <= MAX_POINTS and points.y.max() == 9.0 and points.y.min() == -3.0
    assert (np.diff(points.x) > 0).all() and 54_321 in points.x and 77_777 in points.x


def test_the_page_and_the_terminal_say_where_the_time_went(tmp_path: Path) -> None:
    from hpctrain.rundir import AttemptLine, append_line
    from tests.unit.rundir.test_goodput import KILLED_ONCE

    run = RunDir(tmp_path / "run")
    run.root.mkdir()
    lines, metrics = KILLED_ONCE
    for line in [*lines, *metrics]:
        append_line(run.attempts if isinstance(line, AttemptLine) else run.metrics, line)
    outcome = cli("report", str(run.root), "-o", str(tmp_path / "out"))
    assert outcome.code == 0, outcome.stderr
    page = (tmp_path / "out" / "report.md").read_text()
    assert "## Where the time went" in page
    # No record.json: the wall time starts at the allocation (10 s after the synthetic submission).
    assert "| steps lost to rollback | 7.0 | 14.9% |" in page and "| wall time | 47.0 | 100% |" in page
    assert "| goodput | 0.468 (22 s of training in 47 s) |" in page
    assert "| 0 | rank_failure | 0.0 | 5.0 | 10.0 | 7.0 | 1.0 | 5.0 |" in page
    assert "where the time went:" in outcome.stdout and "detection (fault to decision)" in outcome.stdout


def test_a_report_is_as_private_as_its_run_directory(tmp_path: Path) -> None:
    import stat

    run = write_run(tmp_path / "run", intervals=40)
    array = tmp_path / "array"  # an array job's root: its elements' curves are the trials figure
    for index in range(2):
        write_run(array / f"array-{index}", intervals=20)
    previous = os.umask(0o022)  # the usual login umask, under which the report was world-readable
    try:
        for root in (run.root, array):
            root.chmod(0o700)  # as the submit path makes every run directory
            outcome = cli("report", str(root))
            assert outcome.code == 0, outcome.stderr
    finally:
        os.umask(previous)
    for root in (run.root, array):
        written = [root / "report", *(root / "report").iterdir()]
        assert {p.name for p in written} >= {"report", "report.md"} and any(
            p.suffix == ".png" for p in written
        )
        loose = {str(p): oct(stat.S_IMODE(p.stat().st_mode)) for p in written if p.stat().st_mode & 0o077}
        assert loose == {}, f"readable by others: {loose}"
