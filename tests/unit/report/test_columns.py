"""Values no axis can show (NaN, infinity, ±1e308, subnormals) in a run's metrics: a report is still drawn."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpctrain.report.columns import column, rank_table
from hpctrain.report.series import MAX_MAGNITUDE, finite, read_run
from tests.unit.report_runs import write_extreme_run
from tests.unit.tracked_runs import cli

pytest.importorskip("matplotlib", reason="hpctrain report draws with matplotlib (the test extra has it)")

EXTREMES = [1e308, -1e308, 1.7976931348623157e308, 5e-324, -5e-324, 2.2e-308, float("inf"), float("nan"), 0.0]
ANY_FLOAT = st.floats() | st.sampled_from(EXTREMES)


def test_a_loss_and_a_time_of_1e308_are_left_out_of_the_figures_not_a_crash(tmp_path: Path) -> None:
    run = write_extreme_run(tmp_path / "run", [1.0, 2.0, 1e308, 3.0, -1e308, 4.0])
    outcome = cli("report", str(run.root), "-o", str(tmp_path / "out"))
    assert outcome.code == 0, outcome.stderr
    assert (tmp_path / "out" / "report-loss.png").is_file()
    series = read_run(run)
    for name in ("loss", "time", "samples_per_s"):
        values = series.column("train", name)
        assert not (np.abs(values) > MAX_MAGNITUDE).any(), name


def test_out_of_range_values_are_not_data() -> None:
    assert finite(1e308) is None and finite(-1e101) is None and finite(10**400) is None
    assert finite(1e100) == 1e100 and finite(5e-324) == 5e-324
    assert rank_table([[1e308, 1.0]], 2)[:, 0].tolist()[1] == 1.0
    assert np.isnan(rank_table([[1e308, 1.0]], 2)[0, 0])


@settings(max_examples=25, deadline=None)
@given(values=st.lists(ANY_FLOAT, min_size=1, max_size=12))
def test_any_float_in_any_field_gives_a_report(values: list[float]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        run = write_extreme_run(Path(folder) / "run", values)
        outcome = cli("report", str(run.root), "-o", str(Path(folder) / "out"))
        assert outcome.code == 0, outcome.stderr
        assert (Path(folder) / "out" / "report.md").is_file()
        train = read_run(run).train
        assert all(not (np.abs(column(train, name)) > MAX_MAGNITUDE).any() for name in ("loss", "time"))
