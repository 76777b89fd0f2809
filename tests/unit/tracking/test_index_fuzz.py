"""Index fuzz: 20 concurrent writers, torn and garbage lines injected between them, compaction running."""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import time
from pathlib import Path

import pytest

from hpctrain.tracking import index as records
from hpctrain.tracking.index import Index, RunRecord
from tests.conftest import run_cli

WRITERS = 20
RUNS_PER_WRITER = 12


def _writer(root: str, worker: int, out: str) -> None:
    index = Index(Path(root))
    rng = random.Random(worker)
    added = []
    for i in range(RUNS_PER_WRITER):
        run_id, run_dir = index.new_run_dir(f"w{worker}")
        # Most runs ended days ago, so compaction moves them to the archive while others append.
        at = time.time() - rng.choice([0, 3 * 24 * 3600])
        run = RunRecord(
            run_id=run_id,
            job_id=f"{worker}{i:04d}",
            name=f"w{worker}",
            site="local",
            backend="slurm",
            run_dir=run_dir,
            submitted_at=at,
            state="PENDING",
            state_at=at,
        )
        index.add(run)
        added.append(run_id)
        index.update_states([(run, rng.choice(["COMPLETED", "FAILED", "CANCELLED"]), "fuzz")])
    Path(out).write_text("\n".join(added))


def _vandal(root: str, seed: int, stop_at: float) -> None:
    """What a crashed or buggy writer leaves: partial lines, random bytes, wrong JSON, under the lock."""
    index = Index(Path(root))
    rng = random.Random(seed)
    shapes = [
        lambda: b'{"op":"add","run_id":"torn-' + str(rng.random()).encode(),
        lambda: bytes(rng.randrange(256) for _ in range(rng.randrange(1, 60))),
        lambda: b'[1, 2, {"op": "add"}]\n',
        lambda: b'{"op":"state","run_id":"nobody","state":"RUNNING","at":"now"}\n',
        lambda: b'{"op":"add","run_id":"x","submitted_at":"soon"}\n',
    ]
    while time.time() < stop_at:
        with index._locked(exclusive=True):
            target = index.path if rng.random() < 0.8 else index.archive_path
            with open(target, "ab") as handle:
                handle.write(rng.choice(shapes)())
        time.sleep(rng.uniform(0, 0.01))


def test_every_added_run_survives_garbage_and_concurrency(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(records, "JOURNAL_LIMIT_BYTES", 16 * 1024)  # forked children inherit it
    root = tmp_path / "home"
    Index(root)
    ctx = multiprocessing.get_context("fork")
    vandals = [ctx.Process(target=_vandal, args=(str(root), s, time.time() + 8)) for s in range(2)]
    writers = [
        ctx.Process(target=_writer, args=(str(root), w, str(tmp_path / f"added-{w}"))) for w in range(WRITERS)
    ]
    for proc in vandals + writers:
        proc.start()
    for proc in writers + vandals:
        proc.join(180)
        assert proc.exitcode == 0, "a writer failed"
    added = {line for w in range(WRITERS) for line in (tmp_path / f"added-{w}").read_text().split()}
    assert len(added) == WRITERS * RUNS_PER_WRITER
    assert {r.run_id for r in Index(root).runs()} == added
    assert root.joinpath("index-archive.jsonl").exists(), "compaction never ran: the test lost its point"

    env = {"HPCTRAIN_HOME": str(root)}
    listing = run_cli("list", "--all", "--json", env=env)
    assert listing.returncode == 0, listing.stderr
    assert {r["run_id"] for r in json.loads(listing.stdout)} == added
    assert "Traceback" not in listing.stderr and listing.stderr.count("\n") <= 1
    for argv in (["status", "--all", "--json"], ["index", "check"], ["list", "-n", "5"]):
        proc = run_cli(*argv, env=env)
        assert "Traceback" not in proc.stderr, (argv, proc.stderr)
        assert proc.returncode in (0, 1), (argv, proc.returncode, proc.stderr)
    assert run_cli("index", "compact", env=env).returncode == 0
    assert run_cli("index", "check", env=env).returncode == 0
    assert {r.run_id for r in Index(root).runs()} == added
    assert os.path.getsize(root / "index-rejected.jsonl") > 0
