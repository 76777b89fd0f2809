"""hpctrain.client: standard library only, a no-op outside a job; inside one, metrics lines in the runtime's
format, heartbeat slot steps, checkpoint events and the preemption flag and signal. Each case runs a tiny
script in a fresh interpreter, as a user's training script would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from hpctrain import client
from hpctrain.rundir import EventLine, RunDir, TrainLine, slots
from hpctrain.rundir.log_progress import TRAIN_FIELDS
from tests.conftest import REPO


def run_script(code: str, env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    clean = {
        k: v for k, v in os.environ.items() if not k.startswith(("HPCTRAIN_", "SLURM", "RANK", "LOCAL_RANK"))
    }
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**clean, "PYTHONPATH": str(REPO), **env},
        check=False,
    )


STEPS = """
    import sys
    from hpctrain import client
    client.step(1, loss=2.5)
    client.step(11, loss=1.5, learning_rate=3e-4, grad_norm=0.75, note="text is left out", steps=100)
    client.checkpoint_saved("ckpt/step-11", seconds=0.5)
    print(client.should_stop())
    print(sorted(m for m in sys.modules if m.startswith("hpctrain") or m in ("msgspec", "torch", "numpy")))
"""


def test_outside_a_job_every_call_is_a_no_op_and_only_the_standard_library_loads(tmp_path: Path) -> None:
    proc = run_script(STEPS, {}, timeout=60)
    assert proc.returncode == 0, proc.stderr
    stop, loaded = proc.stdout.splitlines()
    assert stop == "False"
    assert loaded == "['hpctrain', 'hpctrain.client', 'hpctrain.version']"
    assert not any(tmp_path.iterdir())


def test_rank_0_writes_train_and_event_lines_that_the_run_directory_reads(tmp_path: Path) -> None:
    proc = run_script(STEPS, {"HPCTRAIN_RUN_DIR": str(tmp_path), "RANK": "0"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == "False"
    # Inside a job too, nothing but the standard library: rundir's names and slots load by path.
    loaded = str(
        [
            "hpctrain",
            "hpctrain._client_names",
            "hpctrain._client_slots",
            "hpctrain.client",
            "hpctrain.version",
        ]
    )
    assert proc.stdout.splitlines()[1] == loaded
    lines = RunDir(tmp_path).read_metrics()
    start, first, second, saved = lines
    assert isinstance(start, EventLine) and (start.event, start.step) == ("start", 0)
    assert isinstance(first, TrainLine) and (first.step, first.loss, first.step_time_s) == (1, 2.5, None)
    assert isinstance(second, TrainLine)
    assert (second.step, second.loss, second.lr, second.steps) == (11, 1.5, 3e-4, 100)
    assert second.metrics == {"grad_norm": 0.75}
    assert second.step_time_s is not None and second.step_time_s >= 0
    assert isinstance(saved, EventLine)
    assert (saved.event, saved.step, saved.path, saved.save_s) == ("checkpoint", 11, "ckpt/step-11", 0.5)


def test_other_ranks_write_no_metrics(tmp_path: Path) -> None:
    proc = run_script(STEPS, {"HPCTRAIN_RUN_DIR": str(tmp_path), "RANK": "1"})
    assert proc.returncode == 0, proc.stderr
    assert not RunDir(tmp_path).metrics.exists()


def test_the_preempt_flag_and_the_signal_both_stop(tmp_path: Path) -> None:
    code = """
        import os, signal
        from hpctrain import client
        print(client.should_stop())
        os.kill(os.getpid(), signal.SIG{name})
        print(client.should_stop())
    """
    run = RunDir(tmp_path)
    proc = run_script(code.format(name="USR1"), {"HPCTRAIN_RUN_DIR": str(tmp_path)})
    assert (proc.returncode, proc.stdout.split()) == (0, ["False", "True"]), proc.stderr
    # The spec's preemption.signal, read from spec.json (the job's, else the site's).
    run.spec.write_text(
        json.dumps({"job": {"preemption": None}, "site": {"preemption": {"signal": "SIGTERM"}}})
    )
    proc = run_script(code.format(name="TERM"), {"HPCTRAIN_RUN_DIR": str(tmp_path)})
    assert (proc.returncode, proc.stdout.split()) == (0, ["False", "True"]), proc.stderr
    run.preempt_flag.touch()
    proc = run_script(
        "from hpctrain import client; print(client.should_stop())", {"HPCTRAIN_RUN_DIR": str(tmp_path)}
    )
    assert proc.stdout.strip() == "True"


def test_a_handler_of_the_scripts_own_is_kept(tmp_path: Path) -> None:
    code = """
        import os, signal
        signal.signal(signal.SIGUSR1, lambda *_: print("mine"))
        from hpctrain import client
        os.kill(os.getpid(), signal.SIGUSR1)
        print(client.should_stop())
    """
    proc = run_script(code, {"HPCTRAIN_RUN_DIR": str(tmp_path)})
    assert proc.stdout.split() == ["mine", "False"], proc.stderr


def test_every_rank_writes_its_step_into_the_heartbeat_slot_the_wrapper_made(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    env = {
        "HPCTRAIN_RUN_DIR": str(run_dir),
        "HPCTRAIN_HEARTBEAT_DIR": str(tmp_path / "shm"),
        "HPCTRAIN_ATTEMPT": "2",
        "SLURM_JOB_ID": "77",
        "SLURMD_NODENAME": "node9",
        "RANK": "5",
        "LOCAL_RANK": "1",
    }
    code = "from hpctrain import client; client.step(3); client.step(4)"
    assert run_script(code, env).returncode == 0  # no slot file: nothing is made
    path = Path(str(tmp_path / "shm" / slots.slot_path(run_dir, "77", 2, "node9").name))
    assert not path.exists()
    # What the command wrapper does for its rank: claim the slot (identity and a first tick).
    fd, buffer = slots.open_slot_file(path)
    offset = slots.HEADER_SIZE + 1 * slots.SLOT_SIZE
    slots.put(buffer, offset + slots.ALIVE_AT, slots.ALIVE, 1.0)
    slots.put(buffer, offset, slots.IDENT, slots.MAGIC, 5, 4242)
    buffer.close()
    os.close(fd)
    proc = run_script(code, env)
    assert proc.returncode == 0, proc.stderr
    (slot,) = slots.read_slot_file(path)
    assert (slot.rank, slot.pid, slot.beat.step, slot.beat.phase) == (5, 4242, 4, "running")
    assert slot.beat.step_s is not None and slot.beat.step_s >= 0


def test_the_clients_train_fields_are_the_progress_parsers() -> None:
    assert client.TRAIN_FIELDS == TRAIN_FIELDS
    assert set(TrainLine.__struct_fields__) >= TRAIN_FIELDS
