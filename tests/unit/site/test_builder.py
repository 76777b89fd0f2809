"""init-site's profile from recorded cluster facts: node names, GPUs per partition, shared GPU nodes."""

from __future__ import annotations

import pytest

from hpctrain.errors import SpecError
from hpctrain.scheduler.slurm import facts as sf
from hpctrain.site.builder import build_site
from hpctrain.spec import JobSpec, Site, decode
from hpctrain.spec.resolve import resolve

NODES = "\n".join(
    f"NodeName={name} CPUTot=8 Gres=gpu:4 NodeAddr=127.0.0.1 RealMemory=8000 State=IDLE"
    for name in ("node1", "node2")
)
PARTITIONS = (
    "PartitionName=debug Default=YES MaxTime=02:00:00 Nodes=node[1-2] TRES=cpu=16,node=2,gres/gpu=8\n"
    "PartitionName=cpu MaxTime=04:00:00 Nodes=node[1-2] TRES=cpu=16,node=2,gres/gpu=8\n"
    "PartitionName=nogpu MaxTime=04:00:00 Nodes=node1 TRES=cpu=8,node=1\n"
)


def built(config: dict[str, str] | None = None) -> tuple[Site, list[str]]:
    facts = sf.ClusterFacts(
        sf.parse_records(PARTITIONS, "PartitionName"), sf.parse_records(NODES, "NodeName"), config or {}
    )
    data, notes = build_site("made", facts, None)
    return decode(Site, data, "test"), notes


@pytest.mark.parametrize(
    ("version", "parameters", "expedited"),
    [
        ("25.11.7", "enable_expedited_requeue", True),
        ("26.05.5", "enable_stepmgr,enable_expedited_requeue", True),
        ("25.11.7", "enable_stepmgr", False),  # the cluster refuses it unless its admin allows it
        ("24.11.5", "enable_expedited_requeue", False),  # before 25.05 there is no such requeue
    ],
)
def test_the_profile_asks_for_expedited_requeues_where_the_cluster_takes_them(
    version: str, parameters: str, expedited: bool
) -> None:
    site, _ = built({"SLURM_VERSION": version, "SlurmctldParameters": parameters})
    assert site.expedited_requeue is expedited


def test_node_names_are_written_so_an_unknown_excluded_node_is_refused() -> None:
    site, _ = built()
    assert site.partitions["debug"].node_names == ["node1", "node2"]
    assert site.partitions["nogpu"].node_names == ["node1"]
    job = decode(
        JobSpec, {"name": "j", "train": {"entrypoint": "m:f"}, "resources": {"exclude": ["node9"]}}, "j"
    )
    with pytest.raises(SpecError, match="node9 not in partition debug"):
        resolve(job, site)


def test_gpus_per_partition_follow_the_partitions_tres_and_shared_gpu_nodes_are_noted() -> None:
    site, notes = built()
    assert [site.partitions[p].gpus_per_node for p in ("debug", "cpu", "nogpu")] == [4, 4, 0]
    assert any("debug and cpu share 2 GPU node(s)" in line for line in notes), notes
