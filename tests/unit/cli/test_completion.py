"""Site profiles found by name from every source, example jobs by name, and bash completion that completes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, SITES, run_cli


def test_sites_from_user_folder_and_site_path(tmp_path: Path) -> None:
    config, extra = tmp_path / "config", tmp_path / "extra"
    (config / "hpctrain" / "sites").mkdir(parents=True)
    extra.mkdir()
    text = (SITES / "local.yaml").read_text()
    (config / "hpctrain" / "sites" / "mine.yaml").write_text(text.replace("name: local", "name: mine"))
    (extra / "theirs.yaml").write_text(text.replace("name: local", "name: theirs"))
    env = {"XDG_CONFIG_HOME": str(config), "HPCTRAIN_SITE_PATH": str(extra)}
    proc = run_cli("sites", "--json", env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    sources = {e["name"]: e["source"] for e in json.loads(proc.stdout) if not e["shadowed"]}
    assert sources == {
        "mine": "~/.config/hpctrain/sites",
        "theirs": "$HPCTRAIN_SITE_PATH",
        "local": "hpctrain",
        "a100-4gpu": "hpctrain",
        "h100-ib-ndr": "hpctrain",
    }
    for name in ("mine", "theirs"):
        proc = run_cli("render", "digits-ddp", "--site", name, env=env, cwd=tmp_path)
        assert proc.returncode == 0 and f"on site {name}" in proc.stdout, proc.stderr


def test_unknown_example_is_one_line(tmp_path: Path) -> None:
    proc = run_cli("render", "digits-ddq", "--site", "local", cwd=tmp_path)
    assert proc.returncode == 2 and "no example job of that name" in proc.stderr, proc.stderr


def complete(words: list[str], tmp_path: Path) -> list[str]:
    """What bash's completion function offers for the command line `words` (last word being typed)."""
    script = run_cli("completion", "bash").stdout
    (tmp_path / "c.sh").write_text(script)
    shim = f'hpctrain() {{ {sys.executable} -m hpctrain.cli.main "$@"; }}'
    line = " ".join(f"'{w}'" for w in words)
    program = (
        f"{shim}; source {tmp_path}/c.sh; COMP_WORDS=({line}); COMP_CWORD={len(words) - 1}; "
        '_hpctrain; printf "%s\\n" "${COMPREPLY[@]}"'
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        ["bash", "-c", program], capture_output=True, text=True, timeout=60, cwd=REPO, env=env
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


@pytest.mark.parametrize(
    ("words", "expected"),
    [
        (["hpctrain", "sub"], ["submit"]),
        (["hpctrain", "submit", "digits-d"], ["digits-ddp"]),
        (["hpctrain", "submit", "x.yaml", "--site", "loc"], ["local"]),
        (["hpctrain", "submit", "x.yaml", "--wa"], ["--wait"]),
        (["hpctrain", "doctor", "--js"], ["--json"]),
        (["hpctrain", "submit", "x.yaml", "--backend", "loc"], ["local"]),
        (["hpctrain", "completion", "z"], ["zsh"]),
        (["hpctrain", "explain", "fi"], ["files"]),
        (["hpctrain", "index", "co"], ["compact"]),
        (["hpctrain", "explain", "job", "fi"], []),
    ],
)
def test_bash_completes(words: list[str], expected: list[str], tmp_path: Path) -> None:
    assert complete(words, tmp_path) == expected


def test_bash_completes_job_ids(tmp_path: Path, hpctrain_home: Path) -> None:
    hpctrain_home.mkdir(parents=True)
    record = {
        "op": "add",
        "run_id": "r1",
        "job_id": "4242",
        "name": "n",
        "site": "local",
        "backend": "slurm",
        "run_dir": str(tmp_path),
        "submitted_at": 1.0,
        "state": "RUNNING",
        "state_at": 1.0,
    }
    (hpctrain_home / "index.jsonl").write_text(json.dumps(record) + "\n")
    assert complete(["hpctrain", "cancel", "42"], tmp_path) == ["4242"]


def test_bash_script_is_shellcheck_clean(tmp_path: Path) -> None:
    from tests.unit.scheduler.test_render import shellcheck

    shellcheck(run_cli("completion", "bash").stdout, tmp_path)


def test_zsh_script_uses_bashcompinit() -> None:
    proc = run_cli("completion", "zsh")
    assert proc.returncode == 0 and "bashcompinit" in proc.stdout and "_hpctrain" in proc.stdout


def test_examples_list_print_and_copy(tmp_path: Path) -> None:
    listed = run_cli("examples", cwd=tmp_path)
    assert listed.returncode == 0 and "digits-ddp" in listed.stdout, listed.stderr
    shown = run_cli("examples", "digits-ddp", cwd=tmp_path)
    assert shown.stdout == (REPO / "jobs" / "digits-ddp.yaml").read_text()
    copied = run_cli("examples", "digits-ddp", "--copy", str(tmp_path / "mine"), cwd=tmp_path)
    assert copied.returncode == 0 and (tmp_path / "mine" / "digits-ddp.yaml").read_text() == shown.stdout


def test_init_site_never_overwrites_without_force(tmp_path: Path) -> None:
    target = tmp_path / "exists.yaml"
    target.write_text("keep me\n")
    proc = run_cli("init-site", "exists", "-o", str(target), cwd=tmp_path)
    assert proc.returncode == 2 and "--force" in proc.stderr, proc.stderr
    assert target.read_text() == "keep me\n"
