"""The file names of a run directory, each spelled here once (the run-directory contract's names).

Kept apart from ``hpctrain.rundir`` (which re-exports them with the paths, structs and readers) so
that rendering a batch script, which needs only the names, does not import the structs and readers:
`hpctrain render` starts faster on a login node.
"""

SPEC = "spec.json"
SCRIPT = "job.sbatch"
SUBMIT = "submit.json"
RECORD = "record.json"
METRICS = "metrics.jsonl"
RESULT = "result.json"
FAILURES = "failures"
LOGS = "logs"
BATCH_LOG = "batch.log"
PIDS = "pids"
EXIT_CODES = "exit-codes"
PREEMPT_FLAG = "preempt.flag"
REQUEUE_REQUEST = "requeue.request"
CHECKPOINTS = "checkpoints"
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
ARRAY_PREFIX = "array-"
STANDBY = "standby"  # standby/GEN/ of the warm standby step (runtime/standby.py)
STANDBY_GO = "go"
STANDBY_READY_PREFIX = "ready-"
STANDBY_TAKEN_PREFIX = "taken-"

# Slurm filename patterns (--output): %t task rank, %n node name, %a array index.
SLURM_RANK_LOG = "rank-%t.log"
SLURM_NODE_LOG = "node-%n.log"
SLURM_ARRAY_BATCH_LOG = "batch-%a.log"
SLURM_PREFLIGHT_LOG = "preflight-%t.log"


def rank_log_name(rank: int | str) -> str:
    return f"rank-{rank}.log"


def template_files() -> dict[str, str]:
    """The names the batch-script templates use, passed as the render context's ``files``."""
    return {
        "logs": LOGS,
        "spec": SPEC,
        "batch_log": BATCH_LOG,
        "array_batch_log": SLURM_ARRAY_BATCH_LOG,
        "rank_log": SLURM_RANK_LOG,
        "node_log": SLURM_NODE_LOG,
        "array_prefix": ARRAY_PREFIX,
        "preempt_flag": PREEMPT_FLAG,
        "requeue_request": REQUEUE_REQUEST,
        "exit_codes": EXIT_CODES,
        "preflight_exclude": PREFLIGHT_EXCLUDE,
        "preflight_log": SLURM_PREFLIGHT_LOG,
        "standby": STANDBY,
        "standby_go": STANDBY_GO,
        "standby_ready_prefix": STANDBY_READY_PREFIX,
        "standby_taken_prefix": STANDBY_TAKEN_PREFIX,
    }
