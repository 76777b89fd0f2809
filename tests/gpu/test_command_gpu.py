"""A command job on a CUDA GPU (the device machine): a user's own script, run by the command wrapper as
srun would start it, trains on the GPU with its progress parsed from its log; and when one of its NCCL
collectives is held past the script's own timeout, NCCL's flight recorder, switched on by the wrapper
alone, dumps into the run directory's failures/.

Without CUDA (CI, the login node) these tests are skipped, and say so. NCCL refuses two ranks on one
GPU, so the collective runs in a world of one.
"""

from __future__ import annotations

import json
import os
import pickle
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU here: a command job's GPU and NCCL paths need one", allow_module_level=True)

from hpctrain import spec  # noqa: E402
from hpctrain.rundir import RunDir  # noqa: E402

SITE = Path(__file__).resolve().parents[2] / "site-configs" / "local.yaml"
GIVE_UP_S = 180

# Plain PyTorch, nothing of hpctrain: what a user brings.
TRAIN_ON_GPU = """
import os, torch
torch.manual_seed(0)
device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1)).to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
x = torch.randn(4096, 512, device=device)
y = x[:, :1].clone()
for step in range(1, 201):
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad(); loss.backward(); opt.step()
    if step % 20 == 0:
        print(f"step {step} loss {loss.item():.5f} on {torch.cuda.get_device_name(device)}", flush=True)
"""

HANG_IN_A_COLLECTIVE = """
import datetime, os, torch, torch.distributed as dist
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=5))
tensor = torch.ones(1 << 20, device="cuda")
for _ in range(3):
    dist.all_reduce(tensor)
torch.cuda.synchronize()
print("three all-reduces done", flush=True)
torch.cuda._sleep(int(600 * torch.cuda.get_device_properties(0).clock_rate * 1e3))
dist.all_reduce(tensor)  # waits behind the sleep: only NCCL's timeout ends it
torch.cuda.synchronize()
print("still alive after the sleep", flush=True)
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_command(tmp_path: Path, script: str, **fields: object) -> tuple[subprocess.Popen[str], RunDir]:
    """`python -m hpctrain.command` as srun starts the only rank of a one-GPU job running `script`."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "script.py").write_text(script)
    job = spec.JobSpec(
        name="gpu-cmd",
        command=[sys.executable, "script.py"],
        workdir=str(work),
        code=spec.Code(snapshot=False),
        resources=spec.Resources(gpus_per_node=1),
        **fields,
    )
    run = RunDir(tmp_path / "run")
    run.root.mkdir()
    run.spec.write_bytes(spec.dumps(spec.resolve(job, spec.load_site(SITE))))
    env = {
        **os.environ,
        "HPCTRAIN_RUN_DIR": str(run.root),
        "SLURM_PROCID": "0",
        "SLURM_LOCALID": "0",
        "SLURM_NTASKS": "1",
        "SLURM_NODEID": "0",
        "SLURM_TASKS_PER_NODE": "1",
        "SLURM_JOB_ID": "7",
        "SLURMD_NODENAME": socket.gethostname(),
        "HPCTRAIN_ATTEMPT": "0",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        "PYTHONPATH": os.pathsep.join(
            [str(Path(__file__).resolve().parents[2]), *filter(None, [os.environ.get("PYTHONPATH")])]
        ),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "hpctrain.command"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    return proc, run


def test_a_users_gpu_script_trains_and_its_progress_is_parsed(tmp_path: Path) -> None:
    proc, run = start_command(
        tmp_path, TRAIN_ON_GPU, progress=spec.Progress(preset="step-loss", total_steps=200)
    )
    output, _ = proc.communicate(timeout=GIVE_UP_S)
    assert proc.returncode == 0, output[-3000:]
    lines = [json.loads(text) for text in run.metrics.read_text().splitlines()]
    trained = [line for line in lines if line.get("kind") == "train"]
    assert [line["step"] for line in trained] == list(range(20, 201, 20)), output[-3000:]
    assert trained[-1]["loss"] < trained[0]["loss"], [line["loss"] for line in trained]
    assert "NVIDIA" in output or "H100" in output or "H200" in output, output[-2000:]
    print(f"GPU script: losses {[round(line['loss'], 5) for line in trained]}")


def test_a_collective_held_past_its_timeout_leaves_the_flight_recorder_dump_in_the_run_directory(
    tmp_path: Path,
) -> None:
    """The script's own 5 s collective timeout fires; NCCL dumps its flight recorder where the wrapper's
    environment points (failures/). hpctrain's watchdog, not NCCL's later backstop, ends such a step:
    here the test does, as srun would, once the dump is complete."""
    began = time.monotonic()
    proc, run = start_command(tmp_path, HANG_IN_A_COLLECTIVE)
    dump = run.root / "failures" / "nccl-trace-rank-0"
    entries: list[dict[str, object]] = []
    try:
        while time.monotonic() - began < GIVE_UP_S and proc.poll() is None and not entries:
            time.sleep(1.0)
            try:
                entries = pickle.loads(dump.read_bytes())["entries"]
            except (OSError, EOFError, pickle.UnpicklingError, KeyError):
                entries = []
        took = time.monotonic() - began
    finally:
        proc.terminate()
        output, _ = proc.communicate(timeout=60)
    assert "three all-reduces done" in output, output[-3000:]
    assert "still alive" not in output
    assert entries, f"no complete flight-recorder dump in failures/ after {took:.0f} s: {output[-3000:]}"
    names = [str(entry.get("profiling_name", "")) for entry in entries]
    assert sum("all_reduce" in name for name in names) >= 4, names
    assert entries[-1].get("state") != "completed", entries[-1]
    assert proc.returncode != 0  # ended by the signal, as srun ends a step the watchdog gave up on
    print(f"dump complete {took:.1f} s after the wrapper started; flight recorder: {names}")
