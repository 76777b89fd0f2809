"""Doctor's cluster-wide findings that need no cluster: the Slurm version line."""

from __future__ import annotations

from hpctrain.scheduler.slurm.facts import ClusterFacts
from hpctrain.site.doctor import version_finding


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
