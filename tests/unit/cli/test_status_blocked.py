"""`hpctrain status` (the table, `status JOBID`, `--json`) and the API warn about a pending job that can
never run (issue 36 item 1), from one squeue call, and one scontrol call only when a job names nodes.
squeue and scontrol are scripts that print what Slurm 22.05 printed on the local cluster."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from hpctrain import api
from hpctrain.scheduler.slurm import cli as slurm_cli
from tests.unit.tracked_runs import cli, home_env, track

QUEUE = (
    "689|PENDING|BadConstraints||0:00|debug|2|node[1-2]||(null)\n"
    "691|PENDING|DependencyNeverSatisfied||0:00|debug|1|||afterok:690(failed)\n"
    "692|PENDING|Resources||0:00|debug|1|||(null)\n"
)
PARTITIONS = "PartitionName=debug Default=YES MaxNodes=UNLIMITED Nodes=node[1-2] State=UP TotalNodes=2\n"
NEVER_689 = (
    "  job 689: can never run: its ExcNodeList node1,node2 leaves 0 of the 2 nodes of partition debug"
    " for a job of 2 nodes; `hpctrain cancel 689`, then submit it again"
)


@pytest.fixture
def slurm(tmp_path: Path, hpctrain_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Fake squeue/scontrol/sacct on PATH that log each call; the log's path."""
    bindir, calls = tmp_path / "bin", tmp_path / "calls"
    bindir.mkdir()
    for name, output in (("squeue", QUEUE), ("scontrol", PARTITIONS), ("sacct", "")):
        (bindir / name).write_text(f"#!/bin/sh\necho {name} \"$@\" >> {calls}\nprintf '%s' '{output}'\n")
        (bindir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    monkeypatch.setattr(slurm_cli, "_partitions_cache", None)
    with home_env(hpctrain_home):
        for job_id in ("689", "691", "692"):
            track(hpctrain_home, job_id, "PENDING", backend="slurm", name=f"job{job_id}")
        yield calls


def test_the_table_warns_in_one_line_per_job_that_can_never_run(slurm: Path) -> None:
    shown = cli("status")
    assert shown.code == 0, shown.stderr
    notes = [line for line in shown.stdout.splitlines() if line.startswith("  ")]
    assert NEVER_689 in notes, notes
    assert any(
        line.startswith("  job 691: can never run: its dependency afterok:690(failed) can never be met")
        and "`hpctrain cancel 691`" in line
        for line in notes
    ), notes
    assert not any("job 692" in line for line in notes)  # waiting for resources is no warning
    # One squeue for all jobs; one scontrol for the partitions, because job 689 names nodes.
    assert [line.split()[0] for line in slurm.read_text().splitlines()] == ["squeue", "scontrol"]
    assert "show partition -o" in slurm.read_text()


def test_status_jobid_and_json_and_the_api_carry_the_warning(slurm: Path) -> None:
    detail = cli("status", "689")
    assert NEVER_689 in detail.stdout.splitlines() and "pending: BadConstraints" in detail.stdout
    (entry,) = json.loads(cli("status", "689", "--json").stdout)
    assert entry["blocked"]["certain"] is True
    assert entry["blocked"]["cause"].startswith("its ExcNodeList node1,node2 leaves 0 of the 2 nodes")
    status = api.find_run("691").status()
    assert status.blocked is not None and "DependencyNeverSatisfied" in status.blocked.cause
    assert api.find_run("692").status().blocked is None


def test_waiting_on_a_job_that_can_never_run_ends_at_once_with_the_warning(slurm: Path) -> None:
    """Not a wait for ever (or until the timeout): the API raises NeverRuns, `status --watch` exits 1."""
    with pytest.raises(api.NeverRuns, match="job 691: can never run: its dependency afterok:690"):
        api.find_run("691").wait(timeout=60)
    with pytest.raises(api.NeverRuns, match="job 689: can never run"):
        api.wait_all([api.find_run("692"), api.find_run("689")], timeout=60)
    watched = cli("status", "689", "--watch")
    assert watched.code == 1 and "can never run" in watched.stderr and "Traceback" not in watched.stderr
