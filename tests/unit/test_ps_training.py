"""Parameter-server training with real processes on localhost (gloo): modes, equivalence, failures."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from hpctrain.runtime.ps import checkpoint, local
from hpctrain.runtime.ps.common import batch_indices, build_task, collate, worker_batch

DIGITS = "hpctrain.examples.digits:build"
pytestmark = pytest.mark.timeout(240)


def start(
    run_dir: Path,
    servers: int,
    workers: int,
    train: dict[str, Any],
    ps: dict[str, Any],
    env: dict[str, str] | None = None,
) -> list:
    local.make_run_dir(run_dir, DIGITS, servers, workers, {"log_every": 10, **train}, ps)
    return local.launch(run_dir, servers + workers, env)


def finish(run_dir: Path, procs: list, timeout_s: float = 180) -> list[int | None]:
    codes = local.wait_all(procs, timeout_s)
    logs = "\n".join(f"--- rank {r}\n{local.log_text(run_dir, r)[-2000:]}" for r in range(len(procs)))
    assert None not in codes, f"hung processes: {codes}\n{logs}"
    return codes


def lines(run_dir: Path, kind: str) -> list[dict[str, Any]]:
    text = (run_dir / "metrics.jsonl").read_text()
    return [r for r in map(json.loads, text.splitlines()) if r["kind"] == kind]


def reference(train: dict[str, Any], workers: int, steps: int) -> dict[str, torch.Tensor]:
    """Synchronous data parallel in one process: average the workers' gradients, one AdamW step."""
    from hpctrain.spec import Train

    spec = Train(entrypoint=DIGITS, **train)
    task = build_task(spec)
    opt = torch.optim.AdamW(task.model.parameters(), lr=spec.lr, weight_decay=spec.weight_decay)
    length = len(task.train_data)  # type: ignore[arg-type]
    for step in range(steps):
        grads = []
        for w in range(workers):
            idx = batch_indices(
                length, w, workers, worker_batch(spec.batch_size, w, workers), spec.seed, step
            )
            inputs, targets = collate(task.train_data, idx)
            task.model.zero_grad()
            task.loss(task.model(inputs), targets).backward()
            grads.append([p.grad.clone() for p in task.model.parameters()])
        for i, param in enumerate(task.model.parameters()):
            param.grad = sum(g[i] for g in grads) / workers
        opt.step()
    return {k: v.detach() for k, v in task.model.named_parameters()}


def assert_close(run_dir: Path, expected: dict[str, torch.Tensor]) -> None:
    latest = checkpoint.load_latest(run_dir)
    assert latest is not None
    got = latest[1]["params"]
    assert set(got) == set(expected)
    for name, value in expected.items():
        torch.testing.assert_close(got[name], value, rtol=1e-5, atol=1e-6, msg=name)


@pytest.mark.parametrize("servers", [1, 2])
def test_sync_matches_data_parallel_and_resumes(tmp_path: Path, servers: int) -> None:
    train = {"steps": 15, "batch_size": 32, "lr": 3e-3, "seed": 3}
    finish(tmp_path, start(tmp_path, servers, 2, train, {"mode": "sync"}))
    assert checkpoint.complete_steps(tmp_path) == [15]
    assert_close(tmp_path, reference(train, 2, 15))
    # A restarted job with more steps picks up the shards, optimizer state and data position.
    train["steps"] = 25
    codes = finish(tmp_path, start(tmp_path, servers, 2, train, {"mode": "sync"}))
    assert codes == [0] * (servers + 2)
    assert_close(tmp_path, reference(train, 2, 25))
    assert [e["step"] for e in lines(tmp_path, "event") if e["event"] == "resumed"] == [15]


def test_async_trains_digits(tmp_path: Path) -> None:
    train = {"steps": 300, "batch_size": 64, "lr": 2e-3, "eval_every": 150}
    codes = finish(tmp_path, start(tmp_path, 1, 2, train, {"mode": "async"}))
    assert codes == [0, 0, 0]
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["final_step"] == 300 and result["eval"]["accuracy"] >= 0.90
    assert {"staleness_mean", "staleness_max", "samples_per_s", "workers_alive"} <= set(
        lines(tmp_path, "train")[-1]
    )
    assert any(e["by"] == "worker 0" for e in lines(tmp_path, "eval"))  # periodic eval, worker side
    assert (tmp_path / "metrics" / "worker-1.jsonl").exists()


def test_bounded_keeps_slow_worker_within_staleness(tmp_path: Path) -> None:
    train = {"steps": 120, "batch_size": 64, "lr": 2e-3}
    env = {"HPCTRAIN_PS_DELAY": "0.005", "HPCTRAIN_PS_SLOW": "1:4"}
    codes = finish(tmp_path, start(tmp_path, 1, 2, train, {"mode": "bounded", "staleness": 1}, env))
    assert codes == [0, 0, 0]
    steps = [w["steps"] for w in json.loads((tmp_path / "result.json").read_text())["per_worker"].values()]
    # A worker may run at most `staleness` steps ahead, plus the push it is waiting on.
    assert abs(steps[0] - steps[1]) <= 2, steps


def wait_for(path: Path, timeout_s: float = 60) -> None:
    deadline = time.time() + timeout_s
    while not (path.exists() and path.stat().st_size):
        assert time.time() < deadline, f"{path} never appeared"
        time.sleep(0.1)


def test_killed_worker_is_dropped_and_training_finishes(tmp_path: Path) -> None:
    train = {"steps": 300, "batch_size": 64, "lr": 2e-3}
    procs = start(
        tmp_path, 1, 2, train, {"mode": "async", "worker_timeout": 10}, {"HPCTRAIN_PS_DELAY": "0.01"}
    )
    wait_for(tmp_path / "metrics" / "worker-1.jsonl")
    procs[2].send_signal(signal.SIGKILL)
    codes = finish(tmp_path, procs)
    assert codes[:2] == [0, 0] and codes[2] == -signal.SIGKILL
    dropped = [e for e in lines(tmp_path, "event") if e["event"] == "worker_dropped"]
    assert [(e["worker"], e["reason"]) for e in dropped] == [(1, "connection closed")]
    assert lines(tmp_path, "train")[-1]["workers_alive"] == 1
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["final_step"] == 300 and result["per_worker"]["1"]["status"] == "dropped"


def test_killed_server_fails_the_job_cleanly(tmp_path: Path) -> None:
    train = {"steps": 5000, "batch_size": 64, "lr": 2e-3, "timeout_s": 30}
    procs = start(tmp_path, 2, 2, train, {"mode": "sync"}, {"HPCTRAIN_PS_DELAY": "0.01"})
    wait_for(tmp_path / "metrics.jsonl")
    killed = time.time()
    procs[1].send_signal(signal.SIGKILL)
    codes = finish(tmp_path, procs, timeout_s=60)
    assert time.time() - killed < 30
    assert codes[1] == -signal.SIGKILL and codes[0] == 1 and codes[2:] == [1, 1]
    for rank in (2, 3):
        error = local.log_text(tmp_path, rank).strip().splitlines()[-1]
        assert error.startswith(f"hpctrain ps: worker {rank - 2} on ") and "server 1 on " in error
        assert "stopped answering (connection closed)" in error
    last = local.log_text(tmp_path, 0).strip().splitlines()[-1]
    assert last.startswith("hpctrain ps: server 0 on ") and "server 1 on " in last, last
