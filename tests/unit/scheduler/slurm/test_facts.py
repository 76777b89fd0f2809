"""Parsers of scontrol/srun output: real lines read right, and arbitrary text never raises a foreign error."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpctrain.scheduler.slurm import facts as sf
from hpctrain.scheduler.slurm import task_errors
from hpctrain.site.builder import build_site
from hpctrain.spec import Site, decode

NODE = (
    "NodeName=node1 Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 CPUTot=8 Gres=gpu:h100:4(S:0-1),nvme:1 "
    "NodeAddr=10.0.0.1 OS=Linux 6.1.0 #1 SMP PREEMPT_DYNAMIC @0  RealMemory=8000 State=IDLE Partitions=gpu"
)
PARTITION = "PartitionName=gpu Default=YES MaxNodes=UNLIMITED MaxTime=2-00:00:00 Nodes=node[1-2]"
MPI_LIST = "MPI plugin types are...\n\tpmix\n\tnone\n\tpmi2\nspecific pmix plugin versions available: v4\n"


def test_node_line_with_spaces_in_values() -> None:
    record = sf.parse_record(NODE)
    assert record["OS"] == "Linux 6.1.0 #1 SMP PREEMPT_DYNAMIC @0"
    assert record["RealMemory"] == "8000"
    assert sf.parse_gres(record["Gres"]) == (4, "h100")
    assert sf.parse_gres("gpu:4") == (4, None)
    assert sf.parse_gres("(null)") == (0, None)


def test_hostlists() -> None:
    assert sf.expand_hostlist("node[1-3,7],gpu01") == ["node1", "node2", "node3", "node7", "gpu01"]
    assert sf.expand_hostlist("gpu[08-10]") == ["gpu08", "gpu09", "gpu10"]
    with pytest.raises(sf.SlurmParseError):
        sf.expand_hostlist("node[1-")


def test_mpi_list_and_config() -> None:
    assert sf.parse_mpi_list(MPI_LIST) == ["pmix", "none", "pmi2"]
    config = sf.parse_config("Configuration data as of now\nMaxArraySize        = 1001\nMpiDefault = none\n")
    assert config == {"MaxArraySize": "1001", "MpiDefault": "none"}


def test_site_built_from_recorded_facts_loads() -> None:
    nodes = sf.parse_records(NODE + "\n" + NODE.replace("node1", "node2"), "NodeName")
    facts = sf.ClusterFacts(sf.parse_records(PARTITION, "PartitionName"), nodes, {"MpiDefault": "pmix"})
    probe = ["ib mlx5_0 1 ACTIVE InfiniBand", "ib mlx5_1 1 DOWN InfiniBand", "addr ib0 10.1.0.1/16"]
    data, notes = build_site("x", facts, probe)
    site = decode(Site, data, "test")
    part = site.partitions["gpu"]
    assert (part.nodes, part.gpus_per_node, part.gpu_type, part.mem_per_node) == (2, 4, "h100", "8000M")
    assert site.network.interconnect == "infiniband" and site.mpi == "pmix"
    assert any('NCCL_IB_HCA: "=mlx5_0:1"' in line for line in notes), notes


PARSERS = [
    sf.parse_record,
    lambda t: sf.parse_records(t, "NodeName"),
    sf.expand_hostlist,
    sf.parse_gres,
    sf.parse_mpi_list,
    sf.parse_config,
    sf.memory_text_mb,
    sf.slurm_time,
]
SLURMISH = st.text(alphabet=st.sampled_from(list("NodeName=GresgpuMax:[]-,()01239 \t\n*#@=")), max_size=80)


@pytest.mark.parametrize("parse", PARSERS)
@settings(max_examples=300, deadline=None)
@given(text=st.one_of(st.text(max_size=80), SLURMISH))
def test_arbitrary_text_gives_value_or_parse_error(parse: object, text: str) -> None:
    try:
        parse(text)  # type: ignore[operator]
    except sf.SlurmParseError as err:
        assert str(err)


@given(st.from_regex(r"[0-9,\-]{0,80}", fullmatch=True))
def test_task_ranks_never_raises_and_stays_small(text: str) -> None:
    """srun's task list, whatever digits, dashes and commas it holds: no ValueError, no huge list."""
    ranks = task_errors.task_ranks(text)
    assert len(ranks) <= (text.count(",") + 1) * task_errors.MAX_RANGE
    assert all(rank for rank in ranks)


@pytest.mark.parametrize(
    ("version", "release", "tested"),
    [("25.11.7", "25.11", True), ("22.05.8", "22.05", True), ("23.11.10", "23.11", False), ("", None, False)],
)
def test_a_version_is_tested_by_its_release(version: str, release: str | None, tested: bool) -> None:
    found, date = sf.tested_release(version)
    assert found == release
    assert (date is not None) is tested


@pytest.mark.parametrize(
    ("version", "parameters", "expected"),
    [
        ("25.11.7", "enable_expedited_requeue", True),
        ("25.05.0", "idle_on_node_suspend,enable_expedited_requeue", True),
        ("26.05.5", "enable_expedited_requeue_later", False),
        ("25.11.7", "(null)", False),  # the release has it, the site has not enabled it: sbatch is refused
        ("24.11.5", "enable_expedited_requeue", False),  # before 25.05 there is no such option
        ("", "enable_expedited_requeue", False),
    ],
)
def test_expedited_requeue_needs_the_release_and_the_sites_parameter(
    version: str, parameters: str, expected: bool
) -> None:
    text = f"SLURM_VERSION           = {version}\nSlurmctldParameters     = {parameters}\n"
    assert sf.expedited_requeue(sf.parse_config(text)) is expected
