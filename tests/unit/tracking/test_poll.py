"""What one poll reads of a run directory: the latest lines of each kind, decoding only those."""

from __future__ import annotations

from pathlib import Path

from hpctrain.rundir import EvalLine, RankTimesLine, RunDir, TrainLine
from hpctrain.tracking.poll import progress


def test_status_still_finds_the_eval_line_behind_per_rank_lines(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    run.append_metric(EvalLine(step=10, loss=0.5, accuracy=0.75))
    for step in range(11, 25):  # a ranks line after every train line: only the newest is decoded
        run.append_metric(TrainLine(step=step, steps=100))
        run.append_metric(RankTimesLine(step=step, compute_s=[1.0, float(step)], stragglers=[1]))
    found = progress(tmp_path)
    assert found.eval is not None and found.eval.accuracy == 0.75
    assert found.train is not None and found.ranks is not None and found.ranks.step == 24
