"""Doctor's cluster-wide findings that need no cluster: the Slurm version and requeue lines."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from hpctrain.scheduler.slurm.facts import ClusterFacts
from hpctrain.site.doctor import requeue_finding, version_finding
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
