"""Detection of container runtimes (init-site, doctor), and doctor's findings about them."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpctrain.scheduler.slurm.facts import ClusterFacts
from hpctrain.site import containers
from hpctrain.site.builder import build_site
from hpctrain.site.doctor import container_findings
from hpctrain.spec import decode
from hpctrain.spec.site import Site

PYXIS_HELP = """Usage: srun [OPTIONS(0)... [executable(0) [args(0)...]]]
      --container-image=[USER@][REGISTRY#]IMAGE[:TAG]|PATH
                              [pyxis] the image to use for the container
"""


def facts(conf_dir: Path) -> ClusterFacts:
    node = {"CPUTot": "8", "RealMemory": "8000", "Gres": "(null)", "NodeAddr": "10.0.0.1"}
    return ClusterFacts(
        partitions={"cpu": {"Nodes": "n1", "Default": "YES", "MaxTime": "UNLIMITED"}},
        nodes={"n1": node},
        config={"SLURM_CONF": str(conf_dir / "slurm.conf")},
    )


def test_each_runtime_is_found_by_its_own_sign(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert containers.pyxis_evidence(PYXIS_HELP) == "srun's options include --container-image"
    assert containers.pyxis_evidence("      --container   Path to OCI container bundle") is None
    assert containers.oci_evidence(str(tmp_path / "slurm.conf")) is None
    (tmp_path / "oci.conf").write_text('RunTimeRun="runc run %n -b %b"\n')
    assert containers.oci_evidence(str(tmp_path / "slurm.conf")) == f"{tmp_path / 'oci.conf'} exists"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))
    assert containers.apptainer_evidence() is None
    (bin_dir / "apptainer").write_text("#!/bin/sh\n")
    (bin_dir / "apptainer").chmod(0o755)
    assert containers.apptainer_evidence() == f"{bin_dir / 'apptainer'} on PATH"


def test_init_site_lists_the_runtimes_found(tmp_path: Path) -> None:
    found = {"pyxis": "srun's options include --container-image", "oci": "/etc/slurm/oci.conf exists"}
    data, notes = build_site("made", facts(tmp_path), None, found)
    assert data["container_runtimes"] == ["pyxis", "oci"]
    assert "Container runtime pyxis: srun's options include --container-image." in notes
    assert decode(Site, data, "made").container_runtimes == ["pyxis", "oci"]
    data, _ = build_site("made", facts(tmp_path), None, {})
    assert "container_runtimes" not in data


def test_doctor_reports_each_runtime_against_the_profile() -> None:
    site = decode(Site, {"name": "s", "partitions": {"p": {"nodes": 1}}, "container_runtimes": ["oci"]}, "s")
    findings = {f.check: (f.status, f.detail) for f in container_findings(site, {"pyxis": "seen"})}
    assert findings["container pyxis"] == ("WARN", "seen; add it to the profile's container_runtimes")
    assert findings["container oci"] == ("FAIL", "listed in container_runtimes, not found")
    assert findings["container apptainer"] == ("PASS", "not installed")
