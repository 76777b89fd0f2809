"""The generated spec reference in docs/ is current, and every shipped site profile loads."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from hpctrain import spec
from hpctrain.spec import load_site

ROOT = Path(__file__).resolve().parents[3]
SITE_FILES = sorted((ROOT / "site-configs").glob("*.yaml"))


def load_generator() -> ModuleType:
    # scripts/gen-spec-docs.py is a script (hyphenated name), not a module of the package.
    spec = importlib.util.spec_from_file_location("gen_spec_docs", ROOT / "scripts" / "gen-spec-docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GENERATOR = load_generator()


@pytest.mark.parametrize("target", GENERATOR.TARGETS, ids=lambda t: t.path.name)
def test_generated_reference_is_current(target: object) -> None:
    path = target.path  # type: ignore[attr-defined]
    assert path.exists(), f"{path} is missing: run python scripts/gen-spec-docs.py"
    current = path.read_text(encoding="utf-8")
    assert GENERATOR.updated(target, current) == current, (
        f"{path.relative_to(ROOT)} is stale: run python scripts/gen-spec-docs.py"
    )


def test_regenerating_changes_nothing() -> None:
    once = {t.path: GENERATOR.updated(t, t.path.read_text(encoding="utf-8")) for t in GENERATOR.TARGETS}
    twice = {t.path: GENERATOR.updated(t, once[t.path]) for t in GENERATOR.TARGETS}
    assert once == twice


def test_a_moved_source_replaces_its_section_not_appends_one() -> None:
    target = GENERATOR.TARGETS[-1]
    current = target.path.read_text(encoding="utf-8")
    moved = target._replace(source="elsewhere/")
    rewritten = GENERATOR.updated(moved, current)
    assert rewritten.count("<!-- END GENERATED:") == current.count("<!-- END GENERATED:")
    assert "from elsewhere/ -->" in rewritten and "from hpctrain/rundir/ -->" not in rewritten


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
