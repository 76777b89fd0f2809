"""One rank of a command job: the user's program as a child, with torchrun's contract, logs, signals,
failure reports and heartbeats that need nothing from the program (torch-free).

srun (or torchrun) starts ``python -m hpctrain.command`` once per rank. It sets the rank's environment
(``contract.py``), adds the resume arguments when a checkpoint exists, and starts the command in the
code snapshot (or the workdir). Then it:

- copies the child's output (stdout and stderr, merged) to the rank's log, and on rank 0 feeds each
  line to the progress parser (``hpctrain.rundir.log_progress``);
- feeds the watchdog: the rank's heartbeat slot advances while the child's output grows or the CPU
  time of its process tree advances, and ticks while the child is not stopped, so a SIGSTOPped child
  is named hung by the existing watchdog with no client code in the script;
- forwards the preemption signal (Slurm's, or the batch script's preempt flag), ends the child after
  ``preemption.grace`` seconds, and leaves the requeue to the supervisor;
- on a failure writes ``failures/rank-N.json`` as the runtime does, so the supervisor names the rank.
"""

from __future__ import annotations

import ctypes
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

from hpctrain import spec
from hpctrain.command import contract
from hpctrain.command.event_files import CLOSE_WAIT_S, ProgressEventFiles, event_files
from hpctrain.rundir import FailureReport, RunDir
from hpctrain.rundir.slots import MAX_SLOTS, TICK_S, current_attempt, remove_node_files, stack_signal
from hpctrain.rundir.structs import SIGNALLED
from hpctrain.runtime.collective_timeout import collective_timeout_s, nccl_env
from hpctrain.runtime.heartbeat import RankHeartbeat, Where
from hpctrain.runtime.logs import redirect
from hpctrain.spec.slurm_values import signal_name

SAMPLE_S = 1.0
"""Seconds between samples of the child's output and CPU time (an active sample is a heartbeat step)."""
END_WAIT_S = 5.0
"""After SIGTERM, how long the child has before SIGKILL."""
TAIL_LINES = 5
"""Lines of the child's last output a failure report quotes (a peer's lost connection shows there)."""
PR_SET_PDEATHSIG = 1
PUMP_WAIT_S = 10.0 + CLOSE_WAIT_S
"""After the child ends, how long its last output has to reach the log (and the event files)."""


def say(message: str) -> None:
    print(f"hpctrain.command: {message}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------------
# The child's process tree, as /proc shows it
# ------------------------------------------------------------------------------------------------


def _stat_fields(pid: str) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (which may hold spaces): state is [0]."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            text = handle.read().decode("ascii", "replace")
    except OSError:
        return None
    return text[text.rfind(")") + 2 :].split()


def tree_usage(root: int) -> tuple[int, bool]:
    """CPU clock ticks (user + system) of `root` and its descendants, and whether `root` is stopped."""
    parents: dict[int, int] = {}
    ticks: dict[int, int] = {}
    stopped = False
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        fields = _stat_fields(name)
        if fields is None or len(fields) < 13:
            continue
        pid = int(name)
        parents[pid] = int(fields[1])
        ticks[pid] = int(fields[11]) + int(fields[12])
        if pid == root:
            stopped = fields[0] in ("T", "t")
    total = 0
    for pid in ticks:
        walk, depth = pid, 0
        while walk not in (0, 1, root) and depth < 64:
            walk, depth = parents.get(walk, 0), depth + 1
        if walk == root:
            total += ticks[pid]
    return total, stopped


# ------------------------------------------------------------------------------------------------
# The rank
# ------------------------------------------------------------------------------------------------


class CommandRank:
    """One rank: its child, the output pump, the activity sampler and the signal handling."""

    def __init__(self, run_dir: Path, resolved: spec.Resolved, env: dict[str, str]) -> None:
        self.run = RunDir(run_dir)
        self.resolved = resolved
        self.job = resolved.job
        self.attempt = current_attempt(env)
        self.rank = int(env.get("RANK") or env.get("SLURM_PROCID") or 0)
        self.local_rank = int(env.get("LOCAL_RANK") or env.get("SLURM_LOCALID") or 0)
        self.node = env.get("SLURMD_NODENAME", "") or socket.gethostname()
        self.env = env
        self.started = time.time()
        self.output_bytes = 0
        self.tail: list[str] = []
        self.preempted = threading.Event()
        self.ended_by: int | None = None  # a signal that came to this process from outside (srun's teardown)
        self.child: subprocess.Popen[bytes] | None = None
        self.event_files: ProgressEventFiles | None = None  # rank 0's TensorBoard sink for the progress
        self.preemption_signal = signal.Signals["SIG" + signal_name(resolved.preemption.signal)]

    # -- what runs, and where ----------------------------------------------------------------------
    def workdir(self) -> Path:
        if self.job.snapshot:
            for run in (self.run, RunDir(self.run.root.parent)):  # an array element: the sweep's snapshot
                if run.code.is_dir():
                    return run.code
            say(f"no code snapshot in {self.run.code}; running in {self.job.workdir}")
        return Path(self.job.workdir or ".")

    def command(self, env: dict[str, str], workdir: Path) -> list[str]:
        words = contract.command_line(self.job.command_words, env)
        if words[0] in ("python", "python3"):  # the job's Python, which runs this wrapper
            words[0] = sys.executable
        extra = contract.resume_args(self.job.resume, workdir, env)
        if extra:
            say(f"resuming: adding {' '.join(extra)}")
        return words + extra

    def child_environment(self) -> dict[str, str]:
        watchdog = self.job.watchdog
        timeout_s = collective_timeout_s(watchdog, 120)
        nccl = nccl_env(self.run, timeout_s, flight_recorder_names=torch_at_least(2, 7))
        # NCCL writes its flight-recorder dump into failures/ but never makes the folder (seen on an H100).
        self.run.failures.mkdir(parents=True, exist_ok=True)
        return contract.child_env(self.env, self.run, self.attempt, nccl)

    # -- starting --------------------------------------------------------------------------------
    def start(self) -> subprocess.Popen[bytes]:
        env = self.child_environment()
        workdir = self.workdir()
        argv = self.command(env, workdir)
        self.run.checkpoints.mkdir(parents=True, exist_ok=True)
        if self.rank == 0:
            # A flag or request left by the previous attempt must not stop this one.
            self.run.preempt_flag.unlink(missing_ok=True)
            self.run.requeue_request.unlink(missing_ok=True)
        ignored = stack_signal(self.resolved.preemption.signal)

        def in_child() -> None:
            # The watchdog asks responsive ranks for stacks with this signal (faulthandler); a script
            # without a handler would die of it: ignored (a handler the script installs still works).
            signal.signal(ignored, signal.SIG_IGN)
            try:  # the child ends with this process, whatever ends it (SIGKILL included)
                ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
            except (OSError, AttributeError):
                pass

        say(f"rank {self.rank} on {self.node}, attempt {self.attempt}: {' '.join(argv)} (in {workdir})")
        try:
            child = subprocess.Popen(
                argv,
                cwd=workdir,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                preexec_fn=in_child,
            )
        except OSError as error:
            self.report(type(error).__name__, f"cannot start {argv[0]}: {error}")
            raise SystemExit(127) from None
        self.child = child
        pid_file = self.run.pid(self.rank)
        pid_file.parent.mkdir(parents=True, exist_ok=True)
        pid_file.write_text(f"{child.pid}\n")
        return child

    def redirect(self) -> None:
        """Under torchrun (HPCTRAIN_REDIRECT_LOGS), this process's own stdout and stderr go to the rank's
        log, as srun's --output does for the srun launcher: the child's output and ours land there."""
        if self.env.get("HPCTRAIN_REDIRECT_LOGS") == "1":
            redirect(self.run.root, self.rank)

    def output(self) -> IO[bytes]:
        """Where the child's output goes: this process's stdout, which is the rank's log."""
        return os.fdopen(os.dup(sys.stdout.fileno()), "wb", buffering=0)

    def pump(self, source: IO[bytes], sink: IO[bytes]) -> None:
        """Copy the child's output to the log as it comes; rank 0 also parses each line for progress.
        A parser that fails is dropped with one line: the output must reach the log whatever happens."""
        try:
            progress = self.progress_parser()
        except Exception as error:
            say(f"progress: not parsed ({type(error).__name__}: {error})")
            progress = None
        pending = b""
        while True:
            chunk = os.read(source.fileno(), 65536)
            if not chunk:
                break
            sink.write(chunk)
            self.output_bytes += len(chunk)
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for raw in lines:
                line = raw.decode("utf-8", "replace")
                self.tail = [*self.tail[-(TAIL_LINES - 1) :], line]
                if progress is not None:
                    try:
                        progress.feed(line)
                    except Exception as error:
                        say(f"progress: no longer parsed ({type(error).__name__}: {error})")
                        progress = None
        if pending:
            self.tail = [*self.tail[-(TAIL_LINES - 1) :], pending.decode("utf-8", "replace")]
        if progress is not None:
            progress.close()
        if self.event_files is not None:
            self.event_files.close()

    def progress_parser(self) -> Any:
        section = self.job.progress
        if self.rank != 0 or section is None:
            return None
        from hpctrain.rundir.log_progress import LogProgress, compile_progress

        pattern = compile_progress(section.pattern, section.preset)
        parser = LogProgress(self.run.root, pattern, total_steps=section.total_steps)
        sink = event_files(self.run.root, self.rank, section.tensorboard)
        if sink is not None:
            parser.sinks.append(sink)
            self.event_files = sink
        return parser

    def heartbeat(self, child_pid: int) -> RankHeartbeat | None:
        watchdog = self.job.watchdog
        if not watchdog.enabled or not 0 <= self.local_rank < MAX_SLOTS:
            return None
        where = Where(
            run_dir=self.run.root,
            job_id=self.env.get("SLURM_JOB_ID", ""),
            attempt=self.attempt,
            node=self.node,
            rank=self.rank,
            local_rank=self.local_rank,
            step_id=self.env.get("SLURM_STEP_ID", ""),
            interval=watchdog.heartbeat_interval,
            stopped_after=watchdog.stopped_timeout,
        )
        try:
            return RankHeartbeat(where, shown_pid=child_pid)
        except OSError as error:
            say(f"no heartbeat: {error}")
            return None

    # -- preemption and ending -------------------------------------------------------------------
    def preemption_asked(self) -> bool:
        """The signal reached this task, rank 0 found the batch script's flag, or rank 0 asked for the
        requeue during this attempt."""
        if self.preempted.is_set():
            return True
        if self.rank == 0 and self.run.preempt_flag.exists():
            return True
        try:
            return self.rank != 0 and self.run.requeue_request.stat().st_mtime >= self.started - 2.0
        except OSError:
            return False

    def preempt(self, child: subprocess.Popen[bytes]) -> float:
        """Pass the preemption signal on; returns when the grace ends. Without `preemption.requeue`
        the job is not requeued: the command gets the signal and the grace, and then ends the job."""
        if self.rank == 0:
            if self.resolved.preemption.requeue:
                self.run.requeue_request.write_text("command\n")
            self.run.preempt_flag.unlink(missing_ok=True)
        number = self.preemption_signal
        grace = self.resolved.preemption.grace
        say(f"preemption: sending {number.name} to the command; it has {grace:.0f} s to save and exit")
        _signal(child, number)
        return time.monotonic() + grace

    def on_signal(self, number: int, frame: object) -> None:
        if number == self.preemption_signal:
            self.preempted.set()
            return
        self.ended_by = number
        if self.child is not None:
            _signal(self.child, signal.SIGTERM)

    # -- the loop --------------------------------------------------------------------------------
    def run_child(self) -> int:
        for number in (self.preemption_signal, signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(number, self.on_signal)
        self.redirect()
        child = self.start()
        assert child.stdout is not None
        pumping = threading.Thread(target=self.pump, args=(child.stdout, self.output()), daemon=True)
        pumping.start()
        beat = self.heartbeat(child.pid)
        step, seen = 0, (-1, -1)
        next_sample = time.monotonic()
        grace_ends: float | None = None
        killed_at: float | None = None
        stopped = False
        client_steps = False  # the child reports its own steps (hpctrain.client): no made-up ones
        while child.poll() is None:
            now = time.monotonic()
            if grace_ends is None and self.preemption_asked():
                grace_ends = self.preempt(child)
            if grace_ends is not None and now >= grace_ends and killed_at is None:
                say("preemption: the grace has passed; ending the command")
                _signal(child, signal.SIGTERM)
                killed_at = now
            if killed_at is not None and now >= killed_at + END_WAIT_S:
                _signal(child, signal.SIGKILL)
            if now >= next_sample:
                next_sample = now + SAMPLE_S
                cpu, stopped = tree_usage(child.pid)
                if (self.output_bytes, cpu) != seen and not stopped:
                    client_steps = client_steps or (beat is not None and beat.stepped_by_another())
                    if beat is not None and not client_steps:
                        beat.mark("running", step)
                    step += 1
                    seen = (self.output_bytes, cpu)
            if beat is not None:
                beat.tick(time.time(), alive=not stopped)
            time.sleep(TICK_S)
        code = child.wait()
        pumping.join(timeout=PUMP_WAIT_S)
        if beat is not None:
            beat.leave()
            if code == 0:
                self.finish()
        return self.outcome(code, grace_ends is not None)

    def outcome(self, code: int, preempted: bool) -> int:
        """This task's exit status, after the failure report a failed command gets."""
        if self.ended_by is not None:  # srun ended the step (another rank failed, the watchdog): no report
            return 128 + self.ended_by
        if preempted:  # the supervisor requeues (requeue.request) or, without preemption.requeue, ends
            say(f"preemption: the command ended with {code}")
            return 0
        if code == 0:
            return 0
        if code < 0:
            number = -code
            self.report(SIGNALLED, signal.strsignal(number) or f"signal {number}")
            return 128 + number
        self.report("ExitCode", f"the command exited with code {code}")
        return code

    def report(self, error_type: str, message: str) -> None:
        tail = " | ".join(line.strip() for line in self.tail if line.strip())
        text = f"{message}; last output: {tail}" if tail and error_type != SIGNALLED else message
        failure = FailureReport(
            rank=self.rank,
            hostname=self.node,
            error_type=error_type,
            message=text[:2000],
            attempt=self.attempt,
            time=round(time.time(), 3),
        )
        try:
            path = self.run.write_failure(failure)
            say(f"rank {self.rank} failed ({path}): {message}")
        except OSError as error:
            say(f"rank {self.rank} failed: {message} (report not written: {error})")

    def finish(self) -> None:
        """After the last rank of the node: its heartbeat slot files go (each rank tries)."""
        remove_node_files(self.run.root, self.env.get("SLURM_JOB_ID", ""), self.attempt, self.node)


def torch_at_least(major: int, minor: int) -> bool:
    """Whether the installed torch (read from its metadata, not imported) is this version or newer."""
    from importlib import metadata

    try:
        found = [int(part) for part in re.findall(r"\d+", metadata.version("torch"))[:2]]
    except metadata.PackageNotFoundError:
        return False
    return tuple(found) >= (major, minor)


def _signal(child: subprocess.Popen[bytes], number: int) -> None:
    try:
        child.send_signal(number)
    except OSError:
        pass


def main() -> int:
    value = os.environ.get("HPCTRAIN_RUN_DIR")
    if not value:
        say("HPCTRAIN_RUN_DIR is not set (the run directory with spec.json)")
        return 2
    run_dir = Path(value).resolve()
    resolved = spec.loads(RunDir(run_dir).spec.read_bytes())
    if resolved.job.command is None:
        say(f"the job in {run_dir} has no command (it trains a Task: python -m hpctrain.runtime runs it)")
        return 2
    rank = CommandRank(run_dir, resolved, dict(os.environ))
    code = rank.run_child()
    sys.stdout.flush()
    return code
