"""The status table of runs whose metrics hold any float: no error, and columns of bounded width."""

from __future__ import annotations

import contextlib
import io
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from hpctrain.cli.view.progress import rows
from hpctrain.cli.view.status import HEADER, show, summary_rows
from hpctrain.cli.view.table import NUMBER_WIDTH
from hpctrain.tracking.status import RunStatus
from tests.unit.report_runs import write_extreme_run
from tests.unit.tracked_runs import assembled

EXTREMES = [1e308, -1e308, 1.7976931348623157e308, 5e-324, -5e-324, float("inf"), float("nan"), 0.0]
NUMBER_COLUMNS = [HEADER.index(name) for name in ("LOSS", "THROUGHPUT", "ACC")]


def status_of(root: Path, state: str) -> RunStatus:
    return assembled(root, state, "extreme")


def test_a_throughput_of_1e308_keeps_its_column_narrow(tmp_path: Path) -> None:
    status = status_of(write_extreme_run(tmp_path, [1e308]).root, "RUNNING")
    [row] = summary_rows(status)
    assert row[HEADER.index("THROUGHPUT")] == "1e+308 tok/s"


@settings(max_examples=300, deadline=None)
@given(values=st.lists(st.floats() | st.sampled_from(EXTREMES), min_size=1, max_size=8))
def test_any_float_in_the_metrics_gives_a_bounded_table(values: list[float]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        status = status_of(write_extreme_run(Path(folder), values).root, "RUNNING")
        for row in summary_rows(status):
            for col in NUMBER_COLUMNS:
                assert len(row[col]) <= NUMBER_WIDTH + len(" samples/s"), row
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            show([status], detail=True)
        assert max(len(line) for line in out.getvalue().splitlines()) < 400
        for entry in rows([status]):
            assert len(entry.text()) < 200
