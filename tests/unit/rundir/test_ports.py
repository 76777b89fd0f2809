"""Rendezvous ports outside the node's ephemeral range (hpctrain.rundir.ports), without a cluster."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpctrain import spec
from hpctrain.rundir.ports import DEFAULT_EPHEMERAL, ephemeral_range, job_ports, main, rendezvous_ports
from hpctrain.runtime import bootstrap
from hpctrain.scheduler.render import DoctorJob, render, render_doctor
from tests.conftest import JOBS, SITES


def test_the_range_is_read_from_the_kernel_file(tmp_path: Path) -> None:
    path = tmp_path / "ip_local_port_range"
    path.write_text("40000\t50000\n")
    assert ephemeral_range(path) == (40000, 50000)
    path.write_text("garbage")
    assert ephemeral_range(path) == DEFAULT_EPHEMERAL
    assert ephemeral_range(tmp_path / "missing") == DEFAULT_EPHEMERAL


def test_the_old_rule_put_preflight_inside_the_default_range() -> None:
    """Issue 23 item 13: job 20549 got MASTER_PORT 20549 and preflight 40549, an ephemeral port."""
    training, preflight = rendezvous_ports(20549, 0, DEFAULT_EPHEMERAL)
    low, high = DEFAULT_EPHEMERAL
    assert not low <= training <= high and not low <= preflight <= high
    assert preflight != 40549


@given(
    job=st.integers(0, 10**9),
    attempt=st.integers(0, 1000),
    low=st.integers(1024, 65535),
    width=st.integers(0, 40000),
)
def test_ports_avoid_the_ephemeral_range_and_each_other(job: int, attempt: int, low: int, width: int) -> None:
    high = min(65535, low + width)
    training, preflight = rendezvous_ports(job, attempt, (low, high))
    assert 20000 <= training <= 65535 and 20000 <= preflight <= 65535
    assert training != preflight
    if not (low <= 20000 and high >= 65535):  # some port is left outside the range
        assert not low <= training <= high and not low <= preflight <= high


def test_each_attempt_gets_new_ports() -> None:
    seen = {rendezvous_ports(1234, attempt, DEFAULT_EPHEMERAL) for attempt in range(6)}
    assert len(seen) == 6


def test_the_command_prints_both_ports(capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["1234", "1"]) == 0
    training, preflight = map(int, capsys.readouterr().out.split())
    assert (training, preflight) == rendezvous_ports(1234, 1, ephemeral_range())
    assert main(["x"]) == 2


# The old rule, 20000 + job id % 20000, gave this job 35000: inside the default ephemeral range.
OLD_RULE_EPHEMERAL_JOB = "15000"


def run_port_lines(script: str) -> tuple[list[str], tuple[int, int]]:
    """Run a generated script's port lines (and the line that prints them) in bash, as a job would:
    what it printed, and the (MASTER_PORT, HPCTRAIN_PREFLIGHT_PORT) its ranks inherit."""
    wanted = ("read -r MASTER_PORT", "export MASTER_PORT", 'echo "hpctrain: job $SLURM_JOB_ID')
    lines = [line for line in script.splitlines() if line.startswith(wanted)]
    env = {
        **os.environ,
        "PYTHON": sys.executable,
        "SLURM_JOB_ID": OLD_RULE_EPHEMERAL_JOB,
        "SLURM_JOB_NODELIST": "node1",
        "MASTER_ADDR": "node1",
    }
    body = "\n".join(["set -euo pipefail", *lines, 'echo "$MASTER_PORT $HPCTRAIN_PREFLIGHT_PORT"'])
    out = subprocess.run(["bash", "-c", body], capture_output=True, text=True, check=True, env=env).stdout
    *printed, last = out.splitlines()
    training, preflight = map(int, last.split())
    return printed, (training, preflight)


@pytest.mark.parametrize("job", ["digits-ddp.yaml", "digits-ps-async.yaml"])
def test_the_batch_script_sets_and_prints_the_ports_of_the_rule(job: str, tmp_path: Path) -> None:
    """Issue 23: the batch script (and so a parameter-server job, which runs one step on it) set
    MASTER_PORT by the old rule; it prints the port its ranks use."""
    resolved = spec.resolve(spec.load_job(JOBS / job), spec.load_site(SITES / "local.yaml"))
    script = render(resolved, tmp_path / "run")
    assert "20000" not in script
    printed, ports = run_port_lines(script)
    assert ports == job_ports(OLD_RULE_EPHEMERAL_JOB)
    low, high = ephemeral_range()
    assert not any(low <= port <= high for port in ports)
    assert printed == [
        f"hpctrain: job {OLD_RULE_EPHEMERAL_JOB} (restart 0) on node1, rendezvous node1:{ports[0]}"
    ]
    ranks = bootstrap.from_slurm(
        {"SLURM_PROCID": "0", "SLURM_JOB_ID": "15000", "MASTER_ADDR": "node1", "MASTER_PORT": str(ports[0])}
    )
    assert ranks.master_port == ports[0]


def test_the_doctors_preflight_job_uses_the_rule(tmp_path: Path) -> None:
    site = spec.load_site(SITES / "local.yaml")
    script = render_doctor(DoctorJob(site, "debug", ["node1"], 0, 0.2), tmp_path)
    assert "20000" not in script
    _, ports = run_port_lines(script)
    assert ports == job_ports(OLD_RULE_EPHEMERAL_JOB)
