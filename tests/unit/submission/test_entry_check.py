"""Entrypoint typos and missing files are refused at submit with exit 2, without running the user's code."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from hpctrain.errors import SpecError
from hpctrain.submission.entry_check import check_entrypoint, defines
from tests.conftest import JOBS, run_cli


@pytest.mark.parametrize(
    ("entrypoint", "says"),
    [
        ("hpctrain.examples.digitz:build", "hpctrain.examples.digitz is not found"),
        ("hpctrain.examples.digits:buidl", "defines no buidl"),
        ("digits:build", "module digits is not found"),
    ],
)
def test_typos_are_refused_with_one_line(entrypoint: str, says: str, hpctrain_home: Path) -> None:
    proc = run_cli(
        "submit", str(JOBS / "digits-ddp.yaml"), "--site", "local", "--set", f"train.entrypoint={entrypoint}"
    )
    assert proc.returncode == 2, proc.stderr
    assert says in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not (hpctrain_home / "runs").exists() or not any((hpctrain_home / "runs").iterdir())


def test_a_module_not_found_names_the_folder_searched_and_the_setting_that_adds_one(tmp_path: Path) -> None:
    code = tmp_path / "code"
    code.mkdir()
    (code / "my_model.py").write_text("def build(options):\n    return None\n")
    args = [
        "submit",
        str(JOBS / "digits-ddp.yaml"),
        "--site",
        "local",
        "--set",
        "train.entrypoint=my_model:build",
    ]
    proc = run_cli(*args, cwd=tmp_path)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert f"searched {tmp_path}, the folder you submit from" in proc.stderr, proc.stderr
    assert "add that folder with env.PYTHONPATH" in proc.stderr, proc.stderr
    # The setting it names is the fix: the check (and the job) then find the module.
    render = ["render", *args[1:], "--set", f"env.PYTHONPATH={code}"]
    proc = run_cli(*render, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr


def test_no_check_skips_it() -> None:
    proc = run_cli(
        "render",
        str(JOBS / "digits-ddp.yaml"),
        "--site",
        "local",
        "--no-check",
        "--set",
        "train.entrypoint=nope:x",
    )
    assert proc.returncode == 0, proc.stderr


def test_user_code_is_never_run(tmp_path: Path) -> None:
    package = tmp_path / "mypkg"
    package.mkdir()
    marker = tmp_path / "ran"
    (package / "__init__.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    (package / "train.py").write_text(f"open({str(marker)!r}, 'w').close()\ndef build(train):\n    pass\n")
    check_entrypoint("mypkg.train:build", "job.yaml", cwd=tmp_path)
    with pytest.raises(SpecError, match="defines no buid"):
        check_entrypoint("mypkg.train:buid", "job.yaml", cwd=tmp_path)
    assert not marker.exists()


def test_paths_named_by_options_must_exist(hpctrain_home: Path) -> None:
    proc = run_cli(
        "render",
        str(JOBS / "digits-ddp.yaml"),
        "--site",
        "local",
        "--set",
        "train.options.data_dir=/no/such/dir",
    )
    assert proc.returncode == 2 and "train.options.data_dir" in proc.stderr, proc.stderr


def test_defines_sees_every_binding() -> None:
    assert defines(ast.parse("def build(t): pass"), "build") is True
    assert defines(ast.parse("from x import make as build"), "build") is True
    assert defines(ast.parse("build = make"), "build") is True
    assert defines(ast.parse("from x import *"), "build") is None
    assert defines(ast.parse("def other(): pass"), "build") is False
