"""The login-node CLI against the real local Slurm: render, submit, status, logs, cancel, list."""

from __future__ import annotations

import concurrent.futures
import re
import subprocess
import time
from pathlib import Path

import pytest

from hpctrain import spec
from hpctrain.scheduler.render import render
from tests.conftest import JOBS, REPO, SITES, run_cli
from tests.integration.cluster import require_cluster, run_dir, status, submit, wait_state

pytestmark = pytest.mark.cluster

QUICK = ["train.steps=30", "train.log_every=10", "train.eval_every=0", "train.checkpoint_every=0"]


@pytest.fixture(autouse=True)
def _cluster() -> None:
    require_cluster()


def local_jobs() -> list[Path]:
    site = spec.load_site(SITES / "local.yaml")
    out = []
    for job in sorted(JOBS.glob("*.yaml")):
        try:
            spec.resolve(spec.load_job(job), site)
        except spec.SpecError:
            continue
        out.append(job)
    return out


@pytest.mark.parametrize("job", local_jobs(), ids=lambda p: p.stem)
def test_slurm_accepts_every_rendered_job(job: Path, tmp_path: Path) -> None:
    resolved = spec.resolve(spec.load_job(job), spec.load_site(SITES / "local.yaml"))
    script = tmp_path / "job.sbatch"
    script.write_text(render(resolved, tmp_path / "run"))
    proc = subprocess.run(["sbatch", "--test-only", str(script)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "to start at" in proc.stderr


def test_submit_status_logs_list(hpctrain_home: Path) -> None:
    done = submit(JOBS / "digits-ddp.yaml", *QUICK)
    job_id = done["job_id"]
    assert re.fullmatch(r"\d+", job_id)
    entry = wait_state(job_id, {"COMPLETED"}, timeout=300)
    assert entry["state"] == "COMPLETED", entry
    rdir = run_dir(entry)
    for name in ("job.sbatch", "spec.json", "record.json", "submit.json"):
        assert (rdir / name).exists(), name
    assert entry["progress"]["result"]["step"] == 30
    # Status reads the runtime's metrics: the table names the step and the loss.
    table = run_cli("status", job_id).stdout
    assert "COMPLETED" in table and "30/30" in table
    logs = run_cli("logs", job_id)
    assert logs.returncode == 0 and f"job {job_id}" in logs.stdout
    rank3 = run_cli("logs", job_id, "--rank", "3")
    assert rank3.returncode == 0 and rank3.stdout.strip()
    listing = run_cli("list").stdout
    assert job_id in listing and "digits-ddp" in listing


def test_submit_wait_returns_job_outcome(hpctrain_home: Path) -> None:
    proc = run_cli(
        "submit",
        str(JOBS / "digits-ddp.yaml"),
        "--site",
        "local",
        "--wait",
        *[arg for item in QUICK for arg in ("--set", item)],
        timeout=400,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "COMPLETED" in proc.stdout


def test_cancel_running_job(hpctrain_home: Path) -> None:
    done = submit(JOBS / "digits-ddp.yaml", "train.steps=100000", "train.checkpoint_every=0")
    job_id = done["job_id"]
    entry = wait_state(job_id, {"RUNNING"}, timeout=120)
    assert entry["state"] == "RUNNING", entry
    proc = run_cli("cancel", job_id)
    assert proc.returncode == 0, proc.stderr
    entry = wait_state(job_id, {"CANCELLED"}, timeout=60)
    assert entry["state"] == "CANCELLED"
    shown = run_cli("status").stdout.splitlines()
    row = next(line for line in shown if line.startswith(job_id))
    assert row.split()[2:5] == ["CANCELLED", "(by", "you)"], shown
    assert not [line for line in shown if f"job {job_id}" in line], shown  # no failure block per rank


def test_a_job_you_scancel_yourself_is_cancelled_by_you(hpctrain_home: Path) -> None:
    """Not through hpctrain: only sacct's `CANCELLED by UID` says who, while squeue still lists it."""
    done = submit(JOBS / "digits-ddp.yaml", "train.steps=100000", "train.checkpoint_every=0")
    job_id = done["job_id"]
    assert wait_state(job_id, {"RUNNING"}, timeout=120)["state"] == "RUNNING"
    subprocess.run(["scancel", job_id], check=True)
    entry = wait_state(job_id, {"CANCELLED"}, timeout=60)
    assert entry["state"] == "CANCELLED" and entry.get("cancelled_by") == "you", entry


def test_concurrent_submits_are_all_recorded(hpctrain_home: Path) -> None:
    def one(_: int) -> subprocess.CompletedProcess[str]:
        return run_cli(
            "submit",
            str(JOBS / "digits-ddp.yaml"),
            "--site",
            "local",
            "--json",
            "--set",
            "train.steps=2",
            "--set",
            "train.checkpoint_every=0",
        )

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        results = list(pool.map(one, range(4)))
    assert all(r.returncode == 0 for r in results), [r.stderr for r in results]
    listing = run_cli("list", "--json").stdout
    import json

    runs = json.loads(listing)
    assert len(runs) == 4 and len({r["job_id"] for r in runs}) == 4
    subprocess.run(["scancel", *[r["job_id"] for r in runs]], check=False)


def test_sbatch_refusal_keeps_the_record(hpctrain_home: Path, tmp_path: Path) -> None:
    # The profile claims a partition the cluster does not have: the real sbatch refuses it.
    site = (SITES / "local.yaml").read_text().replace("  cpu:\n", "  ghost:\n")
    (tmp_path / "ghost.yaml").write_text(site.replace("name: local", "name: ghost"))
    proc = run_cli(
        "submit",
        str(JOBS / "digits-ddp.yaml"),
        "--site",
        str(tmp_path / "ghost.yaml"),
        "--set",
        "resources.partition=ghost",
        "--set",
        "resources.gpus_per_node=0",
        "--set",
        "resources.tasks_per_node=2",
    )
    assert proc.returncode == 1
    assert "sbatch failed" in proc.stderr and "partition" in proc.stderr.lower()
    assert "Traceback" not in proc.stderr
    (rdir,) = (hpctrain_home / "runs").iterdir()
    assert (rdir / "job.sbatch").exists() and (rdir / "spec.json").exists()


def test_unreachable_controller_is_a_clear_error(hpctrain_home: Path, tmp_path: Path) -> None:
    done = submit(JOBS / "digits-ddp.yaml", "train.steps=2")
    conf = Path("/etc/slurm/slurm.conf").read_text()
    conf = re.sub(r"(?m)^SlurmctldPort=.*$", "", conf)
    conf = re.sub(r"(?m)^MessageTimeout=.*$", "", conf)
    bad = tmp_path / "slurm.conf"
    bad.write_text(conf + "\nSlurmctldPort=1\nMessageTimeout=2\n")
    start = time.monotonic()
    proc = run_cli("status", done["job_id"], env={"SLURM_CONF": str(bad), "HPCTRAIN_SLURM_TIMEOUT": "20"})
    elapsed = time.monotonic() - start
    assert proc.returncode == 1, proc.stdout
    assert "cannot reach the Slurm controller" in proc.stderr or "did not answer" in proc.stderr, proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert elapsed < 60
    subprocess.run(["scancel", done["job_id"]], check=False)


def test_status_costs_one_squeue_rpc(hpctrain_home: Path) -> None:
    # The jobs wait behind a held job, so nothing starts or ends (and talks to slurmctld) meanwhile.
    hold = (
        subprocess.run(
            ["sbatch", "--parsable", "--hold", "--wrap", "true"], capture_output=True, text=True, check=True
        )
        .stdout.strip()
        .split(";")[0]
    )
    try:
        ids = [
            submit(JOBS / "digits-ddp.yaml", "train.steps=2", f"dependency=afterok:{hold}")["job_id"]
            for _ in range(3)
        ]
        before = rpc_counts()
        proc = run_cli("status")
        after = rpc_counts()
    finally:
        subprocess.run(["scancel", hold], check=False)
    assert proc.returncode == 0 and all(i in proc.stdout for i in ids)
    spent = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    spent = {k: v for k, v in spent.items() if v}
    # sdiag's own request is counted too; everything else is the status poll's.
    total = sum(v for k, v in spent.items() if k != "REQUEST_STATS_INFO")
    assert total <= 2, spent
    subprocess.run(["scancel", *ids], check=False)


def rpc_counts() -> dict[str, int]:
    out = subprocess.run(["sdiag"], capture_output=True, text=True, check=True).stdout
    section = out.split("Remote Procedure Call statistics by message type", 1)[1]
    section = section.split("Remote Procedure Call statistics by user", 1)[0]
    counts = {}
    for line in section.splitlines():
        match = re.match(r"\s+(\w+)\s+\(\s*\d+\)\s+count:(\d+)", line)
        if match:
            counts[match.group(1)] = int(match.group(2))
    return counts


def test_status_without_accounting(hpctrain_home: Path) -> None:
    """sacct fails on a cluster without accounting; status must still tell how a job ended."""
    toggle = REPO / "scripts" / "local-cluster.sh"
    subprocess.run([str(toggle), "accounting", "off"], check=True, capture_output=True, timeout=300)
    try:
        assert subprocess.run(["sacct", "-n"], capture_output=True, check=False).returncode != 0
        done = submit(JOBS / "digits-ddp.yaml", *QUICK)
        entry = wait_state(done["job_id"], {"COMPLETED"}, timeout=300)
        assert entry["state"] == "COMPLETED", entry
    finally:
        subprocess.run([str(toggle), "accounting", "on"], check=True, capture_output=True, timeout=300)
    assert status(done["job_id"])["state"] == "COMPLETED"


def test_logs_follow_and_status_watch_end_with_the_job(hpctrain_home: Path) -> None:
    done = submit(JOBS / "digits-ddp.yaml", *QUICK)
    follow = run_cli("logs", done["job_id"], "-f", timeout=300)
    assert follow.returncode == 0, follow.stderr
    assert "step ended with exit code 0" in follow.stdout
    watch = run_cli("status", done["job_id"], "--watch", "--interval", "1", timeout=120)
    assert watch.returncode == 0
    assert "COMPLETED" in watch.stdout
