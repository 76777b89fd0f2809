"""The warm standby task (runtime/standby.py) as a real process, and the slurmd TCP probe."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from hpctrain import spec
from hpctrain.rundir import RunDir
from hpctrain.scheduler.slurm.nodes import slurmd_unreachable
from hpctrain.spec.slurm_values import standby_go_signal

REPO = Path(__file__).resolve().parents[3]
DIGITS = REPO / "jobs" / "digits-ddp.yaml"
LOCAL = REPO / "site-configs" / "local.yaml"
# A module the standby runs as `python -m`: it records what a rank would read from its environment.
PROBE_MODULE = """
import os, signal, sys
from pathlib import Path
names = (
    "HPCTRAIN_ATTEMPT", "MASTER_ADDR", "MASTER_PORT", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_NODEID",
    "HPCTRAIN_PREFLIGHT_DONE",
)
usr1 = signal.getsignal(signal.SIGUSR1)
blocked = signal.pthread_sigmask(signal.SIG_BLOCK, set())
Path(os.environ["PROBE_OUT"]).write_text(
    " ".join(f"{n}={os.environ.get(n)}" for n in names)
    + f" argv={sys.argv[1:]} main={__name__} usr1_ignored={usr1 == signal.SIG_IGN} blocked={sorted(blocked)}"
    + f" torch={'torch' in sys.modules}"
)
"""


def start(tmp_path: Path, preemption_signal: str = "USR1") -> tuple[subprocess.Popen[bytes], Path, Path]:
    run = RunDir(tmp_path / "run")
    run.root.mkdir()
    overrides = [
        f"preemption.signal={preemption_signal}",
        "restart.warm_standby=true",
        "restart.standby_delay=0",
    ]
    resolved = spec.resolve(spec.load_job(DIGITS, overrides), spec.load_site(LOCAL), str(DIGITS), "local")
    run.spec.write_bytes(spec.dumps(resolved))
    (tmp_path / "standby_probe.py").write_text(PROBE_MODULE)
    folder = tmp_path / "standby" / "1"
    folder.mkdir(parents=True)
    out = tmp_path / "probe.out"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO), os.environ.get("PYTHONPATH", "")]),
        "HPCTRAIN_RUN_DIR": str(run.root),
        "HPCTRAIN_STANDBY_DIR": str(folder),
        "HPCTRAIN_ATTEMPT": "0",
        "MASTER_ADDR": "old-host",
        "MASTER_PORT": "1",
        # Task 1 of node n2's own standby step (of 2 tasks): its PROCID is its local id.
        "SLURMD_NODENAME": "n2",
        "SLURM_PROCID": "1",
        "SLURM_LOCALID": "1",
        "SLURM_STEP_NUM_TASKS": "2",
        "SLURM_STEP_ID": "7",
        "PROBE_OUT": str(out),
    }
    argv = [sys.executable, "-m", "hpctrain.runtime.standby", "standby_probe", "--flag", "x y"]
    proc = subprocess.Popen(argv, env=env, stderr=subprocess.PIPE)
    return proc, folder, out


def wait_ready(proc: subprocess.Popen[bytes], folder: Path) -> Path:
    ready = folder / "ready-n2.1"
    deadline = time.monotonic() + 120
    while not ready.exists():
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        assert time.monotonic() < deadline, "the standby never said it was ready"
        time.sleep(0.05)
    return ready


def test_go_hands_the_attempt_to_the_module_with_torch_already_imported(tmp_path: Path) -> None:
    proc, folder, out = start(tmp_path)
    try:
        ready = wait_ready(proc, folder)
        assert ready.read_text() == "7"  # its step id: the batch script can name the step
        # The preemption signal belongs to the attempt that trains now: the standby lives through it.
        proc.send_signal(signal.SIGUSR1)
        time.sleep(0.3)
        assert proc.poll() is None
        (folder / "go").write_text(
            "HPCTRAIN_ATTEMPT=4\nMASTER_ADDR=n1\nMASTER_PORT=23456\nHPCTRAIN_NODES=n1,n2\nPATH=/evil\n"
        )
        proc.send_signal(signal.SIGUSR2)
        assert proc.wait(timeout=60) == 0, proc.stderr.read() if proc.stderr else ""
    finally:
        proc.kill()
    text = out.read_text()
    assert "HPCTRAIN_ATTEMPT=4 MASTER_ADDR=n1 MASTER_PORT=23456" in text
    # Its rank in the attempt: n2 is the second of its nodes, 2 tasks a node, local id 1. No preflight.
    assert "SLURM_PROCID=3 SLURM_NTASKS=4 SLURM_NODEID=1 HPCTRAIN_PREFLIGHT_DONE=1" in text
    assert "argv=['--flag', 'x y']" in text and "main=__main__" in text
    # Only the attempt's variables are taken; the go signal is no longer blocked in the rank.
    assert f"blocked={sorted(set())}" in text and "torch=True" in text
    assert "usr1_ignored=True" in text  # until the runtime installs its own handler
    assert (folder / "taken-n2.1").exists()
    assert "warm start after" in (tmp_path / "run" / "logs" / "rank-3.log").read_text()


def test_stop_ends_the_standby_without_running_the_module(tmp_path: Path) -> None:
    proc, folder, out = start(tmp_path)
    try:
        wait_ready(proc, folder)
        (folder / "go").write_text("stop\n")
        proc.send_signal(signal.SIGUSR2)
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
    assert not out.exists()


def test_a_go_to_other_nodes_ends_the_standby_of_this_one(tmp_path: Path) -> None:
    """After a node loss the attempt runs on the nodes left: a standby elsewhere just ends."""
    proc, folder, out = start(tmp_path)
    try:
        wait_ready(proc, folder)
        (folder / "go").write_text(
            "HPCTRAIN_ATTEMPT=5\nMASTER_ADDR=n1\nMASTER_PORT=2\nHPCTRAIN_NODES=n1,n3\n"
        )
        proc.send_signal(signal.SIGUSR2)
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
    assert not out.exists() and not (folder / "taken-n2.1").exists()


def test_a_go_before_ready_waits_instead_of_killing(tmp_path: Path) -> None:
    """A go signal that comes while the standby still imports is held, not fatal."""
    proc, folder, out = start(tmp_path)
    try:
        time.sleep(0.5)  # the process is up and (very likely) still importing torch
        (folder / "go").write_text("HPCTRAIN_ATTEMPT=2\nMASTER_ADDR=a\nMASTER_PORT=2\nHPCTRAIN_NODES=n2\n")
        proc.send_signal(signal.SIGUSR2)
        assert proc.wait(timeout=120) == 0, proc.stderr.read() if proc.stderr else ""
    finally:
        proc.kill()
    assert "HPCTRAIN_ATTEMPT=2" in out.read_text()


def test_the_go_signal_differs_from_the_preemption_signal(tmp_path: Path) -> None:
    assert standby_go_signal("USR1") == "USR2" and standby_go_signal("SIGUSR2") == "USR1"
    proc, folder, out = start(tmp_path, preemption_signal="USR2")
    try:
        wait_ready(proc, folder)
        proc.send_signal(signal.SIGUSR2)  # the preemption signal: ignored
        time.sleep(0.3)
        assert proc.poll() is None
        (folder / "go").write_text("HPCTRAIN_ATTEMPT=1\nMASTER_ADDR=a\nMASTER_PORT=2\nHPCTRAIN_NODES=n2\n")
        proc.send_signal(signal.SIGUSR1)
        assert proc.wait(timeout=60) == 0
    finally:
        proc.kill()
    assert "HPCTRAIN_ATTEMPT=1" in out.read_text()


def test_slurmd_probe_tells_a_listening_port_from_a_closed_one() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        assert not slurmd_unreachable("n1", {"NodeAddr": "127.0.0.1", "Port": str(port)})
    started = time.monotonic()
    assert slurmd_unreachable("n1", {"NodeAddr": "127.0.0.1", "Port": str(port)})
    assert time.monotonic() - started < 5
