"""Packaging as users get it: sdist -> wheel -> fresh venv (no checkout on sys.path) -> real submit.

Marked `build`: it builds the sdist and the wheel with setuptools' PEP 517 hooks (no network) and
installs the wheel non-editable into a virtual environment that reuses the system's torch.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.integration.cluster import require_cluster

pytestmark = [pytest.mark.cluster, pytest.mark.build, pytest.mark.slow]

BUILD = "import sys; from setuptools import build_meta as b; print(getattr(b, sys.argv[1])(sys.argv[2]))"


def run(argv: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 300) -> str:
    proc = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert proc.returncode == 0, f"{argv}: {proc.stdout[-2000:]} {proc.stderr[-2000:]}"
    return proc.stdout


def build(tmp_path: Path) -> Path:
    """The sdist from the checkout, then the wheel from the unpacked sdist (what pip does from PyPI)."""
    dist = tmp_path / "dist"
    sdist = dist / run([sys.executable, "-c", BUILD, "build_sdist", str(dist)], REPO).split()[-1]
    with tarfile.open(sdist) as archive:
        archive.extractall(tmp_path / "src", filter="data")
    (source,) = (tmp_path / "src").iterdir()
    wheel = dist / run([sys.executable, "-c", BUILD, "build_wheel", str(dist)], source).split()[-1]
    return wheel


def test_wheel_installs_and_submits(tmp_path: Path, hpctrain_home: Path) -> None:
    require_cluster()
    wheel = build(tmp_path)
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {
        f"hpctrain/templates/{p.relative_to(REPO / 'templates')}" for p in (REPO / "templates").rglob("*.j2")
    }
    shipped |= {f"hpctrain/site_configs/{p.name}" for p in (REPO / "site-configs").glob("*.yaml")}
    shipped |= {f"hpctrain/example_jobs/{p.name}" for p in (REPO / "jobs").glob("*.yaml")}
    shipped |= {str(p.relative_to(REPO)) for p in (REPO / "hpctrain").rglob("*.py")}
    assert shipped <= names, sorted(shipped - names)

    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], tmp_path)
    env = {
        k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "HPCTRAIN_TEMPLATES", "HPCTRAIN_SITES")
    }
    env["PATH"] = f"{venv / 'bin'}:{env['PATH']}"
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", "--no-index"]
    run([*pip, "--force-reinstall", str(wheel)], tmp_path, env)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    where = run(
        [str(venv / "bin" / "python"), "-c", "import hpctrain; print(hpctrain.__file__)"], elsewhere, env
    )
    assert where.startswith(str(venv)), f"hpctrain imported from {where}, not the wheel"

    hpctrain = str(venv / "bin" / "hpctrain")
    assert "submit" in run([hpctrain, "--help"], elsewhere, env)
    assert "sites" in run([hpctrain, "sites"], elsewhere, env)
    # The help text is read from the fields' docstrings in the installed sources.
    assert "Peak learning rate" in run([hpctrain, "explain", "job", "train.lr"], elsewhere, env)
    script = run([hpctrain, "render", "digits-ddp", "--site", "local"], elsewhere, env)
    assert f"PYTHON='{venv}/bin/python" in script, script[:2000]
    out = run(
        [hpctrain, "submit", "digits-ddp", "--site", "local", "--set", "train.steps=20", "--wait"],
        elsewhere,
        env,
        timeout=400,
    )
    assert "COMPLETED" in out, out
    # doctor from the wheel: the compute nodes run the venv's hpctrain, the same version as here.
    report = run([hpctrain, "doctor", "--site", "local", "--json"], elsewhere, env, timeout=300)
    assert '"ok": true' in report, report
