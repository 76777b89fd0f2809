"""report.ps: staleness, each worker's rate and wait share, and many workers summarised."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpctrain.report.ps import MAX_WORKER_LINES, _shown_workers, _wait_share, ps_figure
from hpctrain.report.series import RunSeries, read_run
from hpctrain.rundir import TrainLine
from tests.unit.report.conftest import Saved
from tests.unit.report_runs import write_run

pytest.importorskip("matplotlib", reason="hpctrain report draws with matplotlib (the test extra has it)")


def worker_lines(rate: float, compute: float = 1.0, wait: float = 1.0) -> list[TrainLine]:
    return [
        TrainLine(step=i, samples_per_s=rate, compute_s=compute, wait_s=wait, time=100.0 + i)
        for i in range(3)
    ]


def test_the_wait_share_is_wait_over_compute_plus_wait_and_negative_times_are_not_data() -> None:
    lines = [
        TrainLine(step=1, compute_s=3.0, wait_s=1.0, time=10.0),
        TrainLine(step=2, compute_s=-1.0, wait_s=1.0, time=11.0),
        TrainLine(step=3, compute_s=0.0, wait_s=0.0, time=12.0),
    ]
    points = _wait_share(lines, 10.0, 1.0)
    assert points.x.tolist() == [0.0] and points.y.tolist() == [0.25]


def test_every_worker_is_shown_up_to_the_limit_then_the_slowest_and_fastest() -> None:
    few = RunSeries(workers={w: worker_lines(float(w)) for w in range(MAX_WORKER_LINES)})
    assert _shown_workers(few) == list(range(MAX_WORKER_LINES))
    rates = {w: float((w * 7) % 20) for w in range(20)}  # every rate once, in a scrambled order
    many = RunSeries(workers={w: worker_lines(rates[w]) for w in range(20)})
    ranked = sorted(range(20), key=lambda w: rates[w])
    assert _shown_workers(many) == sorted(ranked[:6] + ranked[-6:])


def test_a_run_with_workers_draws_each_worker(tmp_path: Path, saved: Saved) -> None:
    series = read_run(write_run(tmp_path / "run", intervals=10, workers=3))
    assert ps_figure(series, tmp_path / "ps.png", "run") == tmp_path / "ps.png"
    stale, rate, share = saved[0].axes[:3]
    assert [line.get_label() for line in rate.lines] == ["worker 0", "worker 1", "worker 2"]
    assert stale.texts[0].get_text().startswith("no staleness recorded")
    for worker, line in enumerate(share.lines):
        compute, wait = 0.01 * (1 + worker), 0.02
        assert line.get_ydata()[0] == pytest.approx(wait / (compute + wait))


def test_staleness_without_workers_is_drawn_and_a_plain_run_gets_no_figure(
    tmp_path: Path, saved: Saved
) -> None:
    train = [TrainLine(step=s, staleness_mean=1.5, staleness_max=3) for s in range(1, 5)]
    ps_figure(RunSeries(train=train), tmp_path / "ps.png", "run")
    stale = saved[0].axes[0]
    assert [line.get_label() for line in stale.lines] == ["staleness mean", "staleness max"]
    assert list(stale.lines[1].get_ydata()) == [3.0] * 4
    plain = read_run(write_run(tmp_path / "plain", intervals=5))
    assert ps_figure(plain, tmp_path / "none.png", "run") is None
