"""report.summary: a run's key numbers, the timeline, failures, and run text made safe for Markdown."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from hpctrain.report.series import RunSeries, read_run
from hpctrain.report.summary import (
    TIMELINE,
    Page,
    Subject,
    failure_lines,
    goodput_lines,
    goodput_row,
    md,
    number,
    render,
    run_rows,
    timeline,
    write,
)
from hpctrain.rundir import EventLine, FailureReport, Result, Unreadable
from tests.unit.report_runs import T0, write_run


@given(st.text(), st.integers(2, 300))
def test_md_is_one_short_line_that_cannot_break_a_table_or_open_html(text: str, limit: int) -> None:
    line = md(text, limit)
    assert "\n" not in line and "\r" not in line and "`" not in line
    assert "<" not in line and ">" not in line
    assert len(line) <= limit
    bare = line.replace("\\\\", "")
    assert all(bare[i - 1] == "\\" for i, c in enumerate(bare) if c in "|[]")


def test_md_escapes_and_cuts() -> None:
    assert md("a|b") == "a\\|b"
    assert md("x <b>[y]</b>") == "x &lt;b&gt;\\[y\\]&lt;/b&gt;"
    assert md("one\n  two\tthree") == "one two three"
    assert md("abcdef", 4) == "abc…"


def test_number_shows_finite_values_and_a_dash_for_the_rest() -> None:
    assert number(0.123456) == "0.1235"
    assert number(2.0, 2) == "2"
    assert [number(v) for v in (None, float("nan"), float("inf"), 1e308, True, "1")] == ["-"] * 6


def rows_of(series: RunSeries, result: Result | Unreadable | None = None) -> dict[str, str]:
    return dict(run_rows(series, result))


def test_the_rows_of_a_run_with_a_restart_a_straggler_and_no_result(tmp_path: Path) -> None:
    series = read_run(write_run(tmp_path / "run", intervals=60, ranks=4, slow_rank=3))
    rows = rows_of(series)
    last = series.train[-1]
    assert rows["progress"] == f"step {last.step} of {last.steps} (no result.json yet)"
    assert rows["latest loss"] == number(last.loss)
    assert rows["layout"] == "ddp, 4 ranks, ?"
    resumed = series.restarts[0].step
    assert rows["restarts / requeues"] == f"1 (resumed at step {resumed})"
    checkpoints = [e for e in series.events if e.event == "checkpoint"]
    assert rows["checkpoints"] == f"{len(checkpoints)} (last at step {checkpoints[-1].step})"
    flagged = sum(1 for line in series.ranks if 3 in line.stragglers)
    assert (
        rows["stragglers"] == f"rank 3 on node2 ({flagged} intervals), of {len(series.ranks)} log intervals"
    )
    assert rows["attempts (attempts.jsonl)"] == "2: rank_failure, completed"


def test_a_result_replaces_the_progress_rows(tmp_path: Path) -> None:
    series = read_run(write_run(tmp_path / "run", intervals=10, slow_rank=None))
    result = Result(
        status="completed", step=100, steps=100, final_loss=0.25, samples_per_s=640.0, wall_time_s=12.0
    )
    rows = rows_of(series, result)
    assert rows["result"] == "completed at step 100 of 100"
    assert rows["final loss"] == "0.25" and rows["wall time"] == "12 s"
    assert "progress" not in rows
    assert rows["stragglers"] == f"none flagged in {len(series.ranks)} log intervals"


def test_an_unreadable_result_is_a_row_of_its_own() -> None:
    rows = rows_of(RunSeries(), Unreadable("result.json", "not JSON"))
    assert "not JSON" in rows["result.json"]
    assert rows["restarts / requeues"] == "0" and "stragglers" not in rows


def test_the_timeline_lists_events_but_checkpoints_and_cuts_the_middle() -> None:
    events = [EventLine(event="start", step=0, time=T0)]
    events += [EventLine(event="checkpoint", step=i, time=T0 + i) for i in range(5)]
    events += [EventLine(event="straggler", step=i, time=T0 + i, reason=f"r{i}") for i in range(100)]
    series = RunSeries(events=events)
    lines = timeline(series)
    assert len(lines) == TIMELINE + 1
    assert lines[0] == "- +0.0 s, step 0: start"
    assert lines[1] == "- +0.0 s, step 0: straggler (r0)"
    assert lines[TIMELINE // 2] == "- (no time): ... 61 more events ..."
    assert lines[-1] == "- +99.0 s, step 99: straggler (r99)"


def test_failure_lines_list_eight_and_count_the_rest() -> None:
    reports: list[FailureReport | Unreadable] = [
        FailureReport(rank=r, hostname=f"node{r}", error_type="OSError", message="boom|x") for r in range(10)
    ]
    lines = failure_lines(reports)
    assert lines[0] == "- rank 0 on node0: OSError: boom\\|x"
    assert len(lines) == 9 and lines[-1] == "- ... and 2 more"


def test_no_goodput_without_a_split() -> None:
    assert goodput_row(None) == [] and goodput_lines(None) == []


def test_the_page_renders_every_part_and_is_written(tmp_path: Path) -> None:
    page = Page(Subject(title="t|1", run_id="r1", job_id="42", state="RUNNING", ended=False, root="/x"))
    page.rows = [("loss", "0.5")]
    page.figures = [("Loss", "report-loss.png")]
    page.missing = ["Memory: none"]
    page.sections = [("Timeline", ["- a"]), ("Empty", [])]
    page.problems = ["metrics.jsonl: 1 unreadable"]
    text = write(page, tmp_path / "out" / "report.md").read_text()
    assert text.split("written ")[0] == render(page).split("written ")[0]
    assert text.startswith("# hpctrain report: t\\|1\n")
    assert "run r1, job 42, state RUNNING (still running: this report is a snapshot)" in text
    assert "| loss | 0.5 |" in text and "![Loss](report-loss.png)" in text
    assert "## Figures not drawn\n\n- Memory: none" in text
    assert "## Timeline\n\n- a" in text and "## Empty" not in text
    assert "## What could not be read\n\n- metrics.jsonl: 1 unreadable" in text


def test_a_subject_without_run_or_job_id_starts_its_line_with_the_state() -> None:
    text = render(Page(Subject(title="s")))
    assert text.split("\n")[2].startswith("state unknown; written ")
