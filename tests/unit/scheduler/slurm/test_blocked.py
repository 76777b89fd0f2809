"""Pending jobs that can never run, judged from squeue's text (rows as Slurm 22.05 printed them) and
`scontrol show partition -o` (issue 36 item 1): no scheduler here, parsing and the rule only."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpctrain.scheduler.base import JobInfo, JobState
from hpctrain.scheduler.slurm.blocked import (
    PendingRow,
    never_by_reason,
    never_runs,
    never_satisfied,
    parse_partitions,
)
from hpctrain.scheduler.slurm.parse import parse_squeue

PARTITIONS = (
    "PartitionName=debug AllowGroups=ALL Default=YES MaxNodes=UNLIMITED Nodes=node[1-2] TotalNodes=2\n"
    "PartitionName=cpu AllowGroups=ALL Default=NO Nodes=node[1-3] State=UP TotalNodes=3\n"
)
# As squeue --format=%i|%T|%r|%N|%M|%P|%D|%x|%n|%E printed them on the local cluster.
QUEUE = (
    "690|FAILED|NonZeroExitCode|node1|0:00|debug|1|||(null)\n"
    "691|PENDING|DependencyNeverSatisfied||0:00|debug|1|||afterok:690(failed)\n"
    "692|PENDING|JobHeldUser||0:00|debug|1|||(null)\n"
    "689|PENDING|BadConstraints||0:00|debug|2|node[1-2]||(null)\n"
)


class Partitions:
    """`scontrol show partition`, counted: the poll may ask only when a pending row names nodes."""

    def __init__(self, text: str = PARTITIONS) -> None:
        self.text, self.calls = text, 0

    def __call__(self) -> dict[str, frozenset[str]]:
        self.calls += 1
        return parse_partitions(self.text)


def poll(text: str, jobs: set[str], partitions: Partitions | None = None) -> dict[str, JobInfo]:
    return parse_squeue(text, jobs, partitions or Partitions())


def test_an_exclusion_of_every_node_of_the_partition_can_never_run_and_says_why() -> None:
    found = poll(QUEUE, {"689", "690", "691", "692"})
    blocked = found["689"].blocked
    assert blocked is not None and blocked.certain
    assert blocked.warning() == (
        "can never run: its ExcNodeList node1,node2 leaves 0 of the 2 nodes of partition debug for a job"
        " of 2 nodes; `hpctrain cancel 689`, then submit it again"
    )
    assert found["690"].blocked is None and found["692"].blocked is None  # ended; held by its user


def test_a_dependency_that_can_never_be_met_says_so_with_the_dependency() -> None:
    blocked = poll(QUEUE, {"691"})["691"].blocked
    assert blocked is not None and blocked.certain
    assert "its dependency afterok:690(failed) can never be met" in blocked.cause
    assert "DependencyNeverSatisfied" in blocked.cause and "`hpctrain cancel 691`" in blocked.fix


def test_a_failed_dependency_is_seen_before_slurm_sets_its_reason() -> None:
    row = "700|PENDING|Dependency||0:00|debug|1|||afterok:699(failed)\n"
    assert poll(row, {"700"})["700"].blocked is not None


@pytest.mark.parametrize(
    ("dependency", "never"),
    [
        ("(null)", False),
        ("", False),
        ("afterok:12(unfulfilled)", False),
        ("afterok:12(failed)", True),
        ("afterok:12(unfulfilled),afternotok:13(failed)", True),
        ("afterok:12(failed)?afterany:13(unfulfilled)", False),  # one of them is enough
        ("afterok:12(failed)?afternotok:13(failed)", True),
        ("afterok:12_*(failed)", True),
    ],
)
def test_a_dependency_can_never_be_met_when_a_needed_part_failed(dependency: str, never: bool) -> None:
    assert never_satisfied(dependency) is never


@pytest.mark.parametrize(
    ("row", "why"),
    [
        # One of two nodes excluded leaves enough for a one-node job.
        ("1|PENDING|Resources||0:00|debug|1|node1||(null)", None),
        # Both partitions are tried: cpu still has node3.
        ("2|PENDING|Priority||0:00|debug,cpu|1|node[1-2]||(null)", None),
        (
            "3|PENDING|Priority||0:00|debug,cpu|2|node[1-2]||(null)",
            "leaves 0 of the 2 nodes of partition debug",
        ),
        ("4|PENDING|Resources||0:00|debug|1|node2|node2|(null)", "it requires node2, excluded"),
        ("5|PENDING|Resources||0:00|debug|1||node7|(null)", "node7, excluded or not in partition debug"),
        ("6|PENDING|Resources||0:00|gpu|1|node1||(null)", None),  # a partition scontrol did not list
        ("7|PENDING|BeginTime||0:00|cpu|3|node3||(null)", "leaves 2 of the 3 nodes of partition cpu"),
    ],
)
def test_node_lists_are_judged_against_every_partition_of_the_job(row: str, why: str | None) -> None:
    job = row.split("|", 1)[0]
    blocked = poll(row + "\n", {job})[job].blocked
    if why is None:
        assert blocked is None, blocked
    else:
        assert blocked is not None and blocked.certain and why in blocked.cause, blocked


def test_the_partitions_are_asked_only_for_pending_rows_that_name_nodes() -> None:
    partitions = Partitions()
    poll(
        "1|PENDING|Resources||0:00|debug|2|||(null)\n2|RUNNING|None|node1|0:03|debug|1|node2||(null)\n",
        {"1", "2"},
        partitions,
    )
    assert partitions.calls == 0
    poll(QUEUE, {"689"}, partitions)
    assert partitions.calls == 1


@pytest.mark.parametrize(
    "reason",
    [
        "Resources",
        "Priority",
        "Dependency",
        "BeginTime",
        "PartitionDown",
        "JobHeldUser",
        "ReqNodeNotAvail, UnavailableNodes:node1",  # a down or drained node may come back
        "AssocMaxJobsLimit",
        "QOSMaxJobsPerUserLimit",
        "QOSGrpNodeLimit",
        "NodeDown",
        "None",
    ],
)
def test_reasons_that_pass_with_time_give_no_warning(reason: str) -> None:
    row = f"9|PENDING|{reason}||0:00|debug|1|||(null)\n"
    assert poll(row, {"9"})["9"].blocked is None


@pytest.mark.parametrize(
    "reason",
    ["PartitionNodeLimit", "PartitionTimeLimit", "PartitionConfig", "InvalidQOS", "QOSMaxNodePerJobLimit",
     "AssocMaxWallDurationPerJobLimit", "QOSMinCpuNotSatisfied", "QOSMaxGRESPerNode"],
)  # fmt: skip
def test_reasons_an_admin_may_lift_say_may_never_run(reason: str) -> None:
    blocked = never_by_reason("9", reason)
    assert blocked is not None and not blocked.certain
    assert blocked.warning().startswith("may never run: ") and reason in blocked.cause


def test_bad_constraints_without_node_lists_is_slurms_own_never() -> None:
    blocked = poll("9|PENDING|BadConstraints||0:00|debug|1|||(null)\n", {"9"})["9"].blocked
    assert blocked is not None and blocked.certain and "BadConstraints" in blocked.cause


def test_one_blocked_part_marks_a_hetjob_and_an_array() -> None:
    text = (
        "80+0|PENDING|Resources||0:00|debug|1|||(null)\n"
        "80+1|PENDING|Resources||0:00|debug|2|node2||(null)\n"
        "81_0|RUNNING|None|node1|0:05|debug|1|||(null)\n"
        "81_[1-3]|PENDING|BadConstraints||0:00|debug|2|node1,node2||(null)\n"
    )
    found = poll(text, {"80", "81"})
    assert found["80"].blocked is not None and "leaves 1 of the 2 nodes" in found["80"].blocked.cause
    assert found["81"].state is JobState.RUNNING and found["81"].blocked is not None


def test_rows_without_the_extra_columns_get_no_verdict() -> None:
    found = poll("5|PENDING|Resources||0:00\n", {"5"})
    assert found["5"].state is JobState.PENDING and found["5"].blocked is None


@given(st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12), max_size=7))
def test_any_columns_read_or_give_no_row(columns: list[str]) -> None:
    row = PendingRow.read(columns)
    if row is not None:
        never_runs("1", "Resources", row, lambda: parse_partitions(PARTITIONS))
