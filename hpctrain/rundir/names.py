"""The file names of a run directory, each spelled here once (the run-directory contract's names).

Kept apart from ``hpctrain.rundir`` (which re-exports them with the paths, structs and readers) so
that rendering a batch script, which needs only the names, does not import the structs and readers:
`hpctrain render` starts faster on a login node.
"""

SPEC = "spec.json"
TRIAL_ENV = "trial-env.sh"
"""A sweep element's own values of the swept env.* keys, which its batch script sources."""
SCRIPT = "job.sbatch"
SUBMIT = "submit.json"
RECORD = "record.json"
METRICS = "metrics.jsonl"
LOG_PROGRESS = "log-progress.json"
"""How rank 0's output met a command job's progress pattern: lines seen and matched."""
RESULT = "result.json"
FAILURES = "failures"
LOGS = "logs"
BATCH_LOG = "batch.log"
PIDS = "pids"
EXIT_CODES = "exit-codes"
PREEMPT_FLAG = "preempt.flag"
REQUEUE_REQUEST = "requeue.request"
GROW_BACK_REQUEST = "grow-back.request"
"""The watchdog's: the checkpoint and requeue it asked for (through preempt.flag) are a grow-back."""
CHECKPOINTS = "checkpoints"
FUNCTION = "function"  # a function job's folder (hpctrain.submit_function)
FUNCTION_CALL = "call.pkl"  # in function/: the function, its args and kwargs (cloudpickle), written at submit
FUNCTION_VALUE = "value.pkl"  # in function/: what the function returned on rank 0 (cloudpickle)
WORKER_METRICS = "metrics"
HEARTBEATS = "heartbeats"
FINAL_MODEL = "final_model.pt"
LOCAL_EXIT_CODE = "local-exit-code"
LOCAL_CANCELLED = "local-cancelled"
PREFLIGHT_REPORT = "preflight.json"
PREFLIGHT_EXCLUDE = "preflight-exclude"
HANG_REPORT = "hang.json"  # in failures/
STACKS = "stacks"  # in failures/
ATTEMPTS = "attempts.jsonl"
TENSORBOARD = "tensorboard"
COMPILE_CACHE = "compile-cache"  # inductor/ and triton/ caches of every attempt (train.compile_cache)
CODE = "code"  # the code snapshot of a command job (code.snapshot), which its ranks run
NCCL_TRACE = "nccl-trace-rank-"  # in failures/: NCCL's flight recorder dumps, the rank number appended
STANDBY = "standby"  # standby/GEN/ of the warm standby steps (runtime/standby.py)
STANDBY_GO = "go"  # NAME=value lines, the attempt's (STANDBY_GO_VARIABLES), or `stop`
STANDBY_GO_VARIABLES = ("HPCTRAIN_ATTEMPT", "MASTER_ADDR", "MASTER_PORT", "HPCTRAIN_NODES")
STANDBY_GO_NODES = "HPCTRAIN_NODES"  # the attempt's nodes, comma-separated, in rank order
STANDBY_READY_PREFIX = "ready-"  # ready-NODE.LOCALID: that task has imported torch and waits
STANDBY_TAKEN_PREFIX = "taken-"  # taken-NODE.LOCALID: that task took the go
SWEEP = "sweep.json"  # in a sweep's root: its trials and arrays
TRIALS_FINAL = "trials-final.json"  # in a sweep's root: trials that cannot change any more
STOPPED = "stopped.json"  # in a trial's array-N/: why early stopping ended it
STUDY_JOURNAL = "study.journal"  # in an optuna sweep's root: the Optuna study (its journal storage)
STUDY_SETTINGS = "study-settings.json"  # in an optuna sweep's root: its sweep section, for a resume
STUDY_LOCK = "study.lock"  # in an optuna sweep's root: held by the one round loop that runs

# The files of hpctrain's home ($HPCTRAIN_HOME), beside runs/: the index of every run (runs/index.py).
INDEX_JOURNAL = "index.jsonl"
INDEX_ARCHIVE = "index-archive.jsonl"
INDEX_REJECTED = "index-rejected.jsonl"
INDEX_LOCK = "index.lock"


class Numbered:
    """A family of names with a number or a node in them: `rank-3.log` is ``RANK_LOG.name(3)``."""

    __slots__ = ("prefix", "suffix", "width")

    def __init__(self, prefix: str, suffix: str = "", width: int = 0) -> None:
        self.prefix = prefix
        self.suffix = suffix
        self.width = width  # numbers padded with zeros to this many digits (names sort as numbers do)

    def name(self, key: int | str) -> str:
        if isinstance(key, int) and self.width:
            key = f"{key:0{self.width}d}"
        return f"{self.prefix}{key}{self.suffix}"

    def key(self, name: str) -> str | None:
        """The part between prefix and suffix, or None when `name` is not of this family."""
        if len(name) <= len(self.prefix) + len(self.suffix):
            return None
        if not (name.startswith(self.prefix) and name.endswith(self.suffix)):
            return None
        return name[len(self.prefix) : len(name) - len(self.suffix)]

    def number(self, name: str) -> int | None:
        """The number in `name` (ASCII digits only), or None."""
        key = self.key(name)
        return int(key) if key is not None and key.isascii() and key.isdigit() else None


RANK_LOG = Numbered("rank-", ".log")  # in logs/
NODE_LOG = Numbered("node-", ".log")  # in logs/
ARRAY_BATCH_LOG = Numbered("batch-", ".log")  # in the array's logs/, one per element
PREFLIGHT_LOG = Numbered("preflight-", ".log")  # in logs/
RANK_FAILURE = Numbered("rank-", ".json")  # in failures/
FUNCTION_OUTCOME = Numbered("rank-", ".json")  # in function/: how the call ended on that rank
FAILED_ATTEMPT = Numbered("attempt-")  # in failures/: the reports of an attempt that was retried
RANK_STACKS = Numbered("rank-", ".txt")  # in failures/stacks/
RANK_PID = Numbered("rank-")  # in pids/
WORKER_METRICS_FILE = Numbered("worker-", ".jsonl")  # in metrics/
NODE_HEARTBEAT = Numbered("node-", ".json")  # in heartbeats/
ARRAY_ELEMENT = Numbered("array-")  # an array element's own run directory, array-N/
CHECKPOINT = Numbered("step-", width=8)  # in checkpoints/: step-00000100
CHECKPOINT_MANIFEST = "manifest.json"  # in checkpoints/step-N/, written last
CHECKPOINT_TRAINER = "trainer.pt"  # in checkpoints/step-N/: the step and the loop's own state
CHECKPOINT_RNG = Numbered("rng-rank-", ".pt")  # in checkpoints/step-N/: one rank's RNG streams
SERVER_SHARD = Numbered("server-", ".pt")  # in checkpoints/step-N/ of a parameter-server run
CHUNK_SCRIPT = Numbered("job+", ".sbatch")  # in a sweep's root: the script of the array from trial N on
# Memory checkpoints (runtime/memory_checkpoint.py) live outside the run directory, in node memory:
# $HPCTRAIN_MEMORY_DIR (default /dev/shm)/hpctrain-memory-UID/RUN/NODE/step-N/copy-R.pt
MEMORY_ROOT = Numbered("hpctrain-memory-")  # one per user, 0700
MEMORY_COPY = Numbered("copy-", ".pt")  # in step-N/: rank R's state, its own or held for a peer node

# Slurm filename patterns (--output): %t task rank, %n node name, %a array index.
SLURM_RANK_LOG = RANK_LOG.name("%t")
SLURM_NODE_LOG = NODE_LOG.name("%n")
SLURM_ARRAY_BATCH_LOG = ARRAY_BATCH_LOG.name("%a")
SLURM_PREFLIGHT_LOG = PREFLIGHT_LOG.name("%t")


def slurm_standby_log(node: str) -> str:
    """A warm standby task's output in standby/GEN/: NODE-TASK.log (srun fills in %t)."""
    return f"{node}-%t.log"


def template_files() -> dict[str, str]:
    """The names the batch-script templates use, passed as the render context's ``files`` (every
    other file the job writes is named by the Python that writes it)."""
    return {
        "logs": LOGS,
        "spec": SPEC,
        "trial_env": TRIAL_ENV,
        "array_prefix": ARRAY_ELEMENT.prefix,
        "exit_codes": EXIT_CODES,
    }
