"""The per-rank wrapper run for real here (no Slurm): logs, failure reports, preemption, heartbeats."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from hpctrain import spec
from hpctrain.rundir import FailureReport, RunDir, TrainLine, read_json
from hpctrain.rundir.slots import read_slot_file, slot_path
from hpctrain.rundir.structs import SIGNALLED

SITE = Path(__file__).resolve().parents[3] / "site-configs" / "local.yaml"


def start(tmp_path: Path, script: str, rank: int = 0, **fields: Any) -> tuple[subprocess.Popen[str], RunDir]:
    """`python -m hpctrain.command` as srun would start rank `rank` of a 1-node job running `script`."""
    (tmp_path / "work").mkdir(exist_ok=True)
    (tmp_path / "work" / "script.py").write_text(script)
    job = spec.JobSpec(
        name="cmd",
        command="python script.py",
        workdir=str(tmp_path / "work"),
        code=spec.Code(snapshot=False),
        **fields,
    )
    run = RunDir(tmp_path / "run")
    run.root.mkdir(exist_ok=True)
    run.spec.write_bytes(spec.dumps(spec.resolve(job, spec.load_site(SITE))))
    env = {
        **os.environ,
        "HPCTRAIN_RUN_DIR": str(run.root),
        "SLURM_PROCID": str(rank),
        "SLURM_LOCALID": str(rank),
        "SLURM_NTASKS": "2",
        "SLURM_NODEID": "0",
        "SLURM_TASKS_PER_NODE": "2",
        "SLURM_JOB_ID": "5",
        "SLURMD_NODENAME": "nodeA",
        "HPCTRAIN_ATTEMPT": "0",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "hpctrain.command"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    return proc, run


def finish(proc: subprocess.Popen[str], timeout: float = 60) -> tuple[int, str]:
    out, _ = proc.communicate(timeout=timeout)
    return proc.returncode, out


def test_the_script_gets_torchruns_variables_and_its_output_reaches_the_log(tmp_path: Path) -> None:
    proc, run = start(
        tmp_path,
        "import os\ne = os.environ\nprint('env', e['RANK'], e['WORLD_SIZE'], e['LOCAL_WORLD_SIZE'])\n",
        rank=1,
    )
    code, out = finish(proc)
    assert code == 0, out
    assert "env 1 2 2" in out
    assert not run.failure(1).exists()


def test_a_failed_command_is_reported_with_its_rank_node_and_last_output(tmp_path: Path) -> None:
    proc, run = start(tmp_path, "import sys\nprint('Connection reset by peer')\nsys.exit(3)\n", rank=1)
    code, out = finish(proc)
    assert code == 3, out
    report = read_json(run.failure(1), FailureReport)
    assert isinstance(report, FailureReport)
    assert (report.rank, report.hostname, report.attempt) == (1, "nodeA", 0)
    assert "exited with code 3" in report.message and "Connection reset by peer" in report.message


def test_a_command_killed_by_a_signal_is_reported_as_srun_words_it(tmp_path: Path) -> None:
    proc, run = start(tmp_path, "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")
    code, out = finish(proc)
    assert code == 128 + signal.SIGKILL, out
    report = read_json(run.failure(0), FailureReport)
    assert isinstance(report, FailureReport) and report.error_type == SIGNALLED and report.message == "Killed"


SAVES_ON_USR1 = """
import signal, sys, time
def save(signum, frame):
    print("saving at the signal", flush=True)
    sys.exit(0)
signal.signal(signal.SIGUSR1, save)
print("started", flush=True)
while True:
    time.sleep(0.05)
"""

IGNORES_USR1 = """
import signal, time
signal.signal(signal.SIGUSR1, signal.SIG_IGN)
print("started", flush=True)
while True:
    time.sleep(0.05)
"""


def wait_output(run: RunDir, proc: subprocess.Popen[str]) -> None:
    """Until the child has written its pid (it runs)."""
    deadline = time.monotonic() + 30
    while not run.pid(0).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.0)


def test_the_preemption_flag_reaches_the_script_and_asks_for_the_requeue(tmp_path: Path) -> None:
    proc, run = start(tmp_path, SAVES_ON_USR1, preemption=spec.Preemption(grace=30))
    wait_output(run, proc)
    run.preempt_flag.touch()
    code, out = finish(proc)
    assert code == 0, out
    assert "saving at the signal" in out
    assert run.requeue_request.exists() and not run.preempt_flag.exists()
    assert not run.failure(0).exists()


def test_a_script_that_ignores_the_signal_is_ended_after_the_grace(tmp_path: Path) -> None:
    proc, run = start(tmp_path, IGNORES_USR1, preemption=spec.Preemption(grace=1))
    wait_output(run, proc)
    began = time.monotonic()
    proc.send_signal(signal.SIGUSR1)  # Slurm's signal to the task itself
    code, out = finish(proc)
    assert code == 0, out
    assert 1 <= time.monotonic() - began < 15, out
    assert "the grace has passed" in out and run.requeue_request.exists()


BUSY = """
import time
step = 0
while True:
    step += 1
    if step % 20 == 0:
        print(f"step {step} loss {1.0 / step:.4f}", flush=True)
    time.sleep(0.01)
"""


def test_heartbeats_advance_with_the_script_and_stop_when_it_is_stopped(tmp_path: Path) -> None:
    proc, run = start(tmp_path, BUSY, progress=spec.Progress(preset="step-loss"))
    try:
        wait_output(run, proc)
        slots = slot_path(run.root, "5", 0, "nodeA")
        time.sleep(2.5)
        (first,) = read_slot_file(slots)
        time.sleep(2.0)
        (second,) = read_slot_file(slots)
        assert second.beat.step > first.beat.step and second.beat.phase == "running"
        child = int(run.pid(0).read_text())
        assert first.pid == child
        os.kill(child, signal.SIGSTOP)
        time.sleep(2.5)
        (stopped,) = read_slot_file(slots)
        time.sleep(2.0)
        (later,) = read_slot_file(slots)
        assert later.beat.step == stopped.beat.step, "a stopped script made progress"
        assert later.beat.time == stopped.beat.time, "a stopped script still ticked"
        os.kill(child, signal.SIGCONT)
        lines = [line for line in run.read_metrics(head=0, tail=50) if isinstance(line, TrainLine)]
        assert lines and lines[-1].step % 20 == 0 and lines[-1].loss is not None
    finally:
        proc.terminate()
        code, out = finish(proc)
    assert code == 128 + signal.SIGTERM, out
    assert not run.failure(0).exists(), "a rank that srun ended reports nothing"


def test_the_flight_recorders_dump_folder_exists_before_the_script_starts(tmp_path: Path) -> None:
    """NCCL writes its dump where the wrapper's environment points but never makes the folder."""
    proc, _run = start(
        tmp_path,
        "import os\n"
        "dump = os.environ.get('TORCH_FR_DUMP_TEMP_FILE') or os.environ['TORCH_NCCL_DEBUG_INFO_TEMP_FILE']\n"
        "print('dump folder', os.path.isdir(os.path.dirname(dump)))\n",
    )
    code, out = finish(proc)
    assert code == 0, out
    assert "dump folder True" in out
