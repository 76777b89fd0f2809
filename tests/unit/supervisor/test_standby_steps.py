"""The warm standby's steps (supervisor/standby_steps.py) with real child processes standing for srun."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from hpctrain import spec
from hpctrain.rundir import Heartbeat, RankBeat, RunDir
from hpctrain.supervisor import standby_steps
from hpctrain.supervisor.standby_steps import NODE, NodeSteps, node_command

# Stands for one node's srun step: ready at once; on the go signal it reads the go file and, when
# its node is one of the attempt's, does what its role says (the argument, or its node's entry in a
# JSON file): exitCODE after a moment, or run on; otherwise it ends with 0. `deaf` ignores the go
# and SIGTERM, as a lost node's srun that cannot reach its tasks hangs on.
STEP = textwrap.dedent(
    """
    import json, signal, sys, time
    from pathlib import Path
    node, roles, go_file = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    role = json.loads(Path(roles).read_text())[node] if roles.endswith(".json") else roles
    went = []
    if role == "deaf":
        signal.signal(signal.SIGUSR2, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    else:
        signal.signal(signal.SIGUSR2, lambda *_: went.append(1))
    Path(go_file.parent / f"ready-{node}").write_text("")
    while not went:
        time.sleep(0.01)
    text = go_file.read_text()
    nodes = [l.split("=", 1)[1].split(",") for l in text.splitlines() if l.startswith("HPCTRAIN_NODES=")]
    if text.strip() == "stop" or node not in (nodes[0] if nodes else []):
        sys.exit(0)
    if role.startswith("exit"):
        time.sleep(0.3)
        sys.exit(int(role[4:]))
    while True:
        time.sleep(0.1)
    """
)


@pytest.fixture(autouse=True)
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(standby_steps, "STOP_WAIT_S", 1.0)
    monkeypatch.setattr(standby_steps, "TERM_WAIT_S", 1.0)


def steps_for(tmp_path: Path, roles: dict[str, str]) -> tuple[NodeSteps, Path]:
    script = tmp_path / "step.py"
    script.write_text(STEP)
    (tmp_path / "roles.json").write_text(json.dumps(roles))
    go = tmp_path / "go"
    steps = NodeSteps(list(roles), [sys.executable, str(script), NODE, str(tmp_path / "roles.json"), str(go)],
                      signal.SIGUSR2, go)  # fmt: skip
    deadline = time.monotonic() + 30
    while not all((tmp_path / f"ready-{node}").exists() for node in roles):
        assert time.monotonic() < deadline, "the stand-in steps never started"
        time.sleep(0.02)
    return steps, go


def run_in_background(steps: NodeSteps) -> list[int]:
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(steps.run()), daemon=True)
    thread.start()
    steps.thread = thread  # type: ignore[attr-defined]
    return result


def finish(steps: NodeSteps, result: list[int], timeout: float = 20) -> int:
    steps.thread.join(timeout)  # type: ignore[attr-defined]
    assert result, "the steps never all ended"
    return result[0]


def test_the_node_is_put_in_every_word_that_names_it() -> None:
    assert node_command(["srun", f"--nodelist={NODE}", f"--output=x/{NODE}-%t.log"], "n2") == [
        "srun",
        "--nodelist=n2",
        "--output=x/n2-%t.log",
    ]


def test_the_first_step_of_the_attempt_that_fails_ends_the_others_with_its_status(tmp_path: Path) -> None:
    steps, go = steps_for(tmp_path, {"n1": "run", "n2": "exit7"})
    result = run_in_background(steps)
    go.write_text("HPCTRAIN_ATTEMPT=1\nHPCTRAIN_NODES=n1,n2\n")
    steps.go()
    assert finish(steps, result) == 7
    assert steps.steps["n1"].returncode is not None  # ended for n2's failure, as kill-on-bad-exit does


def test_a_lost_nodes_step_is_ended_and_the_others_become_the_attempt(tmp_path: Path) -> None:
    # n2 was lost: its step hangs on, deaf. The attempt runs on n1 and n3 and completes.
    steps, go = steps_for(tmp_path, {"n1": "exit0", "n2": "deaf", "n3": "exit0"})
    result = run_in_background(steps)
    go.write_text("HPCTRAIN_ATTEMPT=3\nHPCTRAIN_NODES=n1,n3\n")
    steps.go()
    assert finish(steps, result) == 0
    assert steps.steps["n2"].returncode == -signal.SIGKILL


def test_before_the_go_a_step_that_ends_ends_nothing_and_stop_ends_all(tmp_path: Path) -> None:
    steps, go = steps_for(tmp_path, {"n1": "run", "n2": "run"})
    result = run_in_background(steps)
    steps.steps["n2"].kill()  # n2 lost while standing by
    time.sleep(0.5)
    assert steps.steps["n1"].poll() is None and not result
    go.write_text("stop\n")
    steps.go()
    assert finish(steps, result) == 0 and steps.steps["n1"].returncode == 0


def test_the_module_runs_the_steps_and_passes_the_go_on(tmp_path: Path) -> None:
    (tmp_path / "step.py").write_text(STEP)
    go = tmp_path / "go"
    argv = [sys.executable, "-m", "hpctrain.supervisor.standby_steps", "n1,n2", "USR2", str(go), "--"]
    argv += [sys.executable, str(tmp_path / "step.py"), NODE, "exit5", str(go)]
    proc = subprocess.Popen(argv)
    try:
        deadline = time.monotonic() + 30
        while not all((tmp_path / f"ready-{n}").exists() for n in ("n1", "n2")):
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.02)
        go.write_text("HPCTRAIN_ATTEMPT=1\nHPCTRAIN_NODES=n2\n")
        proc.send_signal(signal.SIGUSR2)
        assert proc.wait(timeout=30) == 5  # n2's status; n1 was not the attempt's and ended with 0
    finally:
        proc.kill()


REPO = Path(__file__).resolve().parents[3]


def node_beat(node: str, attempt: int, step_s: list[float | None]) -> Heartbeat:
    now = time.time()
    ranks = {i: RankBeat(step=3, phase="forward", time=now, step_s=s, pid=1) for i, s in enumerate(step_s)}
    return Heartbeat(node=node, time=now, attempt=attempt, ranks=ranks)


def run_dir(tmp_path: Path, *overrides: str) -> RunDir:
    run = RunDir(tmp_path / "run")
    run.heartbeats.mkdir(parents=True)
    job = REPO / "jobs" / "digits-ddp.yaml"
    resolved = spec.resolve(
        spec.load_job(job, list(overrides)), spec.load_site(REPO / "site-configs" / "local.yaml")
    )
    run.spec.write_bytes(spec.dumps(resolved))
    return run


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM: standby_steps ends the steps it started (a kill would leave them running)."""
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()


def start_when_training(tmp_path: Path, go: Path) -> subprocess.Popen[bytes]:
    (tmp_path / "step.py").write_text(STEP)
    module = [sys.executable, "-m", "hpctrain.supervisor.standby_steps", "--when-training"]
    argv = [*module, "n1,n2", "USR2", str(go)]
    argv += ["--", sys.executable, str(tmp_path / "step.py"), NODE, "exit5", str(go)]
    env = {**os.environ, "HPCTRAIN_RUN_DIR": str(tmp_path / "run"), "HPCTRAIN_ATTEMPT": "1"}
    return subprocess.Popen(argv, env=env)


def wait_ready(tmp_path: Path, proc: subprocess.Popen[bytes], timeout: float = 30) -> float:
    """Seconds until both stand-in steps are ready."""
    started = time.monotonic()
    while not all((tmp_path / f"ready-{n}").exists() for n in ("n1", "n2")):
        assert time.monotonic() - started < timeout and proc.poll() is None
        time.sleep(0.02)
    return time.monotonic() - started


def test_when_training_the_steps_start_once_every_rank_of_the_attempt_finished_a_step(tmp_path: Path) -> None:
    """Not at an earlier attempt's heartbeats, nor while one rank has not finished a step."""
    run = run_dir(tmp_path)
    run.write_heartbeat(node_beat("n1", 0, [0.1, 0.1]))
    run.write_heartbeat(node_beat("n2", 0, [0.1, 0.1]))
    go = tmp_path / "go"
    proc = start_when_training(tmp_path, go)
    try:
        run.write_heartbeat(node_beat("n1", 1, [0.1, 0.1]))
        run.write_heartbeat(node_beat("n2", 1, [0.1, None]))
        time.sleep(2)
        assert proc.poll() is None and not list(tmp_path.glob("ready-*"))
        run.write_heartbeat(node_beat("n2", 1, [0.1, 0.1]))
        wait_ready(tmp_path, proc)
        go.write_text("HPCTRAIN_ATTEMPT=2\nHPCTRAIN_NODES=n2\n")
        proc.send_signal(signal.SIGUSR2)
        assert proc.wait(timeout=30) == 5
    finally:
        stop(proc)


def test_when_training_the_steps_start_after_standby_delay_at_the_latest(tmp_path: Path) -> None:
    run_dir(tmp_path, "restart.standby_delay=1.5")
    proc = start_when_training(tmp_path, tmp_path / "go")
    try:
        assert 1.4 < wait_ready(tmp_path, proc) < 15
    finally:
        stop(proc)


def test_when_training_a_stop_before_the_attempt_trains_starts_no_step(tmp_path: Path) -> None:
    run_dir(tmp_path)
    go = tmp_path / "go"
    proc = start_when_training(tmp_path, go)
    try:
        time.sleep(1)
        go.write_text("stop\n")
        proc.send_signal(signal.SIGUSR2)
        assert proc.wait(timeout=30) == 0
        assert not list(tmp_path.glob("ready-*"))
    finally:
        stop(proc)


def test_without_heartbeats_the_attempt_trains_once_rank_0_wrote_metrics(tmp_path: Path) -> None:
    run = run_dir(tmp_path)
    since = time.time()
    assert not standby_steps.attempt_trains(run, 0, ["n1"], since, heartbeats=False)  # no metrics yet
    run.metrics.write_text("{}\n")
    os.utime(run.metrics, (since - 5, since - 5))  # written before the attempt started
    assert not standby_steps.attempt_trains(run, 0, ["n1"], since, heartbeats=False)
    os.utime(run.metrics, (since + 1, since + 1))
    assert standby_steps.attempt_trains(run, 0, ["n1"], since, heartbeats=False)
