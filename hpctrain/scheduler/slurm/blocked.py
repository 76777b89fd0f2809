"""Pending jobs that can never run, or may never: Slurm's reasons that say so, a dependency that can no
longer be met, and node lists that leave a job's partitions too few nodes.

Everything here is a pure function of what one squeue row says (and, only for a row with an
ExcNodeList or a required node list, of each partition's nodes): status warns from it at no extra
cost per poll. "Can never run" is said only where nothing short of changing the job can start it;
a reason that holds until an admin changes a limit or the job's account says "may never run".
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

import msgspec

from hpctrain.errors import HpctrainError
from hpctrain.scheduler.base import Blocked
from hpctrain.scheduler.slurm.facts import expand_hostlist, parse_records

NEVER_SATISFIED = "DependencyNeverSatisfied"
# Slurm's reasons (besides NEVER_SATISFIED) that say the job will never start as it is.
NEVER_REASONS = {
    # Set when no node of the partition could ever satisfy the job, whatever their state: the job is
    # then held with priority 0 (slurmctld's node_scheduler). An ExcNodeList of every node gives it.
    "BadConstraints": "Slurm says its requirements can never be met (BadConstraints)",
}
# Reasons that hold until an admin changes a limit or an account: likely for good, not certainly.
# PartitionNodeLimit also stands for required nodes that are DOWN or DRAINED (Slurm's docs).
LIKELY_REASONS = {
    "PartitionNodeLimit": "it asks for more nodes than its partition allows, or nodes it requires are"
    " down or drained (PartitionNodeLimit)",
    "PartitionTimeLimit": "its time limit is over its partition's (PartitionTimeLimit)",
    "PartitionConfig": "it breaks a limit of its partition (PartitionConfig)",
    "AccountNotAllowed": "its account may not use its partition (AccountNotAllowed)",
    "InvalidAccount": "its account is invalid (InvalidAccount)",
    "InvalidQOS": "its QOS is invalid (InvalidQOS)",
    "ReservationDeleted": "the reservation it asks for was deleted (ReservationDeleted)",
    "MaxMemPerLimit": "it asks for more memory per CPU or node than allowed (MaxMemPerLimit)",
}
# A QOS's or association's limit on one job, or a QOS's minimum: the job's own request breaks it.
# (Limits per user, account or group, and aggregate ones, are reached by other jobs and pass.)
PER_JOB_LIMIT = re.compile(r"(?:QOS|Assoc)Max\w*Per(?:Job|Node)\w*|QOSMin\w+")


def reason_word(reason: str) -> str:
    """`ReqNodeNotAvail, UnavailableNodes:node1` -> `ReqNodeNotAvail`."""
    return reason.strip().split(",", 1)[0].strip()


def cancel_and(job_id: str, then: str) -> str:
    return f"`hpctrain cancel {job_id}`, then {then}"


def never_by_reason(job_id: str, reason: str) -> Blocked | None:
    """Slurm's own word that the job cannot (or is not likely to) start as it is; a dependency's
    (DependencyNeverSatisfied) is never_by_dependency's."""
    word = reason_word(reason)
    if word in NEVER_REASONS:
        return Blocked(NEVER_REASONS[word], cancel_and(job_id, "submit a request its partition can meet"))
    if word in LIKELY_REASONS or PER_JOB_LIMIT.fullmatch(word):
        per_job = f"its request breaks a per-job limit of its QOS or association ({word})"
        cause = LIKELY_REASONS.get(word, per_job)
        fix = cancel_and(job_id, "submit it within the limit, or ask the cluster's admins")
        return Blocked(cause, fix, certain=False)
    return None


def never_satisfied(dependency: str) -> bool:
    """Whether squeue's dependency text (`afterok:12(failed),afterany:13(unfulfilled)`) can never be met:
    a part that failed where all must hold (`,`), or every part failed where one is enough (`?`)."""
    text = dependency.strip()
    if not text or text == "(null)":
        return False
    parts = [part for part in re.split(r"[,?]", text) if part]
    failed = [part.endswith("(failed)") for part in parts]
    return all(failed) if "?" in text else any(failed)


def never_by_dependency(job_id: str, reason: str, dependency: str) -> Blocked | None:
    """Slurm's DependencyNeverSatisfied, or a dependency squeue already shows failed (before the
    scheduler's next pass sets that reason)."""
    said = reason_word(reason) == NEVER_SATISFIED
    if not said and not never_satisfied(dependency):
        return None
    named = dependency.strip() not in ("", "(null)")
    cause = (
        f"its dependency {dependency.strip()} can never be met"
        if named
        else "a job it waits for ended in a way that can never satisfy its dependency"
    )
    if said:
        cause += f" ({NEVER_SATISFIED})"
    return Blocked(
        cause, cancel_and(job_id, "submit it again waiting only on jobs that can still satisfy it")
    )


class PendingRow(msgspec.Struct, frozen=True):
    """What squeue's extra columns say of one pending row (a job, a hetjob component, an array range)."""

    partitions: list[str]
    min_nodes: int
    excluded: list[str]
    required: list[str]
    dependency: str

    @classmethod
    def read(cls, columns: list[str]) -> PendingRow | None:
        """`%P|%D|%x|%n|%E` columns; None when they are missing or do not read, or name neither nodes
        nor a dependency (most pending rows: then the reason alone is judged, at no cost)."""
        if len(columns) < 5:
            return None
        partition, count, excluded, required, dependency = (c.strip() for c in columns[:5])
        if not excluded and not required and dependency in ("", "(null)"):
            return None
        try:
            return cls(
                partitions=[p for p in partition.split(",") if p],
                min_nodes=int(count) if count.isascii() and count.isdigit() else 0,
                excluded=expand_hostlist(excluded),
                required=expand_hostlist(required),
                dependency=dependency,
            )
        except HpctrainError:
            return None


PartitionNodes = Mapping[str, frozenset[str]]


def parse_partitions(text: str) -> dict[str, frozenset[str]]:
    """`scontrol show partition -o` -> each partition's nodes (one whose list does not read: left out)."""
    found: dict[str, frozenset[str]] = {}
    for name, record in parse_records(text, "PartitionName").items():
        try:
            found[name] = frozenset(expand_hostlist(record.get("Nodes", "")))
        except HpctrainError:
            continue
    return found


def nodes_left(row: PendingRow, partition: str, nodes: frozenset[str]) -> str:
    """Why `partition` can never give the row its nodes; empty when it can."""
    left = nodes - set(row.excluded)
    shut_out = [node for node in row.required if node not in left]
    if shut_out:
        outside = not set(shut_out) <= set(row.excluded)
        where = f"excluded or not in partition {partition}" if outside else "excluded"
        return f"it requires {','.join(shut_out)}, {where}"
    if len(left) < max(row.min_nodes, len(row.required), 1):
        excluded = ",".join(row.excluded)
        return (
            f"its ExcNodeList {excluded} leaves {len(left)} of the {len(nodes)} nodes of partition"
            f" {partition} for a job of {row.min_nodes} node{'s' if row.min_nodes != 1 else ''}"
        )
    return ""


def never_by_nodes(job_id: str, row: PendingRow, partitions: Callable[[], PartitionNodes]) -> Blocked | None:
    """An ExcNodeList (or a required node list) that no partition of the job can satisfy; the partitions'
    nodes are asked for only when the row names nodes. A partition not known leaves it open."""
    if not (row.excluded or row.required) or not row.partitions:
        return None
    known = partitions()
    if any(p not in known for p in row.partitions):
        return None
    causes = [nodes_left(row, p, known[p]) for p in row.partitions]
    if not all(causes):
        return None
    return Blocked("; ".join(causes), cancel_and(job_id, "submit it again"))


def never_runs(
    job_id: str, reason: str, row: PendingRow | None, partitions: Callable[[], PartitionNodes]
) -> Blocked | None:
    """One pending row's verdict: its dependency, then its node lists (which name the cause of a
    BadConstraints they gave), then Slurm's other reasons. None: nothing says it cannot run."""
    dependency = row.dependency if row is not None else ""
    return (
        never_by_dependency(job_id, reason, dependency)
        or (never_by_nodes(job_id, row, partitions) if row is not None else None)
        or never_by_reason(job_id, reason)
    )
