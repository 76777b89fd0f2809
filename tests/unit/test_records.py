"""The run index: concurrent writers from separate processes never corrupt or lose a record."""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path

from hpctrain.records import Index, Run


def _add_many(root: str, worker: int, count: int) -> None:
    index = Index(Path(root))
    for i in range(count):
        run_id, run_dir = index.new_run_dir(f"job{worker}")
        now = time.time()
        index.add(
            Run(
                run_id=run_id,
                job_id=f"{worker}{i:03d}",
                name=f"job{worker}",
                site="local",
                backend="slurm",
                run_dir=run_dir,
                submitted_at=now,
                state="PENDING",
                state_at=now,
            )
        )


def test_concurrent_submitters_keep_every_record(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_add_many, args=(str(tmp_path), w, 25)) for w in range(4)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(60)
        assert proc.exitcode == 0
    runs = Index(tmp_path).runs()
    assert len(runs) == 100
    assert len({r.run_id for r in runs}) == 100
    assert all((r.run_dir / "record.json").exists() for r in runs)


def test_state_history_and_lookup(tmp_path: Path) -> None:
    index = Index(tmp_path)
    run_id, run_dir = index.new_run_dir("x")
    now = time.time()
    run = Run(
        run_id=run_id,
        job_id="77",
        name="x",
        site="local",
        backend="slurm",
        run_dir=run_dir,
        submitted_at=now,
        state="PENDING",
        state_at=now,
    )
    index.add(run)
    index.update_states([(run, "RUNNING", "")])
    index.update_states([(run, "RUNNING", "")])  # unchanged: no new history row
    index.update_states([(run, "COMPLETED", "")])
    assert [h[0] for h in index.history(run_id)] == ["PENDING", "RUNNING", "COMPLETED"]
    found, missing = index.find(["77", run_id, run_id[:20], "nope"])
    assert [r.run_id for r in found] == [run_id] * 3
    assert missing == ["nope"]
