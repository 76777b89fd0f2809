"""A sweep's parameters figure with metrics and parameter values no axis can show: drawn, not a crash."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpctrain.report.trials import parameters_figure
from hpctrain.sweep.status import SweepStatus, TrialStatus

pytest.importorskip("matplotlib", reason="hpctrain report draws with matplotlib (the test extra has it)")

EXTREMES = [1e308, -1e308, 5e-324, float("inf"), float("nan"), 0.0, 1.0]
NUMBERS = st.floats() | st.sampled_from(EXTREMES)


def sweep_of(metrics: list[float], params: list[float], mode: str) -> SweepStatus:
    trials = [
        TrialStatus(index=i, params={"lr": p}, state="COMPLETED", job_id=str(i), metric=m)
        for i, (m, p) in enumerate(zip(metrics, params, strict=False))
    ]
    best = max(trials, key=lambda t: t.metric if t.metric == t.metric else -1.0) if trials else None
    counts = {"COMPLETED": len(trials)}
    return SweepStatus(
        sweep_id="s", name="s", metric="loss", mode=mode, counts=counts, best=best, trials=trials, arrays=[]
    )


def test_a_best_trial_of_1e308_is_left_out_not_a_crash(tmp_path: Path) -> None:
    path = parameters_figure(sweep_of([1.0, 1e308, 2.0], [0.1, 1e308, 0.01], "max"), tmp_path / "p.png")
    assert path.is_file() and path.stat().st_size > 1000


@settings(max_examples=30, deadline=None)
@given(
    pairs=st.lists(st.tuples(NUMBERS, NUMBERS), min_size=1, max_size=6), mode=st.sampled_from(["min", "max"])
)
def test_any_metric_and_parameter_values_give_a_figure(pairs: list[tuple[float, float]], mode: str) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        metrics, params = [m for m, _ in pairs], [p for _, p in pairs]
        assert parameters_figure(sweep_of(metrics, params, mode), Path(folder) / "p.png").is_file()
