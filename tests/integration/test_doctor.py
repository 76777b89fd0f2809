"""init-site and doctor on the real local cluster; a preflight that finds a slow node requeues its job.

Fault injection: a profile claiming more GPUs than the nodes have (a modified copy of local.yaml);
a slow node through HPCTRAIN_PREFLIGHT_DELAY=node2:SECONDS, which hpctrain.runtime.preflight honours
(each timed all-reduce on node2 waits that long first); a dead slurmd (node2), restored afterwards.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import msgspec
import pytest
import yaml

from hpctrain.rundir import RunDir
from hpctrain.rundir.attempts import History
from hpctrain.scheduler.slurm.facts import ClusterFacts, expedited_requeue
from hpctrain.site import containers
from hpctrain.spec import load_site
from tests.conftest import JOBS, SITES, run_cli
from tests.integration.cluster import require_cluster, scontrol_job, submit, wait_state

pytestmark = [pytest.mark.cluster]


def doctor(*args: str, env: dict[str, str] | None = None) -> tuple[int, dict]:
    proc = run_cli("doctor", *args, "--json", env=env, timeout=300)
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def statuses(report: dict, scope: str, check: str) -> list[str]:
    return [f["status"] for f in report["findings"] if f["scope"] == scope and f["check"].startswith(check)]


def test_init_site_agrees_with_local_yaml_and_runs_digits(tmp_path: Path, hpctrain_home: Path) -> None:
    require_cluster()
    target = tmp_path / "generated.yaml"
    proc = run_cli("init-site", "generated", "-o", str(target), timeout=200)
    assert proc.returncode == 0, proc.stderr
    made, shipped = load_site(target), load_site(SITES / "local.yaml")
    # Issue 23 item 22: the same profile, field by field, but for its name and description. The cpu
    # partition has the GPUs Slurm lets its jobs have (its nodes have gpu:4, its TRES gres/gpu=8):
    # local.yaml claimed 0, which Slurm does not enforce.
    told, written = msgspec.to_builtins(made), msgspec.to_builtins(shipped)
    for key in ("name", "description"):
        told.pop(key), written.pop(key)
    # local.yaml lists no container runtime (the test machine may lack them); init-site lists those
    # the cluster has: pyxis and oci where scripts/install-containers.sh could build them.
    facts = ClusterFacts.read()
    found = list(containers.detect(facts))
    assert told.pop("container_runtimes") == found and written.pop("container_runtimes") == []
    # local.yaml describes the 22.05 cluster, which takes no --requeue=expedite; init-site asks for it
    # where the cluster takes it (the 25.11 and 26.05 clusters of scripts/slurm-matrix.sh).
    assert told.pop("expedited_requeue") is expedited_requeue(facts.config)
    assert written.pop("expedited_requeue") is False
    assert list(made.partitions) == list(shipped.partitions)
    for name in written["partitions"]:
        assert told["partitions"][name] == written["partitions"][name], name
    assert told == written
    assert "Partitions debug and cpu share 2 GPU node(s)" in target.read_text()
    # The local cluster keeps accounting (slurmdbd): init-site reads this user's accounts from it.
    assert "No accounting" not in target.read_text() and "Accounts you can charge: root" in target.read_text()
    assert "MaxArraySize 1001" in target.read_text()
    # The command it prints finds the file it wrote; a second run keeps it unless --force.
    printed = proc.stdout.split("then: ", 1)[1].split()
    assert printed[:3] == ["hpctrain", "doctor", "--site"], proc.stdout
    doctored = run_cli(*printed[1:], timeout=300)
    assert doctored.returncode == 0 and "doctor: PASS (site generated)" in doctored.stdout, doctored.stdout
    again = run_cli("init-site", "generated", "-o", str(target), "--no-probe", timeout=200)
    assert again.returncode == 2 and f"not overwriting {target}" in again.stderr

    proc = run_cli(
        "submit",
        str(JOBS / "digits-ddp.yaml"),
        "--site",
        str(target),
        "--set",
        "train.steps=20",
        "--wait",
        timeout=400,
    )
    assert proc.returncode == 0 and "COMPLETED" in proc.stdout, proc.stdout + proc.stderr


def test_a_job_submitted_without_sbin_on_path_sees_its_fake_gpus(hpctrain_home: Path) -> None:
    """A normal user's PATH has no /usr/sbin: preflight must still find slurmd for the gres files."""
    require_cluster()
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if "sbin" not in p)
    env = {"PATH": path}
    done = submit(JOBS / "digits-ddp.yaml", "train.steps=20", env=env)
    entry = wait_state(done["job_id"], {"COMPLETED", "FAILED"}, timeout=300, env=env)
    assert entry["state"] == "COMPLETED", entry
    report = json.loads(RunDir(entry["run_dir"]).preflight_report.read_text())
    first = [facts for facts in report["facts"] if facts["local_rank"] == 0]
    assert [(f["gpus_asked"], f["gpus_seen"]) for f in first] == [(2, 4), (2, 4)], first


def test_doctor_passes_on_the_shipped_profile(hpctrain_home: Path) -> None:
    require_cluster()
    code, report = doctor("--site", "local")
    assert code == 0, report
    assert statuses(report, "node1", "versions") == ["PASS"] and statuses(
        report, "node2", "node all-reduce"
    ) == ["PASS"]
    assert statuses(report, "cluster", "accounting") == ["PASS"]


def test_doctor_catches_more_gpus_than_the_nodes_have(tmp_path: Path, hpctrain_home: Path) -> None:
    require_cluster()
    data = yaml.safe_load((SITES / "local.yaml").read_text())
    data["partitions"]["debug"]["gpus_per_node"] = 8
    data["network"]["expected_busbw_gbps"] = 10000.0
    path = tmp_path / "greedy.yaml"
    path.write_text(yaml.safe_dump(data))
    code, report = doctor("--site", str(path))
    assert code == 1
    assert statuses(report, "node1", "gpus (debug)") == ["FAIL"] and statuses(
        report, "node2", "gpus (debug)"
    ) == ["FAIL"]
    assert statuses(report, "cluster", "all-reduce") == ["FAIL"]
    assert report["bad_nodes"] == ["node1", "node2"]


def test_doctor_names_a_throttled_node(hpctrain_home: Path) -> None:
    require_cluster()
    proc = run_cli("doctor", "--site", "local", env={"HPCTRAIN_PREFLIGHT_DELAY": "node2:0.1"}, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "submit with --exclude=node2\n" in proc.stdout, proc.stdout
    tables = {block.split("\n", 1)[0]: block for block in proc.stdout.split("== ")[1:]}
    verdict = {
        node: [line for line in tables[node].splitlines() if line.startswith("node all-reduce")]
        for node in ("node1", "node2")
    }
    assert "FAIL" in verdict["node2"][0] and "PASS" in verdict["node1"][0], proc.stdout


def test_preflight_requeues_without_a_bad_node_until_none_is_left(hpctrain_home: Path) -> None:
    require_cluster()
    # Both nodes "lose" their GPUs: the first run excludes the node it ran on and requeues; the
    # second run, on the other node, cannot exclude it too (nothing would be left) and fails.
    env = {"HPCTRAIN_PREFLIGHT_HIDE_GPUS": "node1,node2"}
    job = submit(JOBS / "digits-ddp.yaml", "preflight=true", "resources.nodes=1", env=env)
    job_id, run_dir = job["job_id"], Path(job["run_dir"])
    try:
        # The requeue starts the job again at once (StartTime=now): the first verdict is read from
        # attempts.jsonl, where the supervisor recorded it, not from preflight.json, which the
        # second run rewrites.
        final = wait_state(job_id, set(), timeout=300, env=None)
        assert final["state"] == "FAILED", final
        first, last = History.read(RunDir(run_dir)).ends
        assert first.outcome == "preflight" and len(first.failed_nodes) == 1, first
        assert f"ExcNodeList={first.failed_nodes[0]}" in scontrol_job(job_id), scontrol_job(job_id)
        second = json.loads((run_dir / "preflight.json").read_text())
        assert second["requeue"] is False and second["bad_nodes"] != first.failed_nodes, second
        assert "would have 0 node(s) left" in second["no_requeue_because"], second
        assert last.outcome == "failed" and "would have 0 node(s) left" in last.reason, last
        log = (run_dir / "logs" / "batch.log").read_text()
        assert f"preflight failed on {first.failed_nodes[0]}" in log, log
    finally:
        subprocess.run(["scancel", job_id], check=False)


def restore_node2() -> None:
    """Bring node2's slurmd back the way scripts/local-cluster.sh starts it, then recover the node."""
    if subprocess.run(["pgrep", "-f", "slurmd -N node2"], capture_output=True).returncode != 0:
        subprocess.run(["slurmd", "-N", "node2"], check=False)
    subprocess.run(
        [str(Path(__file__).resolve().parents[2] / "scripts" / "local-cluster.sh"), "recover"],
        check=False,
        timeout=300,
    )


@pytest.mark.skipif(
    os.environ.get("HPCTRAIN_DISRUPTIVE") != "1",
    reason="kills node2's slurmd: set HPCTRAIN_DISRUPTIVE=1 on a cluster no one else uses",
)
def test_doctor_catches_a_dead_slurmd(hpctrain_home: Path) -> None:
    require_cluster()
    if subprocess.run(["squeue", "-h"], capture_output=True, text=True).stdout.strip():
        pytest.skip("jobs are running: killing a slurmd would disturb them")
    pid = subprocess.run(["pgrep", "-f", "slurmd -N node2"], capture_output=True, text=True).stdout.split()
    assert pid, "no slurmd for node2"
    try:
        subprocess.run(["kill", pid[0]], check=True)
        deadline = time.monotonic() + 150
        state = ""
        while time.monotonic() < deadline:
            state = subprocess.run(
                ["scontrol", "show", "node", "node2"], capture_output=True, text=True
            ).stdout
            if "NOT_RESPONDING" in state or "DOWN" in state:
                break
            time.sleep(2)
        code, report = doctor("--site", "local")
        assert code == 1 and statuses(report, "node2", "state") == ["FAIL"], report
        assert statuses(report, "node1", "node all-reduce") == ["PASS"]
        assert "node2" in report["bad_nodes"]
    finally:
        restore_node2()
