"""Automatic restarts on the real local cluster, through `hpctrain submit` and `hpctrain status`.

A killed rank is relaunched in the same allocation; a lost batch host is requeued by Slurm and the
run resumes on the other node from its checkpoint, bitwise equal to an uninterrupted run; a job
that needs three allocations gets there through the time-limit path; a bug is not retried.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from hpctrain.rundir import RunDir
from hpctrain.rundir.attempts import History
from hpctrain.runtime import startup_times
from hpctrain.scheduler.slurm.facts import ClusterFacts, expedited_requeue
from tests.conftest import REPO, run_cli
from tests.integration import faults
from tests.integration.cluster import require_cluster, run_dir, scontrol_job, wait_state
from tests.launcher import metrics, wait_for

pytestmark = pytest.mark.cluster
HERE = Path(__file__).resolve().parent
QUEUE_S = 600  # a test job may wait this long behind other helpers' jobs on the shared cluster


@pytest.fixture(autouse=True)
def _cluster() -> None:
    require_cluster()


def job_file(folder: Path, name: str, train: dict[str, Any], **job: Any) -> Path:
    """A digits job on the CPU partition with the test entrypoints on its Python path."""
    resources = {"nodes": 1, "tasks_per_node": 1, "partition": "cpu", "mem": "2G", "time": "00:10:00"}
    resources.update(job.pop("resources", {}))
    data: dict[str, Any] = {
        "name": name,
        "resources": resources,
        "train": {
            "entrypoint": "_runtime_job:slow_digits",
            "steps": 200,
            "batch_size": 64,
            "lr": 0.003,
            "log_every": 10,
            "deterministic": True,
            "options": {"delay_s": 0.05},
            **train,
        },
        "env": {"PYTHONPATH": os.pathsep.join([str(REPO), str(HERE)]), "OMP_NUM_THREADS": 1},
        **job,
    }
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def submit(path: Path, site: str = "local") -> dict[str, Any]:
    """`hpctrain submit` (the test entrypoints import only inside the job: --no-check)."""
    proc = run_cli("submit", str(path), "--site", site, "--json", "--no-check")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def latest_step(run: Path) -> int:
    return max((m["step"] for m in metrics(run) if m.get("kind") == "train"), default=0)


def logs(run: Path) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text()[-2500:]}" for p in sorted((run / "logs").glob("*.log")))


def ends(run: Path) -> list[tuple[str, list[str]]]:
    return [(line.outcome, line.failed_nodes) for line in History.read(RunDir(run)).ends]


def status_text(job_id: str) -> str:
    proc = run_cli("status", job_id)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def submit_two_by_two(folder: Path, name: str, train: dict[str, Any], **job: Any) -> tuple[str, Path]:
    """A 2 x 2 digits job, submitted: its job id and run directory."""
    entry = submit(job_file(folder, name, train, resources={"nodes": 2, "tasks_per_node": 2}, **job))
    return entry["job_id"], run_dir(entry)


def test_killed_rank_is_relaunched_in_place_and_completes(hpctrain_home: Path, tmp_path: Path) -> None:
    job_id, run = submit_two_by_two(tmp_path, "restart-rank", {"steps": 300, "checkpoint_every": 50})
    try:
        wait_state(job_id, {"RUNNING"}, timeout=QUEUE_S)
        assert wait_for(lambda: latest_step(run) >= 20, timeout=120), logs(run)
        os.kill(int((run / "pids" / "rank-1").read_text()), signal.SIGKILL)
        killed = time.time()
        final = wait_state(job_id, set(), timeout=400)
        assert final["state"] == "COMPLETED", logs(run)
        assert [outcome for outcome, _ in ends(run)] == ["rank_failure", "completed"], ends(run)
        history = History.read(RunDir(run))
        assert {line.job_id for line in history.lines} == {job_id}  # one allocation: no queue
        first_end, second_start = history.lines[1], history.lines[2]
        # Blamed: the rank killed, not a peer that reported losing it.
        assert first_end.reason.startswith("rank 1 on node1: Killed"), first_end.reason
        print(
            f"\nrank killed: {first_end.reason}\nstep ended after {first_end.time - killed:.0f} s, "
            f"relaunched after {second_start.time - killed:.0f} s"
        )
        assert "Restarts=0" in scontrol_job(job_id) or "Restarts" not in scontrol_job(job_id)
        assert final["restarts"]["restarts"] == 1 and final["restarts"]["max"] == 3, final
        assert json.loads((run / "record.json").read_text())["restarts"]["restarts"] == 1
        assert "restarts: 1 of 3 (rank_failure" in status_text(job_id)
        assert (run / "failures" / "attempt-0").is_dir() or not (run / "failures").exists()
    finally:
        subprocess.run(["scancel", job_id], check=False)


def parent_of(pid: int) -> tuple[int, str]:
    """The parent's pid and command line of a process on this host."""
    parent = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    return parent, Path(f"/proc/{parent}/cmdline").read_bytes().replace(b"\0", b" ").decode()


@pytest.mark.parametrize("launcher", ["fork", "torchrun", "mpi"])
def test_a_killed_rank_is_relaunched_under_the_other_launchers(
    launcher: str, hpctrain_home: Path, tmp_path: Path
) -> None:
    """The supervisor's loop is the launchers' own: under fork (one task per node forks its ranks),
    torchrun (one agent per node) and mpi the killed rank's step ends too, and the next attempt
    resumes in the same allocation."""
    train = {"steps": 200, "checkpoint_every": 20}
    job_id, run = submit_two_by_two(tmp_path, f"restart-{launcher}", train, launcher=launcher)
    try:
        wait_state(job_id, {"RUNNING"}, timeout=QUEUE_S)
        assert wait_for(lambda: latest_step(run) >= 30, timeout=240), logs(run)
        pids = [int((run / "pids" / f"rank-{rank}").read_text()) for rank in range(4)]
        if launcher == "fork":  # a node's two ranks are forked by one task that imported torch for both
            parents = [parent_of(pid) for pid in pids]
            assert parents[0] == parents[1] and parents[2] == parents[3] != parents[0], parents
            assert "hpctrain.runtime.fork_ranks 2" in parents[0][1], parents
        os.kill(pids[1], signal.SIGKILL)
        final = wait_state(job_id, set(), timeout=400)
        assert final["state"] == "COMPLETED", logs(run)
        assert [outcome for outcome, _ in ends(run)] == ["rank_failure", "completed"], ends(run)
        assert {line.job_id for line in History.read(RunDir(run)).lines} == {job_id}  # no queue
        resumed = events(run, "resumed")
        assert resumed and resumed[-1]["step"] >= 20, resumed
        assert json.loads((run / "result.json").read_text())["step"] == 200
        if launcher == "fork":
            # srun saw the node's task exit 137; its report names the rank the signal ended.
            reason = History.read(RunDir(run)).lines[1].reason
            assert reason.startswith("rank 1 on node1: Killed"), reason
            for rank in range(4):  # srun's place for each rank, in its own log
                local, node = rank % 2, rank // 2
                assert (
                    f"rank {rank}/4 local {local} node {node} via srun"
                    in (run / "logs" / f"rank-{rank}.log").read_text()
                ), rank
            startups = [e["detail"] for e in events(run, "startup")]
            assert len(startups) == 2 and all(s["torch"] > 0 and not s["warm"] for s in startups), startups
    finally:
        subprocess.run(["scancel", job_id], check=False)


def test_a_killed_rank_restarts_in_the_warm_standby_step(hpctrain_home: Path, tmp_path: Path) -> None:
    """The restart hands the attempt to the standby step, whose tasks imported torch before the kill."""
    job_id, run = submit_two_by_two(
        tmp_path,
        "restart-warm",
        {"steps": 1200, "checkpoint_every": 50},
        restart={"warm_standby": True, "standby_delay": 0},  # ready at once, not after a first step
    )
    standby = run / "standby" / "1"
    try:
        wait_state(job_id, {"RUNNING"}, timeout=QUEUE_S)
        ready = lambda: len(list(standby.glob("ready-node*"))) == 4  # noqa: E731
        assert wait_for(ready, timeout=240), logs(run)
        cold_started = lambda: any(m.get("event") == "startup" for m in metrics(run))  # noqa: E731
        assert wait_for(cold_started, timeout=120), logs(run)  # its first step is done
        assert latest_step(run) < 1000, "the job ran out of steps before its standby was ready"
        standby_step = {p.read_text() for p in standby.glob("ready-node*")}
        os.kill(int((run / "pids" / "rank-1").read_text()), signal.SIGKILL)
        killed = time.time()
        final = wait_state(job_id, set(), timeout=400)
        assert final["state"] == "COMPLETED", logs(run)
        assert [outcome for outcome, _ in ends(run)] == ["rank_failure", "completed"], ends(run)
        batch_log = (run / "logs" / "batch.log").read_text()
        assert "attempt 1 runs in the warm standby steps" in batch_log, batch_log
        warm = [p for p in (run / "logs").glob("rank-*.log") if "warm start after" in p.read_text()]
        assert len(warm) == 4, logs(run)
        # Attempt 1's ranks are the standby step's tasks (their heartbeats name the step).
        history = History.read(RunDir(run))
        second = history.lines[2]
        trained = [m for m in metrics(run) if m.get("kind") == "train" and m["time"] > second.time]
        assert trained, logs(run)
        # Each attempt's start-up, part by part: the warm one counts from its take, after the kill,
        # and has neither preflight nor a torch import of its own.
        startups = [m["detail"] for m in metrics(run) if m.get("event") == "startup"]
        assert [s["warm"] for s in startups] == [False, True], startups
        cold, warm_start = startups
        assert set(startup_times.PARTS) - {"preflight"} <= set(cold), startups
        assert "preflight" not in warm_start and warm_start["began"] > killed, startups
        assert all(seconds >= 0 for part, seconds in warm_start.items() if part not in ("began", "warm"))
        print(
            f"\nstandby step {standby_step}; relaunched {second.time - killed:.1f} s after the kill, "
            f"training again {trained[0]['time'] - killed:.1f} s after it"
        )
        assert len(standby_step) == 2  # a step per node
    finally:
        subprocess.run(["scancel", job_id], check=False)


def test_a_repeated_bug_is_not_retried(hpctrain_home: Path, tmp_path: Path) -> None:
    # The entrypoint counts forwards from its process's start, so every attempt must start at step 0:
    # no memory checkpoint to resume from (a real data bug recurs at its step whatever the resume).
    train = {"entrypoint": "_runtime_job:raises_at_step", "options": {"at": 7}, "memory_checkpoint_every": 0}
    path = job_file(tmp_path, "restart-bug", train)
    entry = submit(path)
    job_id, run = entry["job_id"], run_dir(entry)
    try:
        wait_state(job_id, {"RUNNING"}, timeout=QUEUE_S)
        final = wait_state(job_id, set(), timeout=300)
        assert final["state"] == "FAILED", logs(run)
        # The first failure is retried (a fault, as far as anyone can tell); the same exception at
        # the same step again is a bug: no third attempt.
        assert [outcome for outcome, _ in ends(run)] == ["rank_failure", "failed"], ends(run)
        text = status_text(job_id)
        assert "not retried" in text and "at step 7 again" in text, text
    finally:
        subprocess.run(["scancel", job_id], check=False)


def events(run: Path, name: str) -> list[dict[str, Any]]:
    return [m for m in metrics(run) if m.get("kind") == "event" and m.get("event") == name]


def same_weights(a: Path, b: Path) -> None:
    first, second = torch.load(a / "final_model.pt"), torch.load(b / "final_model.pt")
    assert first.keys() == second.keys()
    for key in first:
        assert torch.equal(first[key], second[key]), key


def test_lost_batch_node_resumes_on_the_other_node_bitwise(hpctrain_home: Path, tmp_path: Path) -> None:
    train = {"steps": 300, "checkpoint_every": 20, "export_final": True, "options": {"delay_s": 0.1}}
    reference = submit(job_file(tmp_path / "ref", "restart-ref", train, resources={"nodelist": ["node1"]}))
    entry = submit(job_file(tmp_path, "restart-node", train, resources={"nodelist": ["node2"]}))
    job_id, run = entry["job_id"], run_dir(entry)
    try:
        wait_state(job_id, {"RUNNING"}, timeout=QUEUE_S)
        assert wait_for(lambda: any(e["step"] >= 40 for e in events(run, "checkpoint")), timeout=240), logs(
            run
        )
        faults.kill_node("node2")
        killed = time.monotonic()
        # Slurm notices at SlurmdTimeout and requeues (NODE_FAIL); each `hpctrain status` poll that
        # then sees it held (BeginTime) excludes node2, drops the pin and starts it at once.
        assert wait_for(lambda: "JobState=PENDING" in scontrol_job(job_id), timeout=240, interval=0.5)
        requeued = time.monotonic()
        wait_state(job_id, {"RUNNING"}, timeout=QUEUE_S, poll=0.5)
        running = time.monotonic()
        final = wait_state(job_id, set(), timeout=600)
        assert final["state"] == "COMPLETED", logs(run)
        assert ends(run) == [("node_failure", ["node2"]), ("completed", [])], ends(run)
        history = History.read(RunDir(run))
        assert [line.nodes for line in history.lines if line.event == "start"] == [["node2"], ["node1"]]
        resumed = events(run, "resumed")
        assert resumed and resumed[0]["step"] >= 40, resumed
        assert "ExcNodeList=node2" in scontrol_job(job_id)
        text = status_text(job_id)
        assert "restarts: 1 of 3 (node_failure node2), excluded: node2" in text, text
        print(
            f"\nnode2 lost: requeued after {requeued - killed:.0f} s, running again after "
            f"{running - requeued:.0f} s pending, {running - killed:.0f} s in all"
        )
        assert wait_state(reference["job_id"], set(), timeout=600)["state"] == "COMPLETED"
        same_weights(run_dir(reference), run)
    finally:
        subprocess.run(["scancel", job_id, reference["job_id"]], check=False)
        faults.recover_nodes()


def test_lost_batch_node_with_expedited_requeue_runs_again_without_a_poll(
    hpctrain_home: Path, tmp_path: Path
) -> None:
    """Issue 25 item 4: on a cluster that takes --requeue=expedite (Slurm 25.05+ with
    enable_expedited_requeue), a job whose batch node is lost is requeued and started again by
    Slurm itself: no 120 s hold, no `hpctrain status` poll to release it (nothing polls here)."""
    config = ClusterFacts.read().config
    if not expedited_requeue(config):
        version = config.get("SLURM_VERSION", "?")
        pytest.skip(
            f"Slurm {version} here takes no --requeue=expedite (25.05+ and enable_expedited_requeue): "
            "scripts/slurm-matrix.sh --slurm 25.11 runs this test"
        )
    site = tmp_path / "expedite.yaml"
    profile = yaml.safe_load((REPO / "site-configs" / "local.yaml").read_text())
    site.write_text(yaml.safe_dump({**profile, "name": "expedite", "expedited_requeue": True}))
    train = {"steps": 400, "checkpoint_every": 20, "options": {"delay_s": 0.1}}
    entry = submit(job_file(tmp_path, "restart-expedite", train), site=str(site))
    job_id, run = entry["job_id"], run_dir(entry)
    try:
        wait_state(job_id, {"RUNNING"}, timeout=QUEUE_S)
        assert "Requeue=1" in scontrol_job(job_id)
        assert wait_for(lambda: any(e["step"] >= 40 for e in events(run, "checkpoint")), timeout=240), logs(
            run
        )
        batch_host = scontrol_job(job_id).split("BatchHost=", 1)[1].split()[0]
        faults.kill_node(batch_host)
        killed = time.monotonic()

        def running_elsewhere() -> bool:
            out = subprocess.run(
                ["squeue", "-h", "-j", job_id, "-o", "%T %N"], capture_output=True, text=True
            )
            state, _, nodes = out.stdout.strip().partition(" ")
            return state == "RUNNING" and nodes != batch_host

        # Slurm's hold would keep it pending for cred_expire (120 s) after SlurmdTimeout (30 s).
        assert wait_for(running_elsewhere, timeout=120, interval=0.5), scontrol_job(job_id)
        again = time.monotonic() - killed
        print(f"\nbatch node {batch_host} lost: running again on its own after {again:.0f} s")
        final = wait_state(job_id, set(), timeout=600)
        assert final["state"] == "COMPLETED", logs(run)
        assert [outcome for outcome, _ in ends(run)] == ["node_failure", "completed"], ends(run)
    finally:
        subprocess.run(["scancel", job_id], check=False)
        faults.recover_nodes()


@pytest.mark.timeout(1500)  # three allocations and their requeues on a shared, loaded machine
def test_training_longer_than_the_time_limit_takes_three_allocations(
    hpctrain_home: Path, tmp_path: Path
) -> None:
    # A 2-minute limit, the warning 60 s before it. slurmctld checks time limits about every 30 s,
    # so the signal comes 60-90 s into an allocation. A step sleeps 0.2 s: an allocation trains at
    # most ~425 of the 1,000 steps, however idle the machine.
    train = {"steps": 1000, "checkpoint_every": 50, "options": {"delay_s": 0.2}}
    path = job_file(
        tmp_path,
        "restart-time",
        train,
        resources={"time": "00:02:00", "nodelist": ["node1"]},
        preemption={"signal": "USR1", "lead_time": 60, "requeue": True},
    )
    entry = submit(path)
    job_id, run = entry["job_id"], run_dir(entry)
    try:
        final = wait_state(job_id, set(), timeout=QUEUE_S + 900)
        assert final["state"] == "COMPLETED", logs(run)
        outcomes = [outcome for outcome, _ in ends(run)]
        assert outcomes[-1] == "completed" and outcomes.count("preempted") >= 2, outcomes
        assert final["restarts"]["restarts"] == 0  # preemption is no fault
        history = History.read(RunDir(run))
        gaps = [
            nxt.time - line.time
            for line, nxt in zip(history.lines, history.lines[1:], strict=False)
            if line.outcome == "preempted"
        ]
        # Numbers for docs/benchmarks.md, not a check: queue time on the shared cluster varies.
        print(f"\nrequeue -> next attempt: {', '.join(f'{g:.0f} s' for g in gaps)}")
    finally:
        subprocess.run(["scancel", job_id], check=False)


def test_lost_node_of_two_goes_on_warm_on_the_other_without_the_queue(
    hpctrain_home: Path, tmp_path: Path
) -> None:
    """Issue 11 item 4: a 2 x 2 job loses node2 (not the batch host); the two ranks on node1 go on
    in the same allocation from the last checkpoint, with twice the gradient accumulation. Issue 24
    item 2: they are node1's warm standby (a standby step per node: node2's went with its node)."""
    train = {"steps": 300, "checkpoint_every": 20, "eval_every": 0, "options": {"delay_s": 0.1}}
    path = job_file(
        tmp_path,
        "restart-shrink",
        train,
        resources={"nodes": 2, "tasks_per_node": 2, "nodelist": ["node1", "node2"]},
        restart={"warm_standby": True, "standby_delay": 0},
    )
    entry = submit(path)
    job_id, run = entry["job_id"], run_dir(entry)
    try:
        wait_state(job_id, {"RUNNING"}, timeout=QUEUE_S)
        assert wait_for(lambda: any(e["step"] >= 40 for e in events(run, "checkpoint")), timeout=240), logs(
            run
        )
        standby = run / "standby" / "1"
        assert wait_for(lambda: len(list(standby.glob("ready-node1.*"))) == 2, timeout=120), logs(run)
        assert "BatchHost=node1" in scontrol_job(job_id)
        faults.kill_node("node2")
        killed = time.time()
        final = wait_state(job_id, set(), timeout=600)
        assert final["state"] == "COMPLETED", logs(run)
        history = History.read(RunDir(run))
        assert {line.job_id for line in history.lines} == {job_id}, "went back to the queue"
        assert ends(run) == [("node_failure", ["node2"]), ("completed", [])], ends(run)
        starts = [line for line in history.lines if line.event == "start"]
        assert [line.nodes for line in starts] == [["node1", "node2"], ["node1"]]
        assert [line.world_size for line in starts] == [4, 2]
        shrunk = events(run, "shrunk")
        assert shrunk and shrunk[0]["world_size"] == 2 and shrunk[0]["detail"]["grad_accum"] == 2, shrunk
        resumed = events(run, "resumed")
        assert resumed and resumed[-1]["step"] >= 40, resumed
        result = json.loads((run / "result.json").read_text())
        assert result["step"] == 300 and result["world_size"] == 2, result
        assert result["eval_accuracy"] >= 0.9, result
        again = [
            m["time"] for m in metrics(run) if m.get("kind") == "train" and m.get("time", 0) > starts[1].time
        ]
        print(
            f"\nnode2 lost: step ended after {history.ends[0].time - killed:.0f} s, training again on node1 "
            f"after {again[0] - killed:.0f} s (SlurmdTimeout 30 s)"
        )
        assert "node_failure node2" in status_text(job_id)
        assert "attempt 1 runs in the warm standby steps" in (run / "logs" / "batch.log").read_text()
        warm = [p.name for p in (run / "logs").glob("rank-*.log") if "warm start after" in p.read_text()]
        assert sorted(warm) == ["rank-0.log", "rank-1.log"], logs(run)
    finally:
        subprocess.run(["scancel", job_id], check=False)
        faults.recover_nodes()


def test_a_stopped_rank_is_diagnosed_in_status_and_costs_no_node(hpctrain_home: Path, tmp_path: Path) -> None:
    """Issue 23 items 10 and 11: one STOPped process of a 2 x 2 job. While the next attempt runs,
    `status` names the hung rank in words and where its stacks are; that attempt runs on the same
    two nodes (one hung process is no evidence against node2), and the job completes at world size 4."""
    train = {"steps": 400, "checkpoint_every": 50, "eval_every": 0}
    job_id, run = submit_two_by_two(
        tmp_path,
        "restart-hang",
        train,
        watchdog={"hang_timeout": 10, "heartbeat_interval": 1},
        restart={"max": 2},
    )
    pid = None
    try:
        wait_state(job_id, {"RUNNING"}, timeout=QUEUE_S)
        assert wait_for(lambda: latest_step(run) >= 20, timeout=180), logs(run)
        pid = int((run / "pids" / "rank-2").read_text())
        os.kill(pid, signal.SIGSTOP)
        stopped = time.time()

        def next_attempt_runs() -> bool:
            history = History.read(RunDir(run))
            return any(line.event == "start" and line.attempt == 1 for line in history.lines)

        assert wait_for(next_attempt_runs, timeout=180), logs(run)
        text = status_text(job_id)
        print(f"\nstatus {time.time() - stopped:.0f} s after the stop:\n{text}")
        assert "restarts: 1 of 2 (hang at step" in text, text
        assert "last failure: rank 2 on node2 hung at step " in text, text
        assert "others waiting in" in text and "stacks: failures/attempt-0/stacks/" in text, text
        assert "excluded" not in text and "shrunk" not in text, text
        assert (run / "failures" / "attempt-0" / "stacks" / "rank-2.txt").is_file()

        final = wait_state(job_id, set(), timeout=600)
        assert final["state"] == "COMPLETED", logs(run)
        assert ends(run) == [("hang", ["node2"]), ("completed", [])], ends(run)
        starts = [line for line in History.read(RunDir(run)).lines if line.event == "start"]
        assert [line.nodes for line in starts] == [["node1", "node2"], ["node1", "node2"]], starts
        assert [line.world_size for line in starts] == [4, 4]
        result = json.loads((run / "result.json").read_text())
        assert result["step"] == 400 and result["world_size"] == 4, result
        assert final["restarts"]["restarts"] == 1 and final["restarts"]["excluded"] == [], final
    finally:
        if pid is not None:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        subprocess.run(["scancel", job_id], check=False)


def hold_port(port: int) -> list[socket.socket]:
    """Listen on `port` over IPv4 and IPv6 (as any process on the node might): a bind there fails."""
    held = []
    for family, address in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind((address, port))
            sock.listen(64)
            held.append(sock)
        except OSError:
            sock.close()
    return held


def test_a_taken_rendezvous_port_costs_no_restart(hpctrain_home: Path, tmp_path: Path) -> None:
    """Issue 23 item 13: preflight's port of the first attempt and training's port of the second
    are held on the first node (and the ports of the old rule, 20000 + job id % 20000 and 20000
    above it). With restart.max 0 the job still trains: each taken port is a launch fault, retried
    on other ports without spending the budget."""
    from hpctrain.rundir.ports import ephemeral_range, rendezvous_ports

    path = job_file(
        tmp_path,
        "restart-port",
        {"steps": 40},
        resources={"nodes": 2, "tasks_per_node": 2, "nodelist": ["node1", "node2"]},
        restart={"max": 0},
        preflight=True,
        begin="now+600",  # held until the ports are taken
    )
    entry = submit(path)
    job_id, run = entry["job_id"], run_dir(entry)
    number = int(job_id)
    old = 20000 + number % 20000
    ephemeral = ephemeral_range()
    taken = [rendezvous_ports(number, 0, ephemeral)[1], rendezvous_ports(number, 1, ephemeral)[0]]
    sockets = {port: hold_port(port) for port in {*taken, old, old + 20000}}
    held = [sock for socks in sockets.values() for sock in socks]
    try:
        assert all(sockets[port] for port in taken), f"the test could not take the ports {taken} itself"
        subprocess.run(["scontrol", "update", f"jobid={job_id}", "StartTime=now"], check=True)
        final = wait_state(job_id, set(), timeout=QUEUE_S)
        assert final["state"] == "COMPLETED", logs(run)
        assert [outcome for outcome, _ in ends(run)] == ["launch", "launch", "completed"], ends(run)
        assert final["restarts"]["restarts"] == 0 and final["restarts"]["max"] == 0, final
        batch = (run / "logs" / "batch.log").read_text()
        assert batch.count("rendezvous port in use") == 2, batch[-3000:]
        assert "restarts used" not in batch and "budget" not in batch, batch[-3000:]
        result = json.loads((run / "result.json").read_text())
        assert result["step"] == 40 and result["world_size"] == 4, result
    finally:
        for sock in held:
            sock.close()
        subprocess.run(["scancel", job_id], check=False)


@pytest.mark.skipif(
    os.environ.get("HPCTRAIN_DISRUPTIVE") != "1",
    reason="kills node2's slurmd: set HPCTRAIN_DISRUPTIVE=1 on a cluster no one else uses",
)
def test_a_shrunk_job_grows_back_once_its_node_answers(hpctrain_home: Path, tmp_path: Path) -> None:
    """Issue 23 item 11: a 2 x 2 job loses node2 and goes on shrunk on node1 (status says so); once
    node2 is back, the watchdog checkpoints and requeues, and the job finishes on both nodes."""
    train = {"steps": 2000, "checkpoint_every": 20, "eval_every": 0, "options": {"delay_s": 0.05}}
    path = job_file(
        tmp_path,
        "restart-grow",
        train,
        resources={"nodes": 2, "tasks_per_node": 2, "nodelist": ["node1", "node2"], "time": "00:20:00"},
    )
    entry = submit(path)
    job_id, run = entry["job_id"], run_dir(entry)
    try:
        wait_state(job_id, {"RUNNING"}, timeout=QUEUE_S)
        assert wait_for(lambda: any(e["step"] >= 40 for e in events(run, "checkpoint")), timeout=240), logs(
            run
        )
        faults.kill_node("node2")
        killed = time.time()

        def shrunk() -> bool:
            starts = [line for line in History.read(RunDir(run)).lines if line.event == "start"]
            return len(starts) >= 2 and starts[-1].nodes == ["node1"]

        assert wait_for(shrunk, timeout=240), logs(run)
        assert "running shrunk on 1 of 2 nodes (node1)" in status_text(job_id)
        faults.recover_nodes()
        recovered = time.time()
        final = wait_state(job_id, set(), timeout=900)
        assert final["state"] == "COMPLETED", logs(run)
        history = History.read(RunDir(run))
        starts = [line for line in history.lines if line.event == "start"]
        assert starts[-1].nodes == ["node1", "node2"] and starts[-1].world_size == 4, starts
        assert [o for o, _ in ends(run)][:2] == ["node_failure", "grow_back"], ends(run)
        result = json.loads((run / "result.json").read_text())
        assert result["step"] == 2000 and result["world_size"] == 4, result
        assert events(run, "grew"), "no grew event"
        grown = starts[-1].time
        print(
            f"\nnode2 lost, shrunk after {starts[1].time - killed:.0f} s; node2 recovered after "
            f"{recovered - killed:.0f} s; training on both nodes again {grown - recovered:.0f} s later"
        )
        assert "excluded" not in status_text(job_id)
    finally:
        subprocess.run(["scancel", job_id], check=False)
        faults.recover_nodes()
