"""The straggler rule (a rank slow three intervals in a row) and its wording in `status`."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from hpctrain.rundir import RankTimesLine, RunDir, TrainLine
from hpctrain.rundir.stragglers import SLOW_FRACTION, SLOW_INTERVALS, StragglerRule, describe, excess
from hpctrain.tracking.poll import progress


def test_a_rank_slow_three_intervals_in_a_row_is_flagged_once() -> None:
    rule = StragglerRule()
    slow = [1.0, 1.0, 1.0, 1.45]
    assert rule.update(slow) == ([], [])
    assert rule.update(slow) == ([], [])
    assert rule.update(slow) == ([3], [3])  # the third interval in a row flags it, with an event
    assert rule.update(slow) == ([3], [])  # still flagged, no second event
    assert rule.update([1.0, 1.0, 1.0, 1.1]) == ([], [])  # a normal interval clears it


def test_a_hiccup_interval_resets_the_count() -> None:
    rule = StragglerRule()
    for times in ([1, 1, 1, 2], [1, 1, 1, 2], [1, 1, 1, 1], [1, 1, 1, 2], [1, 1, 1, 2]):
        assert rule.update(times) == ([], [])


def test_twenty_percent_is_not_yet_slow_and_no_peers_no_straggler() -> None:
    rule = StragglerRule()
    for _ in range(5):
        assert rule.update([1.0, 1.0, 1.2])[0] == []
    single = StragglerRule()
    for _ in range(5):
        assert single.update([3.0]) == ([], [])
    assert excess([0.0, 0.0]) == [0.0, 0.0]  # nothing measured: nobody is slower


@given(st.lists(st.lists(st.floats(0.0, 1e6), min_size=3, max_size=3), max_size=12))
def test_flagged_means_slow_in_each_of_the_last_three_intervals(intervals: list[list[float]]) -> None:
    rule = StragglerRule()
    history: list[list[bool]] = []
    for times in intervals:
        flagged, newly = rule.update(times)
        history.append([amount > SLOW_FRACTION for amount in excess(times)])
        recent = history[-SLOW_INTERVALS:]
        expected = [r for r in range(3) if len(recent) == SLOW_INTERVALS and all(h[r] for h in recent)]
        assert flagged == expected
        assert set(newly) <= set(flagged)


def test_status_wording_names_rank_node_and_excess(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    run.append_metric(TrainLine(step=30, steps=100, loss=1.0))
    run.append_metric(
        RankTimesLine(
            step=30,
            compute_s=[1.0, 1.0, 1.0, 1.45],
            wait_s=[0.45, 0.45, 0.45, 0.0],
            nodes=["node1", "node1", "node2", "node2"],
            stragglers=[3],
        )
    )
    assert describe(progress(tmp_path).ranks) == ["straggler: rank 3 on node2, +45%"]
    assert describe(None) == []
