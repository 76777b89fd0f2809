"""The optional W&B logger in W&B's offline mode: one W&B run across a preemption and its requeue."""

from __future__ import annotations

import struct
import sys
from pathlib import Path

from wandb.proto import wandb_internal_pb2 as wandb_proto

from tests import launcher

sys.path.insert(0, str(launcher.REPO / "tests" / "integration"))
import _runtime_job as job

OFFLINE = {"WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_DISABLE_GIT": "true"}
BLOCK = 32 << 10  # the .wandb file is in LevelDB's log format: 32 KiB blocks of CRC'd chunks
HEADER = 7  # ":W&B", two magic bytes, one version byte


def wandb_records(path: Path) -> list[object]:
    """The protobuf records of one offline run file (whole records reassembled from their chunks)."""
    data = path.read_bytes()
    records, pending, at = [], b"", HEADER
    while at + 7 <= len(data):
        if BLOCK - at % BLOCK < 7:  # a block's tail too short for a chunk header is padding
            at += BLOCK - at % BLOCK
            continue
        _, length, kind = struct.unpack("<IHB", data[at : at + 7])
        pending += data[at + 7 : at + 7 + length]
        at += 7 + length
        if kind in (1, 4):  # FULL or LAST chunk: a record is complete
            record = wandb_proto.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


def test_one_wandb_run_across_a_preemption_and_its_requeue(tmp_path: Path) -> None:
    train = {
        "steps": 60,
        "batch_size": 64,
        "log_every": 10,
        "entrypoint": "_runtime_job:slow_digits",
        "options": {"delay_s": 0.05},
        "wandb": "hpctrain-test",
    }
    run = job.write_run_dir(tmp_path / "run", train)
    procs = launcher.start(run, 1, OFFLINE)
    assert job.wait_for(lambda: job.latest_step(run) >= 20, timeout=400)  # W&B starts slowly under load
    (run / "preempt.flag").touch()  # what the batch script does on Slurm's warning signal
    assert launcher.wait_all(procs, timeout=300) == [0]
    assert "preempted" in job.events(run)
    assert launcher.run(run, 1, timeout=400, env=OFFLINE) == [0]  # the requeued attempt
    resumed = [m["step"] for m in job.metrics(run) if m.get("event") == "resumed"]
    assert len(resumed) == 1

    attempts = sorted((run / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(attempts) == 2, attempts
    ids, steps = set(), []
    for path in attempts:
        for record in wandb_records(path):
            kind = record.WhichOneof("record_type")
            if kind == "run":
                ids.add(record.run.run_id)
            elif kind == "history":
                steps.append(record.history.step.num)
    assert ids == {"run"}  # the run directory's name here (record.json's run id when submitted)
    # Each logged step once, in order, across both attempts: one curve.
    assert steps == sorted(set(steps)) and {10, 20, 60} <= set(steps), steps
