"""The generated spec reference in docs/ is current, and every shipped site profile loads."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpctrain import spec
from hpctrain.spec import load_site
from tests.unit.doc_generators import ROOT, load_generator

SITE_FILES = sorted((ROOT / "site-configs").glob("*.yaml"))
GENERATOR = load_generator("gen-spec-docs.py")


def test_the_generated_references_are_current() -> None:
    assert GENERATOR.main(["--check"]) == 0  # its stderr names each stale file


def test_there_are_site_profiles() -> None:
    assert len(SITE_FILES) >= 3, SITE_FILES


@pytest.mark.parametrize("path", SITE_FILES, ids=lambda p: p.name)
def test_site_profile_loads(path: Path) -> None:
    site = load_site(path)
    assert site.name == path.stem, f"{path.name}: name {site.name!r} should match the file name"
    assert site.partition(None)[0] in site.partitions
    if any(p.gpus_per_node for p in site.partitions.values()):
        assert site.gres_name


def test_real_cluster_profiles_pin_their_network() -> None:
    # The hardware profiles are templates for real clusters: the NCCL settings they teach must be there.
    for name in ("h100-ib-ndr", "a100-4gpu"):
        site = load_site(ROOT / "site-configs" / f"{name}.yaml")
        assert site.network.interconnect == "infiniband"
        assert {"NCCL_IB_HCA", "NCCL_SOCKET_IFNAME", "NCCL_NET_GDR_LEVEL"} <= site.network.nccl_env.keys()
        assert "UCX_NET_DEVICES" in site.network.ucx_env


def test_field_docs_give_each_default_and_mark_required_fields() -> None:
    defaults = {row.name: row.default for row in spec.field_docs(spec.JobSpec)}
    assert defaults["name"] == defaults["train.entrypoint"] == "required"
    assert (defaults["train.steps"], defaults["train.batch_size"]) == ("100", "32")
    assert (defaults["resources.time"], defaults["resources.mem"]) == ("00:30:00", "unset")
    assert (defaults["train.tensorboard"], defaults["train.options"]) == ("unset", "{}")
    assert defaults["restart.on"] == "[hang, rank_failure, node_failure]"
    assert defaults["resources"] == ""  # a section: its fields carry the defaults
    site = {row.name: row.default for row in spec.field_docs(spec.Site)}
    assert site["partitions"] == "required" and site["partitions.nodes"] == "required"


def test_job_reference_has_a_default_column() -> None:
    text = (ROOT / "docs" / "job-spec.md").read_text(encoding="utf-8")
    assert "| Field | Type | Default | Description |" in text
    assert "| `train.steps` | `int` | `100` |" in text
    assert "| `train.entrypoint` | `str` | `required` |" in text
