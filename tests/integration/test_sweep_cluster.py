"""Sweeps on the real local Slurm cluster: 12 trials in one array, chunks above MaxArraySize, one array
per resource set with each trial's own environment, preemption."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hpctrain import rundir
from tests.conftest import JOBS, REPO, run_cli
from tests.integration.cluster import (
    cancel_leftovers,
    make_eligible,
    sacct_elements,
    scontrol_job,
)

pytestmark = pytest.mark.cluster

HERE = Path(__file__).resolve().parent
QUEUE_TIMEOUT = 600  # the cluster is shared: trials may wait behind other tests' jobs
FINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "STOPPED"}
QUICK = ["--set", "train.steps=20", "--set", "train.eval_every=0", "--set", "train.checkpoint_every=0"]


SUBMITTED: list[str] = []


@pytest.fixture(autouse=True)
def _cluster() -> Iterator[None]:
    yield from cancel_leftovers(SUBMITTED)


def sweep(*args: str) -> dict[str, Any]:
    proc = run_cli("sweep", *args, "--json")
    assert proc.returncode == 0, proc.stderr
    submitted = json.loads(proc.stdout)
    SUBMITTED.extend(a["job_id"] for a in submitted["arrays"])
    return submitted


def sweep_status(sweep_id: str) -> dict[str, Any]:
    proc = run_cli("sweep", "status", sweep_id, "--json")
    assert proc.returncode == 0, proc.stderr
    (summary,) = json.loads(proc.stdout)
    return summary


def wait_done(sweep_id: str, timeout: float = QUEUE_TIMEOUT) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    summary = sweep_status(sweep_id)
    while not all(t["state"] in FINAL for t in summary["trials"]):
        if time.monotonic() > deadline:
            pytest.fail(f"sweep {sweep_id} not done after {timeout} s: {summary['counts']}")
        time.sleep(2)
        summary = sweep_status(sweep_id)
    return summary


def lr_trained_with(run_dir: Path) -> float:
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return next(m["lr"] for m in lines if m["kind"] == "train")


def held_job() -> str:
    out = subprocess.run(
        ["sbatch", "--parsable", "--hold", "--output=/dev/null", "--wrap", "true"],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip().split(";")[0]


def check_every_trial(submitted: dict[str, Any], summary: dict[str, Any]) -> None:
    """Every trial completed with a result, and trained with its own values (its own spec.json)."""
    root = Path(submitted["run_dir"])
    assert summary["counts"] == {"COMPLETED": len(summary["trials"])}, summary["trials"]
    for trial in summary["trials"]:
        element = root / f"array-{trial['index']}"
        result = rundir.read_json(element / rundir.RESULT, rundir.Result)
        assert isinstance(result, rundir.Result), result
        assert result.status == "completed" and result.step == result.steps
        assert lr_trained_with(element) == pytest.approx(trial["params"]["train.lr"])
        assert trial["metric"] == pytest.approx(result.eval_loss)
    best = min(summary["trials"], key=lambda t: t["metric"])
    assert summary["best"]["index"] == best["index"]


def test_twelve_trial_grid_completes_four_at_a_time(hpctrain_home: Path) -> None:
    submitted = sweep(str(JOBS / "digits-sweep.yaml"), "--site", "local", *QUICK)
    assert submitted["trials"] == 12 and len(submitted["arrays"]) == 1
    (array,) = submitted["arrays"]
    assert array["array"] == "0-11%4"
    assert "ArrayTaskThrottle=4" in scontrol_job(array["job_id"])
    summary = wait_done(submitted["sweep_id"])
    check_every_trial(submitted, summary)

    table = run_cli("sweep", "status", submitted["sweep_id"], "--trials")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert f"best eval_loss {summary['best']['metric']:.4g} (trial {summary['best']['index']}:" in lines[0]
    ranked = [float(line.split()[3]) for line in lines[2:]]
    assert ranked == sorted(ranked) and len(ranked) == 12

    report = run_cli("sweep", "report", submitted["sweep_id"], "--out", str(hpctrain_home / "r.png"))
    assert report.returncode == 0, report.stderr
    assert (hpctrain_home / "r.png").read_bytes()[:4] == b"\x89PNG"


PROBE = """
import os


def env_probe(train):
    print(f"probe FOO={os.environ.get('FOO')} MEM={os.environ.get('SLURM_MEM_PER_NODE')}", flush=True)
    from hpctrain.examples import digits

    return digits.build(train)
"""


def test_each_trial_runs_with_its_own_environment_and_memory(hpctrain_home: Path, tmp_path: Path) -> None:
    (tmp_path / "sweep_probe.py").write_text(PROBE)
    submitted = sweep(
        str(JOBS / "digits-sweep.yaml"),
        "--site",
        "local",
        *QUICK,
        "--set",
        "sweep.grid={}",
        "--set",
        "train.entrypoint=sweep_probe:env_probe",
        "--set",
        f"env.PYTHONPATH={tmp_path}",
        "--grid",
        "env.FOO=alpha,beta",
        "--grid",
        "resources.mem=1G,2G",
        "--metric",
        "final_loss",
    )
    # One array per memory size; each trial exports its own FOO.
    arrays = submitted["arrays"]
    assert [(a["offset"], a["count"]) for a in arrays] == [(0, 2), (2, 2)], arrays
    summary = wait_done(submitted["sweep_id"])
    assert summary["counts"] == {"COMPLETED": 4}, summary["trials"]
    root = Path(submitted["run_dir"])
    requested = {
        **sacct_elements(arrays[0]["job_id"], "ReqMem"),
        **sacct_elements(arrays[1]["job_id"], "ReqMem"),
    }
    for trial in summary["trials"]:
        foo, mem = trial["params"]["env.FOO"], trial["params"]["resources.mem"]
        megabytes = int(mem.rstrip("G")) * 1024
        rank_log = (root / f"array-{trial['index']}" / "logs" / "rank-0.log").read_text()
        assert f"probe FOO={foo} MEM={megabytes}" in rank_log, (trial, rank_log[-2000:])
        assert requested[trial["job_id"]] in (mem, f"{megabytes}M"), (trial, requested)
        assert trial["metric"] is not None
    # status and report take the sweep whole, across both arrays.
    table = run_cli("sweep", "status", submitted["sweep_id"], "--trials")
    assert table.returncode == 0, table.stderr
    assert all(f"{a['job_id']}_" in table.stdout for a in arrays), table.stdout
    report = run_cli("sweep", "report", submitted["sweep_id"], "--out", str(hpctrain_home / "r.png"))
    assert report.returncode == 0, report.stderr


@contextlib.contextmanager
def max_array_size(value: int) -> Iterator[None]:
    """The shared cluster's MaxArraySize, lowered for as short a time as possible, then restored."""
    conf = Path(os.environ.get("SLURM_CONF", "/etc/slurm/slurm.conf"))
    original = conf.read_text()
    kept = [line for line in original.splitlines() if not line.startswith("MaxArraySize=")]
    try:
        write_conf(conf, "\n".join([*kept, f"MaxArraySize={value}"]) + "\n")
        yield
    finally:
        write_conf(conf, original)


def write_conf(conf: Path, text: str) -> None:
    tmp = conf.with_name(f".{conf.name}.sweep-test")
    tmp.write_text(text)
    tmp.chmod(0o644)
    os.replace(tmp, conf)
    subprocess.run(["scontrol", "reconfigure"], check=True, timeout=60)
    wanted = re.search(r"^MaxArraySize=(\d+)", text, re.M)
    expected = wanted.group(1) if wanted else "1001"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        config = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True).stdout
        if re.search(rf"MaxArraySize\s*=\s*{expected}\b", config):
            return
        time.sleep(0.5)
    pytest.fail(f"MaxArraySize did not become {expected} after scontrol reconfigure")


def array_range(job_id: str) -> str:
    """The indices of an array as Slurm holds them, from `scontrol show job` of a pending array."""
    found = re.search(r"ArrayTaskId=(\S+)", scontrol_job(job_id))
    assert found, scontrol_job(job_id)
    return found.group(1).split("%", 1)[0]


def test_twelve_trials_above_max_array_size_five_go_out_as_three_offset_arrays(hpctrain_home: Path) -> None:
    hold = held_job()
    try:
        with max_array_size(5):
            submitted = sweep(
                str(JOBS / "digits-sweep.yaml"),
                "--site",
                "local",
                *QUICK,
                "--set",
                f"dependency=afterok:{hold}",
            )
        arrays = submitted["arrays"]
        assert [(a["offset"], a["count"]) for a in arrays] == [(0, 5), (5, 5), (10, 2)]
        assert [array_range(a["job_id"]) for a in arrays] == ["0-4", "0-4", "0-1"]
        root = Path(submitted["run_dir"])
        scripts = [root / "job.sbatch", root / "job+5.sbatch", root / "job+10.sbatch"]
        for script, offset in zip(scripts, (0, 5, 10), strict=True):
            assert f"HPCTRAIN_ARRAY_INDEX=$((SLURM_ARRAY_TASK_ID + {offset}))" in script.read_text()
        subprocess.run(["scontrol", "release", hold], check=True)
        summary = wait_done(submitted["sweep_id"])
    finally:
        subprocess.run(["scancel", hold], check=False)
    check_every_trial(submitted, summary)
    assert (root / "logs" / "batch-1+10.log").exists()  # trial 11: index 1 of the array at offset 10


def test_sweep_cancel_cancels_every_array(hpctrain_home: Path) -> None:
    hold = held_job()
    try:
        submitted = sweep(
            str(JOBS / "digits-sweep.yaml"), "--site", "local", *QUICK, "--set", f"dependency=afterok:{hold}"
        )
        proc = run_cli("sweep", "cancel", submitted["sweep_id"])
        assert proc.returncode == 0, proc.stderr
        summary = wait_done(submitted["sweep_id"], timeout=60)
    finally:
        subprocess.run(["scancel", hold], check=False)
    assert summary["counts"] == {"CANCELLED": 12}


def element_restarts(element: str) -> int:
    found = re.search(r"Restarts=(\d+)", scontrol_job(element))
    return int(found.group(1)) if found else -1


def test_preempted_trial_is_requeued_alone_and_resumes(hpctrain_home: Path, tmp_path: Path) -> None:
    submitted = sweep(
        str(JOBS / "digits-sweep.yaml"),
        "--site",
        "local",
        "--set",
        "train.entrypoint=_runtime_job:slow_digits",
        "--set",
        "train.options.delay_s=0.05",
        "--set",
        "train.steps=150",
        "--set",
        f"env.PYTHONPATH={REPO}{os.pathsep}{HERE}",
        "--grid",
        "train.lr=0.001,0.003,0.01",
        "--grid",
        "train.batch_size=32",
    )
    (array,) = submitted["arrays"]
    target = f"{array['job_id']}_1"
    root = Path(submitted["run_dir"])
    deadline = time.monotonic() + QUEUE_TIMEOUT
    while not _trained_steps(root / "array-1") >= 20:
        assert time.monotonic() < deadline, sweep_status(submitted["sweep_id"])
        time.sleep(0.5)
    subprocess.run(["scancel", "--signal=USR1", "--batch", target], check=True)
    deadline = time.monotonic() + 120
    while element_restarts(target) < 1:
        assert time.monotonic() < deadline, scontrol_job(target)
        time.sleep(1)
    time.sleep(3)  # the old steps' teardown must end before the element runs again
    make_eligible(target)
    summary = wait_done(submitted["sweep_id"])
    assert summary["counts"] == {"COMPLETED": 3}, summary["trials"]
    assert [element_restarts(f"{array['job_id']}_{i}") for i in range(3)] == [0, 1, 0]
    events = [_events(root / f"array-{i}") for i in range(3)]
    assert "preempted" in events[1] and "resumed" in events[1]
    assert all("resumed" not in e and "preempted" not in e for e in (events[0], events[2]))
    result = rundir.read_json(root / "array-1" / rundir.RESULT, rundir.Result)
    assert isinstance(result, rundir.Result) and result.step == 150


def _lines(element: Path) -> list[dict[str, Any]]:
    try:
        text = (element / "metrics.jsonl").read_text()
    except FileNotFoundError:
        return []
    return [json.loads(x) for x in text.splitlines() if x.strip()]


def _trained_steps(element: Path) -> int:
    return max((m["step"] for m in _lines(element) if m["kind"] == "train"), default=0)


def _events(element: Path) -> list[str]:
    return [m["event"] for m in _lines(element) if m["kind"] == "event"]


def test_early_stopping_ends_the_trials_that_fall_behind(hpctrain_home: Path) -> None:
    slow = [
        "--set",
        "train.entrypoint=_runtime_job:slow_digits",
        "--set",
        "train.options.delay_s=0.05",
        "--set",
        f"env.PYTHONPATH={REPO}{os.pathsep}{HERE}",
    ]
    submitted = sweep(
        str(JOBS / "digits-sweep.yaml"),
        "--site",
        "local",
        *slow,
        "--set",
        "train.steps=120",
        "--set",
        "train.eval_every=20",
        "--set",
        "sweep.early_stop.after_steps=20",
        "--set",
        "sweep.early_stop.min_trials=3",
        "--set",
        "sweep.grid={}",
        # Two good learning rates run first (two at a time); the two hopeless ones meet them at step 20.
        "--grid",
        "train.lr=0.01,0.003,1e-7,3e-8",
        "--max-parallel",
        "2",
    )
    summary = wait_done(submitted["sweep_id"])
    states = [t["state"] for t in summary["trials"]]
    assert states == ["COMPLETED", "COMPLETED", "STOPPED", "STOPPED"], summary["trials"]
    root = Path(submitted["run_dir"])
    for trial in summary["trials"][2:]:
        record = json.loads((root / f"array-{trial['index']}" / "stopped.json").read_text())
        assert record["step"] == 20 and record["peers"] >= 2 and record["value"] > record["median"]
        assert "in the worse half" in trial["reason"]
        assert not (root / f"array-{trial['index']}" / "result.json").exists()
