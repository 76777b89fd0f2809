"""The warm standby, from the attempt loop's side: start its steps, hand them an attempt, stop them.

A step on each node of the attempt (owned by hpctrain.supervisor.standby_steps) whose tasks have
imported torch and the runtime, then wait (hpctrain.runtime.standby). A restart on those nodes, or
on the ones left after a node was lost, hands them the attempt (the go file: its rendezvous and
nodes; then the go signal) instead of starting Python and torch again, and skips preflight. A step
per node, so that a lost node takes only its own standby with it. A standby whose tasks on the
attempt's nodes are not all ready (ready-NODE.LOCALID files) is never used: the attempt then starts
cold. Its steps start once the attempt trains on every node (or after restart.standby_delay): their
start would compete with the attempt's own.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from hpctrain.rundir import RunDir
from hpctrain.rundir.names import (
    STANDBY,
    STANDBY_GO,
    STANDBY_READY_PREFIX,
    STANDBY_TAKEN_PREFIX,
    slurm_standby_log,
)
from hpctrain.supervisor.standby_steps import NODE

TAKE_TRIES = 50  # the go must be taken within TAKE_TRIES x TAKE_POLL_S
TAKE_POLL_S = 0.1


class WarmStandby:
    """The standby steps of the next attempt (one generation at a time)."""

    def __init__(
        self, run: RunDir, tasks_per_node: int, go_signal: str, step: Callable[[str, str], list[str]]
    ) -> None:
        """`step(node, log)` is a node's srun command line (with standby_steps' placeholder)."""
        self.run = run
        self.tasks_per_node = tasks_per_node
        self.go_signal = signal.Signals[f"SIG{go_signal}"]
        self.step = step
        self.generation = 0
        self.folder = Path()
        self.process: subprocess.Popen[bytes] | None = None
        self.stopped: list[subprocess.Popen[bytes]] = []
        # A new allocation numbers its standbys from 1 again: an earlier allocation's go, ready and
        # taken files (its tasks are gone with it) must not be taken for this one's.
        shutil.rmtree(run.root / STANDBY, ignore_errors=True)
        os.environ["HPCTRAIN_STANDBY_DIR"] = ""

    def start(self, nodes: list[str]) -> None:
        self.generation += 1
        shutil.rmtree(self.run.root / STANDBY / str(self.generation - 2), ignore_errors=True)
        self.folder = self.run.root / STANDBY / str(self.generation)
        self.folder.mkdir(parents=True, exist_ok=True)
        os.environ["HPCTRAIN_STANDBY_DIR"] = str(self.folder)
        owner = [
            sys.executable,
            "-m",
            "hpctrain.supervisor.standby_steps",
            "--when-training",
            ",".join(nodes),
        ]
        owner += [self.go_signal.name.removeprefix("SIG"), str(self.folder / STANDBY_GO), "--"]
        self.process = subprocess.Popen(owner + self.step(NODE, str(self.folder / slurm_standby_log(NODE))))

    def on_every_node(self, prefix: str, nodes: list[str]) -> bool:
        """Every task on `nodes` has written its PREFIX-NODE.LOCALID file."""
        names = (
            [p.name for p in self.folder.iterdir() if not p.name.endswith(".tmp")]
            if self.folder.is_dir()
            else []
        )
        return all(
            sum(n.startswith(f"{prefix}{node}.") for n in names) >= self.tasks_per_node for node in nodes
        )

    def ready(self, nodes: list[str]) -> bool:
        alive = self.process is not None and self.process.poll() is None
        return alive and self.on_every_node(STANDBY_READY_PREFIX, nodes)

    def go(self, attempt: int, address: str, port: int, nodes: list[str]) -> subprocess.Popen[bytes] | None:
        """Hand the standby steps the attempt: they become its step (standby_steps stands for them
        and ends them all at the first that fails), once every task on its nodes has taken the go.
        A task that died in standby never does: None, and the attempt starts cold."""
        assert self.process is not None
        go = self.folder / STANDBY_GO
        values = {"HPCTRAIN_ATTEMPT": attempt, "MASTER_ADDR": address, "MASTER_PORT": port}
        values["HPCTRAIN_NODES"] = ",".join(nodes)
        go.with_suffix(".tmp").write_text("".join(f"{key}={value}\n" for key, value in values.items()))
        go.with_suffix(".tmp").replace(go)
        self.process.send_signal(self.go_signal)
        for _ in range(TAKE_TRIES):
            if self.on_every_node(STANDBY_TAKEN_PREFIX, nodes):
                print(f"hpctrain: attempt {attempt} runs in the warm standby steps", flush=True)
                process, self.process = self.process, None
                return process
            time.sleep(TAKE_POLL_S)
        print(f"hpctrain: the warm standby did not take attempt {attempt}: starting it cold", flush=True)
        self.stop()
        return None

    def stop(self) -> None:
        """Its tasks end (the go file says stop); standby_steps ends the steps that do not (a lost
        node's srun waits for tasks it cannot reach) by itself: nothing here waits for that."""
        self.stopped = [p for p in self.stopped if p.poll() is None]
        if self.process is None:
            return
        (self.folder / STANDBY_GO).write_text("stop\n")
        try:
            self.process.send_signal(self.go_signal)
        except OSError:
            pass
        self.stopped.append(self.process)
        self.process = None
