"""Ranks in a container on the real local cluster: pyxis/enroot and Slurm's own OCI support.

digits 2 x 2 trains inside the container through a killed rank (relaunched in the allocation) and a
preemption (checkpoint, requeue, resume), both handled by the batch script and the supervisor on the
host; a command job's wrapper and script run there too. The image is scripts/build-image.sh's; the
runtimes come from scripts/install-containers.sh and scripts/cluster/containers.sh (local-cluster.sh
up). A runtime that is not there skips, saying why.
The repository is mounted into the container and comes first on PYTHONPATH: the ranks run this
checkout's hpctrain, the one the host's supervisor runs.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from hpctrain.rundir.names import BATCH_LOG, LOGS
from tests.conftest import REPO, run_cli
from tests.integration.cluster import make_eligible, require_cluster, run_dir, wait_state
from tests.integration.test_restarts import QUEUE_S, ends, job_file, latest_step, logs
from tests.launcher import wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.slow]
IMAGE_DIR = Path(os.environ.get("HPCTRAIN_IMAGE_DIR", "/opt/hpctrain-image"))
SLURM_CONF_DIR = Path("/etc/slurm")


def missing(runtime: str) -> str | None:
    """Why `runtime` cannot run here, or None."""
    if not (IMAGE_DIR / "hpctrain.sqsh").is_file() or not (IMAGE_DIR / "bundle" / "rootfs").is_dir():
        return f"no image in {IMAGE_DIR}: run scripts/build-image.sh (scripts/install-containers.sh does)"
    if runtime == "pyxis":
        help_text = subprocess.run(["srun", "--help"], capture_output=True, text=True, check=False).stdout
        if "--container-image" not in help_text:
            return "pyxis is not loaded: scripts/install-containers.sh, then scripts/local-cluster.sh up"
    if runtime == "oci" and not (SLURM_CONF_DIR / "oci.conf").is_file():
        return "no oci.conf: scripts/install-containers.sh, then scripts/local-cluster.sh up"
    if runtime == "oci" and os.geteuid() != 0:
        return "the OCI bundle of this test bind-mounts the image's root filesystem: needs root"
    return None


@pytest.fixture
def site_file(tmp_path: Path) -> Path:
    """The local site, with the runtimes this cluster has."""
    data = yaml.safe_load((REPO / "site-configs" / "local.yaml").read_text())
    data["container_runtimes"] = ["pyxis", "oci"]
    path = tmp_path / "local-containers.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture
def oci_bundle(tmp_path: Path) -> Iterator[Path]:
    """An OCI bundle of the image whose config.json also mounts this test's folder and the repository
    (Slurm's OCI support takes mounts from the bundle, not from srun)."""
    bundle = tmp_path / "bundle"
    (bundle / "rootfs").mkdir(parents=True)
    config = json.loads((IMAGE_DIR / "bundle" / "config.json").read_text())
    config["mounts"] += [
        {"destination": str(path), "type": "bind", "source": str(path), "options": ["rbind", "rw"]}
        for path in (tmp_path, REPO)
    ]
    (bundle / "config.json").write_text(json.dumps(config))
    # runc takes no symbolic link for a root: the image's root filesystem, bind-mounted.
    subprocess.run(
        ["mount", "--bind", str(IMAGE_DIR / "bundle" / "rootfs"), str(bundle / "rootfs")], check=True
    )
    try:
        yield bundle
    finally:
        subprocess.run(["umount", "--lazy", str(bundle / "rootfs")], check=False)


def in_container(pid: int) -> bool:
    """The process has a mount namespace of its own (not this host's)."""
    return os.readlink(f"/proc/{pid}/ns/mnt") != os.readlink("/proc/self/ns/mnt")


@pytest.mark.timeout(1500)
@pytest.mark.parametrize("runtime", ["pyxis", "oci"])
def test_digits_trains_in_a_container_through_a_killed_rank_and_a_preemption(
    runtime: str, hpctrain_home: Path, tmp_path: Path, site_file: Path, request: pytest.FixtureRequest
) -> None:
    require_cluster()
    why = missing(runtime)
    if why:
        pytest.skip(f"{runtime}: {why}")
    if runtime == "pyxis":
        container = {
            "image": str(IMAGE_DIR / "hpctrain.sqsh"),
            "mounts": [str(tmp_path), f"{REPO}:{REPO}:ro"],
        }
    else:
        container = {"image": str(request.getfixturevalue("oci_bundle"))}
    # Slurm 22.05 runs one task per node in an OCI container step and gives it no SLURM_PROCID:
    # torchrun starts the node's two ranks there (docs/containers.md).
    launcher = {"launcher": "torchrun"} if runtime == "oci" else {}
    path = job_file(
        tmp_path,
        f"container-{runtime}",
        {"steps": 300, "checkpoint_every": 50},
        resources={"nodes": 2, "tasks_per_node": 2, "time": "00:20:00"},
        container={"runtime": runtime, **container},
        **launcher,
    )
    proc = run_cli("submit", str(path), "--site", str(site_file), "--json", "--no-check")
    assert proc.returncode == 0, proc.stderr
    entry = json.loads(proc.stdout)
    job_id, run = entry["job_id"], run_dir(entry)
    try:
        wait_state(job_id, {"RUNNING"}, timeout=QUEUE_S)
        assert wait_for(lambda: latest_step(run) >= 20, timeout=300), logs(run)
        batch_log = (run / LOGS / BATCH_LOG).read_text()
        assert f"hpctrain container check: node1 ({runtime}): PASS" in batch_log, batch_log
        assert f"hpctrain container check: node2 ({runtime}): PASS" in batch_log, batch_log
        rank_pid = int((run / "pids" / "rank-1").read_text())
        assert in_container(rank_pid), "rank 1 runs on the host"

        # A killed rank: the supervisor (on the host) relaunches the step in the same allocation.
        os.kill(rank_pid, signal.SIGKILL)
        assert wait_for(lambda: [o for o, _ in ends(run)] == ["rank_failure"], timeout=120), logs(run)
        killed_at = latest_step(run)
        assert wait_for(lambda: latest_step(run) > killed_at + 10, timeout=300), logs(run)

        # A preemption: the batch shell's trap, a checkpoint in the container, a requeue from the host.
        subprocess.run(["scancel", "--signal=USR1", "--batch", job_id], check=True)
        assert wait_for(lambda: "preempted" in [o for o, _ in ends(run)], timeout=180), logs(run)
        make_eligible(job_id)
        final = wait_state(job_id, {"COMPLETED"}, timeout=900, poll=5)
        assert final["state"] == "COMPLETED", logs(run)
        assert [o for o, _ in ends(run)] == ["rank_failure", "preempted", "completed"], ends(run)
        result = json.loads((run / "result.json").read_text())
        assert result["world_size"] == 4 and result["eval_accuracy"] >= 0.9, result
        print(f"\n{runtime}: {ends(run)}, eval accuracy {result['eval_accuracy']:.3f}")
    finally:
        subprocess.run(["scancel", job_id], check=False)


@pytest.mark.timeout(600)
def test_a_command_job_runs_the_ddp_example_script_inside_the_container(
    hpctrain_home: Path, tmp_path: Path, site_file: Path
) -> None:
    """The command wrapper and the user's script both run in the image (the script's Python is the
    image's), and the log-parsed progress reaches the run directory from there."""
    require_cluster()
    why = missing("pyxis")
    if why:
        pytest.skip(f"pyxis: {why}")
    steps = 100
    job = yaml.safe_load((REPO / "jobs" / "ddp-script.yaml").read_text())
    job.update(
        name="container-command",
        command=f"python -m hpctrain.examples.ddp_script --steps {steps} --checkpoint_every 50",
        progress={"preset": "step-loss", "total_steps": steps},
        env={**job["env"], "PYTHONPATH": str(REPO)},
        # The workdir (the job file's folder) and the repository, mounted at their own paths.
        container={
            "runtime": "pyxis",
            "image": str(IMAGE_DIR / "hpctrain.sqsh"),
            "mounts": [str(tmp_path), f"{REPO}:{REPO}:ro"],
        },
    )
    path = tmp_path / "container-command.yaml"
    path.write_text(yaml.safe_dump(job))
    proc = run_cli("submit", str(path), "--site", str(site_file), "--json", "--no-check")
    assert proc.returncode == 0, proc.stderr
    entry = json.loads(proc.stdout)
    job_id, run = entry["job_id"], run_dir(entry)
    try:
        pid_file = run / "pids" / "rank-1"  # the script's process, which the wrapper started
        assert wait_for(pid_file.exists, timeout=QUEUE_S + 120), logs(run)
        assert in_container(int(pid_file.read_text())), "rank 1's script runs on the host"
        final = wait_state(job_id, {"COMPLETED"}, timeout=300, poll=2)
        assert final["state"] == "COMPLETED", logs(run)
        batch_log = (run / LOGS / BATCH_LOG).read_text()
        assert "hpctrain container check: node2 (pyxis): PASS" in batch_log, batch_log
        rank_log = (run / LOGS / "rank-0.log").read_text()
        assert f"done: {steps} steps" in rank_log, logs(run)
        assert latest_step(run) == steps, logs(run)  # parsed from the script's output in the container
    finally:
        subprocess.run(["scancel", job_id], check=False)


@pytest.mark.timeout(900)
def test_a_job_whose_image_lacks_hpctrain_ends_once_at_the_container_check(
    hpctrain_home: Path, tmp_path: Path, site_file: Path
) -> None:
    require_cluster()
    why = missing("pyxis")
    if why:
        pytest.skip(f"pyxis: {why}")
    # The test image without its Python packages (hpctrain, torch): a squashfs of a few seconds.
    rootfs = IMAGE_DIR / "bundle" / "rootfs"
    [packages] = rootfs.glob("usr/local/lib/python3*/dist-packages")
    image = tmp_path / "without-hpctrain.sqsh"
    squash = ["mksquashfs", str(rootfs), str(image), "-comp", "lz4", "-noappend", "-quiet", "-no-progress"]
    subprocess.run([*squash, "-e", str(packages.relative_to(rootfs))], check=True, stdout=subprocess.DEVNULL)
    # Not the repository (the job's PYTHONPATH names it): nothing in the container can import hpctrain.
    container = {"runtime": "pyxis", "image": str(image), "mounts": [str(tmp_path)]}
    path = job_file(tmp_path, "container-without-hpctrain", {"steps": 50}, container=container)
    proc = run_cli("submit", str(path), "--site", str(site_file), "--json", "--no-check")
    assert proc.returncode == 0, proc.stderr
    entry = json.loads(proc.stdout)
    job_id, run = entry["job_id"], run_dir(entry)
    try:
        final = wait_state(job_id, set(), timeout=QUEUE_S + 300, poll=2)
        batch_log = (run / LOGS / BATCH_LOG).read_text()
        assert final["state"] == "FAILED", (final, batch_log)
        [reason] = [line for line in batch_log.splitlines() if "No module named" in line]
        assert "hpctrain" in reason, batch_log
        assert batch_log.count("the container check failed on a node") == 1, batch_log
        assert ends(run) == [] and latest_step(run) == 0, logs(run)  # no training step started
        assert not list((run / LOGS).glob("rank-*.log")), logs(run)
    finally:
        subprocess.run(["scancel", job_id], check=False)


@pytest.mark.timeout(900)
def test_a_preflight_failure_on_every_node_in_a_container_fails_the_job_with_code_3(
    hpctrain_home: Path, tmp_path: Path, site_file: Path
) -> None:
    """Issue 36: inside the container preflight cannot ask scontrol how many nodes would be left, and
    asked for a requeue without both nodes (the job then pended for good, BadConstraints). The host's
    supervisor refuses that requeue: the job fails with exit code 3, the reason in `status`."""
    require_cluster()
    why = missing("pyxis")
    if why:
        pytest.skip(f"pyxis: {why}")
    container = {
        "runtime": "pyxis",
        "image": str(IMAGE_DIR / "hpctrain.sqsh"),
        "mounts": [f"{REPO}:{REPO}:ro"],
    }
    path = job_file(
        tmp_path,
        "container-preflight",
        {"steps": 50},
        resources={"nodes": 2, "tasks_per_node": 2, "partition": "debug", "gpus_per_node": 2},
        container=container,
        preflight=True,
    )
    # The test hook hides both nodes' GPUs; sbatch passes it on to the job (a spec's env may not set it).
    hide = {"HPCTRAIN_PREFLIGHT_HIDE_GPUS": "node1,node2"}
    proc = run_cli("submit", str(path), "--site", str(site_file), "--json", "--no-check", env=hide)
    assert proc.returncode == 0, proc.stderr
    entry = json.loads(proc.stdout)
    job_id, run = entry["job_id"], run_dir(entry)
    try:
        final = wait_state(job_id, set(), timeout=QUEUE_S)
        assert final["state"] == "FAILED", logs(run)
        assert (run / "exit-codes").read_text().splitlines()[-1] == f"{job_id} 3", logs(run)
        (last,) = [outcome for outcome, _ in ends(run)]
        assert last == "failed", ends(run)
        shown = run_cli("status", job_id).stdout
        assert "not retried:" in shown and "would leave 0 node(s) for a job of 2" in shown, shown
    finally:
        subprocess.run(["scancel", job_id], check=False)
