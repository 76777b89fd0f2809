"""Doctor's findings from what the cluster says (recorded facts, a preflight report): PASS, WARN and FAIL."""

from __future__ import annotations

import sys
from pathlib import Path

import msgspec
import pytest

from hpctrain import __version__
from hpctrain.rundir import NodeFacts, NodeVerdict, PreflightReport
from hpctrain.scheduler.slurm.facts import ClusterFacts
from hpctrain.site.doctor import (
    Finding,
    healthy_nodes,
    node_findings,
    node_state,
    preflight_findings,
    requeue_finding,
    version_finding,
)
from hpctrain.spec import load_site

SITES = Path(__file__).resolve().parents[3] / "site-configs"


def facts_of(version: str) -> ClusterFacts:
    return ClusterFacts(partitions={}, nodes={}, config={"SLURM_VERSION": version} if version else {})


def test_a_tested_release_passes_and_names_the_version() -> None:
    finding = version_finding(facts_of("25.11.7"))
    assert finding.status == "PASS"
    assert "Slurm 25.11.7" in finding.detail and "tested on 25.11" in finding.detail


def test_an_untested_release_warns_and_lists_the_tested_ones() -> None:
    finding = version_finding(facts_of("23.11.10"))
    assert finding.status == "WARN"
    assert "23.11.10" in finding.detail and "22.05" in finding.detail


def test_an_unknown_version_warns() -> None:
    assert version_finding(facts_of("")).status == "WARN"


@pytest.mark.parametrize(
    ("asked", "takes", "status"),
    [(True, True, "PASS"), (False, False, "PASS"), (True, False, "FAIL"), (False, True, "WARN")],
)
def test_the_profiles_expedited_requeue_is_checked_against_the_cluster(
    asked: bool, takes: bool, status: str
) -> None:
    facts = facts_of("25.11.7")
    facts.config["SlurmctldParameters"] = "enable_expedited_requeue" if takes else ""
    site = msgspec.structs.replace(load_site(SITES / "local.yaml"), expedited_requeue=asked)
    assert requeue_finding(site, facts).status == status


def cluster(
    state: str = "IDLE", cpus: str = "8", gres: str = "gpu:4", max_time: str = "02:00:00"
) -> ClusterFacts:
    node = {"CPUTot": cpus, "RealMemory": "8000", "Gres": gres, "State": state}
    return ClusterFacts(
        partitions={
            "debug": {"Nodes": "node[1-2]", "MaxTime": max_time},
            "cpu": {"Nodes": "node[1-2]", "MaxTime": "04:00:00"},
        },
        nodes={"node1": dict(node), "node2": dict(node)},
        config={},
    )


def statuses(findings: list[Finding]) -> dict[tuple[str, str], str]:
    return {(f.scope, f.check): f.status for f in findings}


def test_a_profile_that_fits_the_cluster_passes_every_node_check() -> None:
    found = node_findings(load_site(SITES / "local.yaml"), cluster())
    assert set(statuses(found).values()) == {"PASS"}
    checks = [(f.scope, f.check) for f in found]
    assert checks.count(("node1", "state")) == 1  # a node of two partitions is checked once for its state
    assert ("node2", "gpus (cpu)") in checks and ("debug", "max_time") in checks


def test_what_the_nodes_lack_fails_on_each_node() -> None:
    found = statuses(node_findings(load_site(SITES / "local.yaml"), cluster(cpus="4", gres="gpu:2")))
    assert found[("node1", "cpus (debug)")] == "FAIL" and found[("node2", "gpus (cpu)")] == "FAIL"
    assert found[("node1", "mem (debug)")] == "PASS"


def test_a_longer_max_time_a_missing_partition_and_too_few_nodes_fail() -> None:
    facts = cluster(max_time="01:00:00")
    del facts.partitions["cpu"]
    facts.partitions["debug"]["Nodes"] = "node1"
    found = node_findings(load_site(SITES / "local.yaml"), facts)
    by_check = {(f.scope, f.check): f for f in found}
    assert by_check[("debug", "max_time")].status == "FAIL"
    assert by_check[("debug", "max_time")].detail == "profile 02:00:00, cluster 01:00:00"
    assert by_check[("debug", "nodes")].detail == "profile 2, cluster 1"
    assert by_check[("debug", "nodes")].status == "FAIL"
    assert by_check[("cpu", "partition")].status == "FAIL"
    assert by_check[("cpu", "partition")].detail == "not a partition of the cluster (debug)"


@pytest.mark.parametrize(
    ("state", "status"),
    [("IDLE", "PASS"), ("MIXED", "PASS"), ("IDLE*", "FAIL"), ("DOWN+DRAIN", "FAIL"), ("idle+drain", "FAIL")],
)
def test_a_node_state_that_cannot_run_jobs_fails(state: str, status: str) -> None:
    finding = node_state("node1", {"State": state, "Reason": "hw"})
    assert finding.status == status and finding.detail == f"{state} hw"


def test_nodes_whose_state_failed_are_left_out_of_the_preflight() -> None:
    facts = cluster()
    facts.nodes["node2"]["State"] = "DOWN"
    found = node_findings(load_site(SITES / "local.yaml"), facts)
    assert healthy_nodes(found, ["node1", "node2"]) == ["node1"]


def test_a_preflight_that_gave_no_report_fails_every_node() -> None:
    found = preflight_findings(load_site(SITES / "local.yaml"), "job 5 timed out", ["node1", "node2"])
    assert [(f.scope, f.status, f.detail) for f in found] == [
        ("node1", "FAIL", "job 5 timed out"),
        ("node2", "FAIL", "job 5 timed out"),
    ]


def node_facts(node: str, **changes: object) -> NodeFacts:
    fields: dict[str, object] = {
        "node": node,
        "rank": 0,
        "local_rank": 0,
        "python": sys.version.split()[0],
        "hpctrain": __version__,
        "gpus_asked": 4,
        "gpus_seen": 4,
        "gpu_source": "torch.cuda",
        "node_busbw_gbps": 2.0,
    }
    fields.update(changes)
    return NodeFacts(**fields)  # type: ignore[arg-type]


def test_preflight_findings_per_node_and_the_cluster_s_all_reduce() -> None:
    report = PreflightReport(
        seconds=3.0,
        backend="nccl",
        ranks=8,
        size_mb=64.0,
        busbw_gbps=4.0,
        nodes={"node2": NodeVerdict(problems=["node all-reduce 0.1 GB/s, below half the median"])},
        facts=[
            node_facts("node1", ib_ports=["mlx5_0:1"]),
            node_facts(
                "node2",
                python="3.0.0",
                problems=["GPU 1 ECC errors", "IB mlx5_0:1 Down"],
                warnings=["slow"],
            ),
        ],
    )
    site = msgspec.structs.replace(
        load_site(SITES / "local.yaml"),
        network=msgspec.structs.replace(load_site(SITES / "local.yaml").network, expected_busbw_gbps=10.0),
    )
    found = {(f.scope, f.check): f for f in preflight_findings(site, report, ["node1", "node2"])}
    assert {k: v.status for k, v in found.items() if k[0] == "node1"} == {
        ("node1", c): "PASS"
        for c in ("versions", "gpus visible", "gpu health", "ib ports", "node all-reduce")
    }
    assert found[("node1", "ib ports")].detail == "mlx5_0:1"
    assert found[("node2", "versions")].status == "FAIL"
    assert found[("node2", "gpus visible")].status == "WARN"
    assert found[("node2", "gpu health")].detail == "GPU 1 ECC errors"
    assert found[("node2", "ib ports")].detail == "IB mlx5_0:1 Down"
    assert found[("node2", "node all-reduce")].status == "FAIL"
    assert found[("cluster", "all-reduce")].status == "FAIL"  # 4.0 is below half of 10
    assert found[("cluster", "all-reduce")].detail == "4.000 GB/s, site expects 10.0 GB/s"
