"""The warm standby as one srun step per node, and the attempt's step once handed the go.

``python -m hpctrain.supervisor.standby_steps [--when-training] NODES GO_SIGNAL GO_FILE -- SRUN...``

The batch script keeps the next attempt's ranks warm (``runtime/standby.py``: torch and the runtime
imported, waiting for the go) in one srun step per node, not one over every node: a step loses
all its tasks with any one node, and srun waits for tasks it can no longer reach, so only separate
steps keep the standby of the nodes that remain after a node is lost. This process owns those steps
(SRUN is their command line, ``@NODE@`` standing for the node) and is the process the batch script
waits on as the attempt's step once it has handed them the attempt:

* The batch script writes the go file (the attempt, its rendezvous and its nodes, or ``stop``) and
  sends this process GO_SIGNAL, which it passes on to every step (srun forwards it to the tasks).
  A task whose node is not among the attempt's ends by itself, and so does every task on ``stop``;
  a step still there after STOP_WAIT_S (its node is lost) is ended.
* As the attempt's step it ends as one srun step with ``--kill-on-bad-exit`` does: the first step
  of the attempt's nodes that fails ends the others (SIGTERM, on which srun cancels its step), and
  the exit status is that step's. SIGTERM or SIGINT to this process ends every step. Before the go,
  a step that ends (its node lost) ends nothing else.

With ``--when-training`` the steps start only once the attempt beside them trains on every node, or
after ``restart.standby_delay`` (:func:`wait_for_training`): the standby's start costs as much CPU
as the attempt's own, and on a node with few cores would slow that start by as much.

Torch-free and small: the watchdog and the supervisor treat it as the attempt's srun.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from hpctrain.rundir import Heartbeat, RunDir
from hpctrain.rundir.slots import current_attempt
from hpctrain.rundir.standby_go import go_nodes, read_go

NODE = "@NODE@"  # stands for the node in the srun command line
STOP_WAIT_S = 4.0  # a step told to stop that is still there after this long is ended
TERM_WAIT_S = 4.0  # after SIGTERM, srun's wait for its tasks before SIGKILL
POLL_S = 0.05
TRAINING_POLL_S = 0.25


def node_command(command: Sequence[str], node: str) -> list[str]:
    """The srun command line of one node's step."""
    return [word.replace(NODE, node) for word in command]


def exit_status(code: int) -> int:
    """A Popen return code as the shell reports it (killed by signal N: 128 + N)."""
    return 128 - code if code < 0 else code


class NodeSteps:
    """One standby step per node; after the go, the attempt's step."""

    def __init__(
        self, nodes: list[str], command: list[str], go_signal: signal.Signals, go_file: Path
    ) -> None:
        self.go_signal = go_signal
        self.go_file = go_file
        self.lock = threading.Lock()
        self.steps = {node: subprocess.Popen(node_command(command, node)) for node in nodes}
        self.ended: list[tuple[str, int]] = []  # (node, exit status), in the order the steps ended
        self.attempt: set[str] | None = None  # the attempt's nodes, once the go came
        self.ending = False

    def running(self) -> list[str]:
        with self.lock:
            gone = {node for node, _ in self.ended}
        return [node for node in self.steps if node not in gone]

    def reap(self) -> None:
        with self.lock:
            gone = {node for node, _ in self.ended}
            for node, proc in self.steps.items():
                code = proc.poll() if node not in gone else None
                if code is not None:
                    self.ended.append((node, exit_status(code)))

    def failure(self) -> int | None:
        """The status of the first step of the attempt's nodes that ended non-zero, if any."""
        with self.lock:
            attempt = self.attempt or set()
            return next((code for node, code in self.ended if node in attempt and code), None)

    def send(self, sig: signal.Signals, nodes: list[str] | None = None) -> None:
        for node in self.running() if nodes is None else nodes:
            try:
                self.steps[node].send_signal(sig)
            except ProcessLookupError:
                pass

    def end(self, nodes: list[str] | None = None) -> None:
        """SIGTERM to the steps (srun cancels each), SIGKILL to those still there after TERM_WAIT_S."""
        targets = self.running() if nodes is None else nodes
        self.send(signal.SIGTERM, targets)
        self.wait_until(lambda: not any(node in self.running() for node in targets), TERM_WAIT_S)
        self.send(signal.SIGKILL, [node for node in targets if node in self.running()])

    def go(self) -> None:
        """Pass the go on; end the steps that should have stopped and have not (a lost node's)."""
        with self.lock:
            self.attempt = set(go_nodes(read_go(self.go_file)))
        self.send(self.go_signal)
        self.wait_until(lambda: not self._outside(), STOP_WAIT_S)
        if outside := self._outside():
            self.end(outside)

    def wait_until(self, done: Callable[[], bool], seconds: float) -> None:
        """Reap the steps until `done()` or `seconds` have passed."""
        deadline = time.monotonic() + seconds
        while not done() and time.monotonic() < deadline:
            time.sleep(POLL_S)
            self.reap()

    def _outside(self) -> list[str]:
        attempt = self.attempt or set()
        return [node for node in self.running() if node not in attempt]

    def run(self) -> int:
        """Until every step has ended: the attempt's status (0, or its first failure's)."""
        while self.running():
            time.sleep(POLL_S)
            self.reap()
            if not self.ending and self.failure() is not None:
                self.ending = True
                threading.Thread(target=self.end, daemon=True).start()
        return self.failure() or 0


def attempt_trains(run: RunDir, attempt: int, nodes: list[str], since: float, heartbeats: bool) -> bool:
    """With heartbeats: each node's file of `attempt` is there and every rank in it has finished a
    step (imports and rendezvous are over everywhere). Without: rank 0 has written to metrics.jsonl
    since `since`."""
    if not heartbeats:
        try:
            return run.metrics.stat().st_mtime > since
        except OSError:
            return False
    beats = {
        b.node: b for b in run.read_heartbeats() if isinstance(b, Heartbeat) and (b.attempt or 0) == attempt
    }
    return all(
        node in beats and beats[node].ranks and all(r.step_s is not None for r in beats[node].ranks.values())
        for node in nodes
    )


def wait_for_training(run: RunDir, nodes: list[str], go_file: Path) -> bool:
    """Until the attempt beside the standby trains on every node, for ``restart.standby_delay`` at the
    most. False: the go file came first (the attempt ended: stop), so no standby is needed."""
    from hpctrain import spec

    job = spec.loads(run.spec.read_bytes()).job
    since, attempt = time.time(), current_attempt()
    deadline = time.monotonic() + job.restart.standby_delay
    while time.monotonic() < deadline and not attempt_trains(
        run, attempt, nodes, since, job.watchdog.enabled
    ):
        if go_file.exists():
            return False
        time.sleep(TRAINING_POLL_S)
    return not go_file.exists()


USAGE = (
    "usage: python -m hpctrain.supervisor.standby_steps [--when-training] NODES GO_SIGNAL GO_FILE -- SRUN..."
)


def main(argv: list[str]) -> int:
    when_training = argv[:1] == ["--when-training"]
    argv = argv[1:] if when_training else argv
    if len(argv) < 5 or argv[3] != "--":
        print(USAGE, file=sys.stderr)
        return 2
    nodes, go_signal, go_file = argv[0].split(","), signal.Signals["SIG" + argv[1]], Path(argv[2])
    handled = (go_signal, signal.SIGTERM, signal.SIGINT)
    if when_training:
        # No steps yet: a stop (the go file, then GO_SIGNAL) or SIGTERM just ends this process.
        for signum in handled:
            signal.signal(signum, lambda signum, frame: sys.exit(0))
        if not wait_for_training(RunDir(Path(os.environ["HPCTRAIN_RUN_DIR"])), nodes, go_file):
            return 0
    # A signal while the steps start is handled once they have (srun must not inherit an ignored
    # or blocked go signal, which it forwards). No go comes before their tasks are ready, seconds later.
    early: list[int] = []
    for signum in handled:
        signal.signal(signum, lambda signum, frame: early.append(signum))
    steps = NodeSteps(nodes, argv[4:], go_signal, go_file)

    def later(work: Callable[[], None]) -> None:  # a handler only starts the work: it waits and polls
        threading.Thread(target=work, daemon=True).start()

    def on_signal(signum: int, frame: object = None) -> None:
        later(steps.go if signum == go_signal else steps.end)

    for signum in handled:
        signal.signal(signum, on_signal)
    for signum in early:
        on_signal(signum)
    return steps.run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
