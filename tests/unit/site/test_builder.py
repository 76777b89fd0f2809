"""init-site's profile from recorded cluster facts: node names, GPUs per partition, shared GPU nodes."""

from __future__ import annotations

import pytest

from hpctrain.errors import HpctrainError, SpecError
from hpctrain.scheduler.slurm import facts as sf
from hpctrain.site.builder import build_site, choose_mpi, network_profile, partition_profile, render_yaml
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


def facts_with(nodes: dict[str, dict[str, str]], config: dict[str, str] | None = None) -> sf.ClusterFacts:
    names = ",".join(nodes)
    return sf.ClusterFacts({"p": {"Nodes": names, "Default": "YES", "MaxNodes": "1"}}, nodes, config or {})


def test_the_smallest_node_decides_what_a_partition_offers() -> None:
    facts = facts_with(
        {
            "a": {"CPUTot": "64", "RealMemory": "512000", "Gres": "gpu:h100:8"},
            "b": {"CPUTot": "32", "RealMemory": "256000", "Gres": "gpu:h100:4"},
        }
    )
    assert partition_profile(facts, "p", "gpu") == {
        "default": True,
        "nodes": 2,
        "gpus_per_node": 4,
        "gpu_type": "h100",
        "cpus_per_node": 32,
        "mem_per_node": "256000M",
        "max_time": "365-00:00:00",
        "max_nodes": 1,
        "node_names": ["a", "b"],
    }


def test_a_partition_whose_nodes_scontrol_does_not_list_is_an_error() -> None:
    facts = sf.ClusterFacts({"p": {"Nodes": "ghost"}}, {}, {})
    with pytest.raises(HpctrainError, match="partition p: scontrol lists none of its nodes"):
        partition_profile(facts, "p", "gpu")


@pytest.mark.parametrize(
    ("default", "plugins", "chosen"),
    [
        ("pmix", [], "pmix"),
        ("none", ["pmix", "pmi2"], "pmi2"),
        ("none", ["pmix"], "pmix"),
        ("none", [], "none"),
    ],
)
def test_mpi_is_the_cluster_default_or_the_first_plugin_hpctrain_knows(
    default: str, plugins: list[str], chosen: str
) -> None:
    facts = sf.ClusterFacts({}, {}, {"MpiDefault": default}, mpi_plugins=plugins)
    assert choose_mpi(facts) == chosen


def test_infiniband_ports_seen_by_the_probe_give_the_hcas_to_use() -> None:
    facts = facts_with({"a": {"NodeAddr": "10.0.0.1"}})
    probe = ["ib mlx5_0 1 ACTIVE InfiniBand", "ib mlx5_1 1 DOWN InfiniBand", "addr eth0 10.0.0.1"]
    network, notes = network_profile(facts, probe)
    assert network == {"interconnect": "infiniband"}
    assert notes[0] == "Probe saw 2 InfiniBand port(s), 1 active: mlx5_0:1."
    assert '  NCCL_IB_HCA: "=mlx5_0:1"   # leave out storage-only HCAs' in notes
    assert not any("GID" in line for line in notes)


def test_roce_ports_add_the_gid_index() -> None:
    network, notes = network_profile(facts_with({"a": {}}), ["ib mlx5_0 1 ACTIVE Ethernet"])
    assert network == {"interconnect": "roce"} and any("NCCL_IB_GID_INDEX: 3" in line for line in notes)


def test_without_infiniband_the_network_is_loopback_or_the_first_interface() -> None:
    assert network_profile(facts_with({"a": {"NodeAddr": "127.0.0.1"}}), None)[0] == {
        "interconnect": "loopback",
        "gloo_socket_ifname": "lo",
    }
    remote = facts_with({"a": {"NodeAddr": "10.0.0.1"}})
    network, notes = network_profile(remote, ["addr lo 127.0.0.1", "addr ens3 10.0.0.1"])
    assert network == {"interconnect": "ethernet", "gloo_socket_ifname": "ens3"}
    assert notes == ['Suggested: NCCL_SOCKET_IFNAME: "ens3" (no InfiniBand/RoCE seen)']
    assert network_profile(remote, None) == (
        {"interconnect": "ethernet"},
        ["No probe job ran: interconnect unknown, ethernet assumed."],
    )


def test_the_written_yaml_is_the_profile_under_its_notes() -> None:
    import yaml

    data = {"name": "made", "partitions": {"p": {"nodes": 1}}}
    text = render_yaml(data, ["first note", "second"])
    assert text.splitlines()[:4] == [
        "# Written by `hpctrain init-site` from the live cluster: review before use.",
        "#",
        "# first note",
        "# second",
    ]
    assert yaml.safe_load(text) == data
