"""The warm standby's steps (supervisor/standby_steps.py) with real child processes standing for srun."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

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
