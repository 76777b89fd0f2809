"""report.ranks: compute time against the median rank, wait shares, folding, and the memory bars."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from hpctrain.report.ranks import MAX_COLUMNS, _bin, heatmap_figure, memory_figure, rank_matrices
from hpctrain.report.series import RunSeries, read_run
from hpctrain.rundir import MemoryLine, RankTimesLine
from tests.unit.report.conftest import Saved
from tests.unit.report_runs import write_run

pytest.importorskip("matplotlib", reason="hpctrain report draws with matplotlib (the test extra has it)")


def line(step: int, compute: list[float], wait: list[float], stragglers: list[int] = ()) -> RankTimesLine:  # type: ignore[assignment]
    return RankTimesLine(
        step=step, time=float(step), compute_s=compute, wait_s=wait, stragglers=list(stragglers)
    )


def test_compute_is_relative_to_the_median_rank_and_wait_is_a_share() -> None:
    series = RunSeries(
        ranks=[line(10, [1.0, 2.0, 4.0], [3.0, 2.0, 0.0]), line(20, [1.0, -1.0, 1.0], [1.0, 1.0, 1.0])]
    )
    relative, share, steps = rank_matrices(series)
    assert steps == [10, 20]
    assert relative[:, 0].tolist() == [0.5, 1.0, 2.0]
    assert share[:, 0].tolist() == [0.75, 0.5, 0.0]
    assert relative[0, 1] == 1.0 and np.isnan(relative[1, 1])  # a negative time is no time
    assert np.isnan(share[1, 1])


def test_lines_of_fewer_ranks_leave_the_missing_ranks_empty() -> None:
    relative, _, _ = rank_matrices(RunSeries(ranks=[line(1, [1.0, 1.0], [0, 0]), line(2, [2.0], [0])]))
    assert relative.shape == (2, 2) and relative[0, 1] == 1.0 and np.isnan(relative[1, 1])


def test_folding_keeps_the_worst_or_the_mean_of_each_group() -> None:
    matrix = np.array([[1.0, 5.0, 2.0, np.nan, 3.0]])
    worst, group = _bin(matrix, 1, 2, worst=True)
    assert group == 3 and worst.tolist() == [[5.0, 3.0]]
    mean, _ = _bin(matrix, 1, 2, worst=False)
    assert mean.tolist() == [[8.0 / 3, 3.0]]
    same, group = _bin(matrix, 1, 5, worst=True)
    assert group == 1 and same is matrix
    rows, group = _bin(matrix.T, 0, 1, worst=True)
    assert group == 5 and rows.tolist() == [[5.0]]


def test_the_heat_map_names_each_rank_and_its_node_and_dots_the_flagged(tmp_path: Path, saved: Saved) -> None:
    series = read_run(write_run(tmp_path / "run", intervals=40, ranks=4, slow_rank=2))
    path = heatmap_figure(series, tmp_path / "h.png", "run")
    assert path is not None and path.is_file()
    top = saved[0].axes[0]
    assert [t.get_text() for t in top.get_yticklabels()] == [
        "rank 0 node1",
        "rank 1 node1",
        "rank 2 node2",
        "rank 3 node2",
    ]
    (dots,) = top.collections
    assert {int(y) for _, y in dots.get_offsets()} == {2}
    assert top.images[0].get_array().shape == (4, len(series.ranks))
    assert "black dots: stragglers" in top.get_title()


def test_a_long_run_is_folded_to_at_most_max_columns(tmp_path: Path, saved: Saved) -> None:
    series = RunSeries(
        ranks=[line(i, [1.0, 1.0 + (i == 1500)], [0.0, 0.0]) for i in range(MAX_COLUMNS * 2 + 1)]
    )
    heatmap_figure(series, tmp_path / "h.png", "run")
    image = saved[0].axes[0].images[0].get_array()
    assert image.shape[1] <= MAX_COLUMNS and np.nanmax(image) == 2.0 / 1.5  # the one slow interval survives


def test_no_rank_times_no_heat_map_and_no_memory_no_bars(tmp_path: Path) -> None:
    assert heatmap_figure(RunSeries(), tmp_path / "h.png", "run") is None
    assert heatmap_figure(RunSeries(ranks=[line(1, [], [])]), tmp_path / "h.png", "run") is None
    assert memory_figure(RunSeries(), tmp_path / "m.png", "run") is None
    assert not (tmp_path / "h.png").exists()


def test_memory_bars_stack_each_part_and_show_the_peak(tmp_path: Path, saved: Saved) -> None:
    memory = {
        0: MemoryLine(rank=0, rank_bytes={"params": 2 << 20, "optimizer": 4 << 20}, peak_mem_mb=100.0),
        1: MemoryLine(rank=1, rank_bytes={"params": 2 << 20, "extra": 1 << 20}, peak_mem_mb=float("nan")),
    }
    memory_figure(RunSeries(memory=memory), tmp_path / "m.png", "run")
    held, peak = saved[0].axes[:2]
    bars = {c.get_label(): [p.get_height() for p in c.patches] for c in held.containers}
    assert bars == {"params": [2.0, 2.0], "optimizer": [4.0, 0.0], "extra": [0.0, 1.0]}
    assert [p.get_height() for p in peak.patches] == [100.0]
