"""The GPU-only paths, run on a machine with a CUDA GPU (the device machine): NCCL's error handling
and flight recorder as the runtime sets them up, and the CUDA-event path of straggler timing.

Without CUDA (CI, the login node) these tests are skipped, and say so. NCCL refuses two ranks on
one GPU, so everything here runs a world of one: enough to show that a collective that cannot finish
tears the process down by itself and leaves its flight-recorder dump in failures/, and that the
per-rank compute and wait times come from CUDA events.
"""

from __future__ import annotations

import pickle
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU here: the NCCL and CUDA-event paths need one", allow_module_level=True)

from tests.launcher import run_one_process  # noqa: E402

COLLECTIVE_TIMEOUT_S = 5
GPU_SLEEP_S = 600  # far longer than the test waits: only the timeout can end the process
GIVE_UP_S = 150


def hang_in_a_collective(run_dir: Path) -> None:
    """The child: the runtime's NCCL settings and process group, a few collectives, then one that
    waits behind a kernel that outlasts the collective timeout."""
    import torch.distributed as dist

    from hpctrain.runtime import bootstrap, collective_timeout

    collective_timeout.apply_nccl_env(run_dir, COLLECTIVE_TIMEOUT_S, "nccl", torch.__version__)
    info = bootstrap.single({})  # a world of one, as a plain process gets
    bootstrap.init_process_group(info, "nccl", COLLECTIVE_TIMEOUT_S)
    tensor = torch.ones(1 << 20, device="cuda")
    for _ in range(3):
        dist.all_reduce(tensor)
    torch.cuda.synchronize()
    print("three all-reduces done", flush=True)
    cycles = int(GPU_SLEEP_S * torch.cuda.get_device_properties(0).clock_rate * 1e3)
    torch.cuda._sleep(cycles)  # the NCCL stream waits for this stream: the next all-reduce cannot start
    dist.all_reduce(tensor)
    torch.cuda.synchronize()
    print("still alive after the sleep", flush=True)


def test_a_collective_past_its_timeout_ends_the_process_and_dumps_the_flight_recorder(tmp_path: Path) -> None:
    began = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "tests.gpu.test_nccl_and_cuda_paths", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=GIVE_UP_S,
        cwd=Path(__file__).resolve().parents[2],
    )
    took = time.monotonic() - began
    output = proc.stdout + proc.stderr
    assert "three all-reduces done" in proc.stdout, output[-3000:]
    assert proc.returncode != 0, output[-3000:]
    assert "still alive" not in proc.stdout
    # Ended by NCCL's watchdog (timeout, then async error handling), not by the kernel finishing.
    assert took < GIVE_UP_S - 30, f"took {took:.0f} s"
    dumps = sorted((tmp_path / "failures").glob("nccl-trace-rank-*"))
    assert [d.name for d in dumps] == ["nccl-trace-rank-0"], output[-3000:]
    trace = pickle.loads(dumps[0].read_bytes())
    entries = trace["entries"]
    names = [entry.get("profiling_name", "") for entry in entries]
    assert sum("all_reduce" in name for name in names) >= 4, names
    assert entries[-1].get("state") != "completed", entries[-1]
    print(f"torn down {took:.1f} s after start, rc {proc.returncode}; flight recorder: {names}")
    print("\n".join(line for line in proc.stderr.splitlines() if "imeout" in line or "bort" in line)[-3000:])


def test_rank_times_come_from_cuda_events(tmp_path: Path) -> None:
    job = {
        "name": "gpu-rank-times",
        "resources": {"nodes": 1, "gpus_per_node": 1},
        "train": {
            "entrypoint": "hpctrain.examples.gpt:build",
            "options": {"size": "tiny"},
            "parallel": "ddp",
            "steps": 30,
            "batch_size": 8,
            "log_every": 5,
            "eval_every": 0,
            "tensorboard": False,
        },
    }
    lines = run_one_process(tmp_path / "run", job)
    ranks = [line for line in lines if line.get("kind") == "ranks"]
    assert len(ranks) >= 5, lines
    for line in ranks:
        (compute,), (wait,) = line["compute_s"], line["wait_s"]
        assert compute > 0 and 0 <= wait <= compute, line
    trained = [line for line in lines if line.get("kind") == "train"]
    assert trained and all(line.get("mfu") is not None for line in trained), trained  # MFU: on the GPU
    print("rank times:", [(line["step"], line["compute_s"], line["wait_s"]) for line in ranks])


if __name__ == "__main__":
    hang_in_a_collective(Path(sys.argv[1]))
