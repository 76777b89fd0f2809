"""report.build: which figures a run gets and why others are missing, the key rows, and a page of trials."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpctrain.report.build import SUMMARY, Trial, matplotlib_missing, report_run, report_trials
from hpctrain.report.summary import Subject
from hpctrain.rundir import RunDir
from tests.unit.report_runs import write_run

pytest.importorskip("matplotlib", reason="hpctrain report draws with matplotlib (the test extra has it)")


def test_matplotlib_is_there_in_the_test_environment() -> None:
    assert matplotlib_missing() is None


def test_a_plain_run_gets_four_figures_and_no_note_about_a_parameter_server(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", intervals=30)
    written = report_run(run, Subject(title="job", run_id="r1", state="COMPLETED"), tmp_path / "out")
    assert [p.name for p in written.figures] == [
        "report-loss.png",
        "report-throughput.png",
        "report-ranks.png",
        "report-memory.png",
    ]
    page = written.summary.read_text()
    assert written.summary == tmp_path / "out" / SUMMARY
    assert "Parameter server" not in page and "## Figures not drawn" not in page
    assert "| goodput |" in page and "## Where the time went" in page
    assert any(line.startswith("goodput") or "goodput" in line.lower() for line in written.time_split)


def test_a_run_without_lines_gets_a_page_that_says_why_each_figure_is_missing(tmp_path: Path) -> None:
    written = report_run(RunDir(tmp_path / "run"), Subject(title="job", ended=False), tmp_path / "out")
    assert written.figures == []
    page = written.summary.read_text()
    assert "- Loss and evaluation: no train or eval lines in metrics.jsonl yet" in page
    assert "- Memory per rank: no memory lines" in page
    assert "- metrics.jsonl has no lines yet (or is absent)" in page
    assert "(still running: this report is a snapshot)" in page


def test_unreadable_lines_are_listed_on_the_page(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", intervals=5)
    with run.metrics.open("a") as out:
        out.write("garbage\n")
    page = report_run(run, Subject(title="job"), tmp_path / "out").summary.read_text()
    assert "## What could not be read\n\n- metrics.jsonl: 1 unreadable (" in page


def test_trials_get_one_figure_of_their_curves_and_a_row_each(tmp_path: Path) -> None:
    trials = [
        Trial("trial 0: lr=0.1", write_run(tmp_path / "t0", intervals=10), "COMPLETED", 0.25, "lr=0.1"),
        Trial("trial 1: lr=1", RunDir(tmp_path / "t1"), "PENDING", None, "lr=1"),
    ]
    made: list[Path] = []

    def extra(default: Path) -> Path:
        made.append(default)
        default.write_bytes(b"png")
        return default

    written = report_trials(
        trials, Subject(title="sweep s"), tmp_path / "out", extra=extra, metric_name="loss"
    )
    assert [p.name for p in written.figures] == ["report-trials.png", "report-sweep.png"]
    assert made == [tmp_path / "out" / "report-sweep.png"]
    page = written.summary.read_text()
    assert "| trial | state | loss | step | parameters |" in page
    assert "| trial 0 | COMPLETED | 0.25 | 100/100 | lr=0.1 |" in page
    assert "| trial 1 | PENDING | - | - | lr=1 |" in page
    assert "## loss against each swept parameter" in page


def test_trials_without_any_line_have_no_curves_figure(tmp_path: Path) -> None:
    written = report_trials(
        [Trial("trial 0: x", RunDir(tmp_path / "t0"))], Subject(title="s"), tmp_path / "out"
    )
    assert written.figures == []
    assert "- Trials: no trial has train or eval lines yet" in written.summary.read_text()
