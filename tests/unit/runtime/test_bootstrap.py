"""Env parsing of the runtime bootstrap for srun, torchrun, MPI and a plain process."""

from __future__ import annotations

import pytest

from hpctrain.rundir.ports import ephemeral_range, job_ports
from hpctrain.runtime import bootstrap

SRUN = {
    "SLURM_PROCID": "3",
    "SLURM_NTASKS": "4",
    "SLURM_STEP_NUM_TASKS": "4",
    "SLURM_LOCALID": "1",
    "SLURM_NODEID": "1",
    "SLURM_STEP_ID": "0",
    "SLURM_JOB_NODELIST": "node[1-2]",
    "SLURM_JOB_ID": "1234",
    "SLURM_RESTART_COUNT": "2",
    "SLURMD_NODENAME": "node2",
    "MASTER_ADDR": "node1",
    "MASTER_PORT": "21234",
}
TORCHRUN = {
    "RANK": "5",
    "WORLD_SIZE": "8",
    "LOCAL_RANK": "1",
    "GROUP_RANK": "2",
    "MASTER_ADDR": "gpu01",
    "MASTER_PORT": "29400",
    "TORCHELASTIC_RUN_ID": "x",
}


def test_srun_env() -> None:
    info = bootstrap.discover(SRUN)
    assert (info.launcher, info.rank, info.world_size, info.local_rank, info.node_rank) == (
        "srun",
        3,
        4,
        1,
        1,
    )
    assert (info.master_addr, info.master_port, info.job_id, info.restart_count) == (
        "node1",
        21234,
        "1234",
        2,
    )
    assert info.hostname == "node2"


def test_srun_without_master_falls_back_to_nodelist_and_job_port() -> None:
    env = {k: v for k, v in SRUN.items() if not k.startswith("MASTER_")}
    info = bootstrap.from_slurm(env)
    assert info.master_addr == "node1"
    assert info.master_port == bootstrap.default_port("1234") == job_ports("1234")[0]


def test_the_fallback_port_lies_outside_this_nodes_ephemeral_range() -> None:
    """Issue 23 item 13: the old fallback, 20000 + job id % 20000, gave job 15000 port 35000, an
    ephemeral port; the fallback is the batch script's rule now."""
    env = {**{k: v for k, v in SRUN.items() if not k.startswith("MASTER_")}, "SLURM_JOB_ID": "15000"}
    low, high = ephemeral_range()
    assert not low <= bootstrap.from_slurm(env).master_port <= high


def test_torchrun_wins_over_slurm_env() -> None:
    # torchrun started by srun: both sets of variables exist, torchrun's describe the worker.
    info = bootstrap.discover({**SRUN, **TORCHRUN})
    assert (info.launcher, info.rank, info.world_size, info.local_rank, info.node_rank) == (
        "torchrun",
        5,
        8,
        1,
        2,
    )
    assert (info.master_addr, info.master_port) == ("gpu01", 29400)


def test_batch_shell_is_not_a_task() -> None:
    # The batch script itself has SLURM_PROCID=0 but no step id: a plain single process.
    env = {k: v for k, v in SRUN.items() if k != "SLURM_STEP_ID"}
    env.pop("MASTER_ADDR")
    assert bootstrap.detect(env) == "single"


def test_single_process() -> None:
    info = bootstrap.discover({})
    assert (info.launcher, info.rank, info.world_size, info.local_rank) == ("single", 0, 1, 0)


@pytest.mark.parametrize("var", ["OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"])
def test_mpi_env_detected(var: str) -> None:
    assert bootstrap.detect({var: "0"}) == "mpi"


def test_explicit_choice_wins() -> None:
    assert bootstrap.detect({**SRUN, "HPCTRAIN_BOOTSTRAP": "mpi"}) == "mpi"
    with pytest.raises(ValueError, match="HPCTRAIN_BOOTSTRAP"):
        bootstrap.detect({"HPCTRAIN_BOOTSTRAP": "pmix"})


class FakeComm:
    """Four ranks on two hosts, seen from one rank: allgather/bcast answer as MPI would."""

    def __init__(self, rank: int, hosts: list[str]) -> None:
        self.rank, self.hosts = rank, hosts

    def Get_rank(self) -> int:  # mpi4py's names
        return self.rank

    def Get_size(self) -> int:
        return len(self.hosts)

    def allgather(self, value: str) -> list[str]:
        assert value == self.hosts[self.rank]
        return self.hosts

    def bcast(self, value: object, root: int) -> object:
        return ("node1", 23456) if self.rank != root else value


def test_mpi_ranks_and_local_rank_from_host_split() -> None:
    hosts = ["node1", "node1", "node2", "node2"]
    info = bootstrap.from_mpi({"SLURMD_NODENAME": "node2"}, FakeComm(3, hosts))
    assert (info.launcher, info.rank, info.world_size, info.local_rank, info.node_rank) == ("mpi", 3, 4, 1, 1)
    assert (info.master_addr, info.master_port) == ("node1", 23456)
    root = bootstrap.from_mpi({"SLURMD_NODENAME": "node1", "MASTER_PORT": "23456"}, FakeComm(0, hosts))
    assert (root.local_rank, root.node_rank, root.master_addr, root.master_port) == (0, 0, "node1", 23456)


@pytest.mark.parametrize(
    ("nodelist", "first"),
    [("node1", "node1"), ("node[1-2]", "node1"), ("gpu[03,07-09],cpu1", "gpu03"), ("a-b[10-11]", "a-b10")],
)
def test_first_host(nodelist: str, first: str) -> None:
    assert bootstrap.first_host(nodelist) == first
