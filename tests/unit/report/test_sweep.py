"""report.sweep: a sweep's report from its record and its trials' run directories (trials already final, so
no scheduler is asked), and `--out FILE.png` placing the parameters figure."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpctrain import rundir
from hpctrain.report.sweep import report_sweep
from hpctrain.rundir import ArrayChunk, SweepRecord, Trial
from hpctrain.sweep.plan import trial_dir
from hpctrain.sweep.status import Finished, TrialStatus
from tests.unit.report.conftest import Saved
from tests.unit.report_runs import write_run

pytest.importorskip("matplotlib", reason="hpctrain report draws with matplotlib (the test extra has it)")

METRICS = [0.5, 0.25, 0.75]


def finished_sweep(root: Path) -> SweepRecord:
    """A sweep of three trials over train.lr, each with metrics, all recorded as final with their metric."""
    record = SweepRecord(
        sweep_id="sweep-1",
        name="grid",
        site="local",
        backend="slurm",
        submitted_at=0.0,
        metric="eval_loss",
        mode="min",
        params=["train.lr"],
        trials=[Trial(i, {"train.lr": 10.0**-i}) for i in range(len(METRICS))],
        arrays=[ArrayChunk(offset=0, count=len(METRICS), job_id="77")],
    )
    final = {
        t.index: TrialStatus(
            index=t.index, params=t.params, state="COMPLETED", job_id=f"77_{t.index}", metric=METRICS[t.index]
        )
        for t in record.trials
    }
    for t in record.trials:
        write_run(trial_dir(root, t.index).root, intervals=5)
    rundir.write_json(rundir.RunDir(root).trials_final, Finished(final))
    return record


def test_the_page_lists_every_trial_and_the_figure_names_the_best(tmp_path: Path, saved: Saved) -> None:
    root = tmp_path / "sweep-1"
    written = report_sweep(root, finished_sweep(root))
    assert written.summary == root / "report" / "report.md"
    assert [p.name for p in written.figures] == ["report-trials.png", "report-sweep.png"]
    page = written.summary.read_text()
    assert page.startswith("# hpctrain report: sweep grid\n")
    assert "run sweep-1, job 77 (trials 0-2), state COMPLETED 3;" in page
    assert "| trial | state | eval_loss | step | parameters |" in page
    for index, metric in enumerate(METRICS):
        assert f"| trial {index} | COMPLETED | {metric} | 50/50 | train.lr=" in page
    assert "## eval_loss against each swept parameter" in page
    (legend,) = saved[0].legends
    labels = [t.get_text() for t in legend.get_texts()]
    assert [label for label in labels if label.endswith("(best)")] == ["trial 1: lr=0.1 (best)"]


def test_an_out_that_names_a_png_is_the_parameters_figure_and_the_rest_goes_beside_it(tmp_path: Path) -> None:
    root = tmp_path / "sweep-1"
    record = finished_sweep(root)
    written = report_sweep(root, record, tmp_path / "elsewhere" / "lr.png")
    assert (tmp_path / "elsewhere" / "lr.png") in written.figures
    assert written.summary == tmp_path / "elsewhere" / "report.md"
    assert not (root / "report").exists()
