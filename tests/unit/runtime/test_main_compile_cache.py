"""Where the runtime points the inductor and Triton compile caches (train.compile_cache)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hpctrain import spec
from hpctrain.runtime.__main__ import set_compile_cache_env

REPO = Path(__file__).resolve().parents[3]
CACHE_VARIABLES = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")


def resolved(tmp_path: Path, train: str = "", env: str = "") -> spec.Resolved:
    job = tmp_path / "job.yaml"
    job.write_text(f"name: cache\ntrain:\n  entrypoint: m:f\n{train}{env}")
    return spec.resolve(spec.load_job(job), spec.load_site(REPO / "site-configs" / "local.yaml"))


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in CACHE_VARIABLES:
        monkeypatch.delenv(variable, raising=False)


def test_by_default_the_caches_live_in_the_run_directory(tmp_path: Path) -> None:

    run = tmp_path / "run"
    folder = set_compile_cache_env(resolved(tmp_path), run)
    assert folder == run / "compile-cache"
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(run / "compile-cache" / "inductor")
    assert os.environ["TRITON_CACHE_DIR"] == str(run / "compile-cache" / "triton")


def test_a_configured_folder_expands_variables_and_a_relative_one_stays_in_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:

    monkeypatch.setenv("FAST_SCRATCH", str(tmp_path / "scratch"))
    folder = set_compile_cache_env(
        resolved(tmp_path, "  compile_cache: $FAST_SCRATCH/gpt\n"), tmp_path / "run"
    )
    assert folder == tmp_path / "scratch" / "gpt"
    assert os.environ["TRITON_CACHE_DIR"] == str(tmp_path / "scratch" / "gpt" / "triton")
    folder = set_compile_cache_env(resolved(tmp_path, "  compile_cache: cache\n"), tmp_path / "run")
    assert folder == tmp_path / "run" / "cache"


def test_the_jobs_own_env_setting_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/mine")  # as the batch script exports the job's env
    set_compile_cache_env(
        resolved(tmp_path, env="env:\n  TORCHINDUCTOR_CACHE_DIR: /mine\n"), tmp_path / "run"
    )
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == "/mine"
    assert os.environ["TRITON_CACHE_DIR"] == str(tmp_path / "run" / "compile-cache" / "triton")
