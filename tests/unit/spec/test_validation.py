"""Issue 10's hostile inputs, one test per defect class: refused in one line (exit 2) or harmless."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from hpctrain import spec
from hpctrain.scheduler.render import render
from tests.conftest import JOBS, SITES, run_cli

LOCAL = SITES / "local.yaml"
DIGITS = JOBS / "digits-ddp.yaml"


def refused(overrides: list[str], match: str, job: Path = DIGITS) -> str:
    with pytest.raises(spec.SpecError) as err:
        spec.resolve(spec.load_job(job, overrides), spec.load_site(LOCAL), str(job), "local")
    message = str(err.value)
    assert "\n" not in message, message
    assert match in message, message
    return message


def site_file(tmp_path: Path, extra: str) -> Path:
    path = tmp_path / "site.yaml"
    text = LOCAL.read_text()
    assert "\nenv:\n" in text
    path.write_text(text.replace("\nenv:\n", "\nenv:\n" + extra))
    return path


# 1. A trailing newline passed every pattern (re.search and `$`).
@pytest.mark.parametrize(
    "override",
    [
        'preemption.signal="USR1\\n"',
        'name="digits\\n"',
        'resources.partition="debug\\n"',
        'resources.account="acct\\n"',
        'array="0-3\\n"',
        'dependency="afterok:1\\n"',
        'env.FOO="a\\nb"',
        'env.FOO="a\\rb"',
        'env.FOO="a\\x7fb"',
        'setup=["echo a\\necho b"]',
    ],
)
def test_control_characters_and_trailing_newlines_are_refused(override: str) -> None:
    refused([override], "")


def test_env_key_with_trailing_newline_is_refused(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(DIGITS.read_text() + '  "FOO\\n": 1\n')
    with pytest.raises(spec.SpecError, match="env"):
        spec.load_job(job)


# 2. Env values ran code through bash arithmetic; reserved names are refused.
@pytest.mark.parametrize(
    "name", ["SLURM_JOB_ID", "SLURM_NODELIST", "HPCTRAIN_RUN_DIR", "PYTHON", "RUN_DIR", "BASH_ENV", "UID",
             "SHELLOPTS", "IFS", "MASTER_PORT", "MASTER_ADDR", "PS4", "status", "step_pid"],
)  # fmt: skip
def test_reserved_env_names_are_refused(name: str) -> None:
    refused([f"env.{name}=BASH_VERSINFO[$(touch /tmp/pwned)]"], "reserved")


def test_slurm_values_are_read_before_user_exports(tmp_path: Path) -> None:
    script = render(spec.resolve(spec.load_job(DIGITS), spec.load_site(LOCAL)), tmp_path / "run")
    lines = script.splitlines()
    first_export = next(i for i, line in enumerate(lines) if line.startswith("export OMP_NUM_THREADS="))
    checked = next(i for i, line in enumerate(lines) if line.startswith('case "${SLURM_JOB_ID:-}" in'))
    assert checked < first_export
    # The job id reaches the port rule as one quoted word (hpctrain.rundir.ports), never bash arithmetic.
    assert not [line for line in lines if "$((" in line and "SLURM_JOB_ID" in line]
    assert 'hpctrain.rundir.ports "$SLURM_JOB_ID" 0)' in script


# 3. Site env keys were not checked.
@pytest.mark.parametrize(
    "extra",
    [
        "  'X=1; touch /tmp/pwned; Y': 1\n",
        "  SLURM_JOB_ID: 'BASH_VERSINFO[$(touch /tmp/pwned)]'\n",
    ],
)
def test_site_env_keys_are_checked(tmp_path: Path, extra: str) -> None:
    with pytest.raises(spec.SpecError, match="env"):
        spec.load_site(site_file(tmp_path, extra))


def test_site_nccl_env_names_are_checked(tmp_path: Path) -> None:
    path = tmp_path / "site.yaml"
    path.write_text(
        LOCAL.read_text().replace(
            "  gloo_socket_ifname: lo\n", "  gloo_socket_ifname: lo\n  nccl_env: {PYTHON: x}\n"
        )
    )
    with pytest.raises(spec.SpecError, match="reserved"):
        spec.load_site(path)


# 4. Spec files: encodings, directories, devices, alias bombs, deep nesting.
def cli_refuses(*args: str, env: dict[str, str] | None = None) -> str:
    proc = run_cli("render", *args, env=env, timeout=60)
    assert proc.returncode == 2, proc.stdout[-300:] + proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert len(proc.stdout) < 10_000
    return proc.stderr


def test_non_utf8_and_utf16_files_exit_2(tmp_path: Path) -> None:
    latin = tmp_path / "latin.yaml"
    latin.write_bytes(b"name: caf\xe9\n")
    assert "latin.yaml" in cli_refuses(str(latin), "--site", "local")
    utf16 = tmp_path / "utf16.yaml"
    utf16.write_text(DIGITS.read_text(), encoding="utf-16")
    assert "utf16.yaml" in cli_refuses(str(utf16), "--site", "local")


def test_directory_and_empty_site_exit_2(tmp_path: Path) -> None:
    assert str(tmp_path) in cli_refuses(str(tmp_path), "--site", "local")
    cli_refuses(str(DIGITS), "--site", "")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every file")
def test_unreadable_file_is_named(tmp_path: Path) -> None:
    path = tmp_path / "secret.yaml"
    path.write_text(DIGITS.read_text())
    path.chmod(0)
    assert "secret.yaml" in cli_refuses(str(path), "--site", "local")


def test_device_that_fails_to_read_is_named() -> None:
    # Reading /proc/self/mem at offset 0 fails with EIO, even for root.
    assert "/proc/self/mem" in cli_refuses("/proc/self/mem", "--site", "local")


def test_endless_device_is_capped() -> None:
    assert "/dev/zero" in cli_refuses("/dev/zero", "--site", "local")


BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{n}: &{n} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
    for p, n in zip("abcdefgh", "bcdefghi", strict=True)
)


@pytest.mark.parametrize(
    "text",
    [
        "name: t\ntrain:\n  entrypoint: m:f\n  options:\n"
        + "".join(f"    {line}\n" for line in BOMB.splitlines()),
        "name: t\ntrain: {entrypoint: 'm:f', options: &r {self: *r}}\n",
        "name: t\ntrain:\n  entrypoint: m:f\n  options:\n    deep: " + "[" * 3000 + "]" * 3000 + "\n",
    ],
    ids=["alias-bomb", "recursive-alias", "3000-deep"],
)
def test_expansion_is_capped_before_anything_is_written(tmp_path: Path, text: str) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(text)
    home = tmp_path / "home"
    proc = run_cli(
        "submit", str(job), "--site", "local", "--backend", "local", env={"HPCTRAIN_HOME": str(home)}
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert not (home / "runs").exists() or not any((home / "runs").iterdir())
    cli_refuses(str(job), "--site", "local", "--spec")


def test_duplicate_keys_are_an_error(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(DIGITS.read_text() + "name: other\n")
    with pytest.raises(spec.SpecError, match="duplicate key 'name'"):
        spec.load_job(job)


# 5. Values that passed but were wrong.
@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        (["train.parallel.ps.servers=99", "train.parallel.ps.nodes=99"], "train.parallel.ps.nodes"),
        (["train.parallel.ps.cpus_per_server=999"], "train.parallel.ps.cpus_per_server"),
        (["train.parallel.ps.mem=999G"], "train.parallel.ps.mem"),
        (["train.parallel.ps.mem=lots"], "train.parallel.ps.mem"),
        (["train.parallel.ps.nodes=2"], "train.parallel.ps.nodes"),
    ],
)
def test_parameter_server_is_checked_against_the_site(overrides: list[str], match: str) -> None:
    refused(overrides, match, JOBS / "digits-ps-async.yaml")


@pytest.mark.parametrize(
    ("override", "match"),
    [
        ("preemption.signal=SIG", "preemption.signal"),
        ("preemption.signal=FOO", "preemption.signal"),
        ("preemption.signal=KILL", "preemption.signal"),
        ('resources.time="0"', "resources.time"),
        ('resources.time="00:00:00"', "resources.time"),
        ('resources.time="\u0663\u0660"', "resources.time"),
        ('resources.time=" 30"', "resources.time"),
        ('resources.mem="\u0661G"', "resources.mem"),
        ("train.grad_clip=-1", "train.grad_clip"),
        ("train.grad_clip=0", "train.grad_clip"),
        ("train.lr=.inf", "train.lr"),
        ("train.lr=.nan", "train.lr"),
        ("train.options.scale=.inf", "train.options.scale"),
        ("train.parallel.ps.worker_timeout=.inf", "worker_timeout"),
    ],
)
def test_wrong_values_are_refused(override: str, match: str) -> None:
    job = JOBS / ("digits-ps-async.yaml" if "ps." in override else "digits-ddp.yaml")
    refused([override], match, job)


@pytest.mark.parametrize("text", ["on", "no", "0755", "0x1F", "1e3", "true", "~x", "2026-01-01"])
def test_yaml_11_env_values_stay_literal(tmp_path: Path, text: str) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(DIGITS.read_text() + f"  FOO: {text}\n")
    assert spec.load_job(job).env["FOO"] == text
    assert spec.load_job(DIGITS, [f"env.BAR={text}"]).env["BAR"] == text


def test_override_into_an_unknown_shorthand_is_one_line() -> None:
    refused(["train.parallel=zero", "train.parallel.tp=2"], "train.parallel")


# 10. explain of an unknown field.
def test_explain_unknown_field_exits_2() -> None:
    proc = run_cli("explain", "job", "no.such.field")
    assert proc.returncode == 2
    assert "no.such.field" in proc.stderr and "Traceback" not in proc.stderr
    ok = run_cli("explain", "job", "train.lr")
    assert ok.returncode == 0 and "train.lr" in ok.stdout


def test_arithmetic_payload_in_env_value_stays_inert(tmp_path: Path) -> None:
    marker = tmp_path / "MARKER"
    job = spec.load_job(DIGITS, [f"env.PORT_HINT=BASH_VERSINFO[$(touch {marker})]"])
    script = render(spec.resolve(job, spec.load_site(LOCAL)), tmp_path / "run")
    stubs = tmp_path / "bin"
    stubs.mkdir()
    for tool, body in {"srun": "exit 0", "scontrol": "echo node1"}.items():
        (stubs / tool).write_text(f"#!/bin/sh\n{body}\n")
        (stubs / tool).chmod(0o755)
    (tmp_path / "job.sh").write_text(script)
    subprocess.run(
        ["env", "-i", f"PATH={stubs}:/usr/bin:/bin", "SLURM_JOB_ID=7", "SLURM_JOB_NODELIST=node1",
         "bash", str(tmp_path / "job.sh")],
        cwd=tmp_path, capture_output=True, timeout=60, check=False,
    )  # fmt: skip
    assert not marker.exists()


# Issue 23 item 20: refusals name the field and the key, list the choices and suggest the near miss.
@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["train.entrypoint=x"], "train.entrypoint: expected MODULE:FUNCTION, got 'x'"),
        (
            ["train.parallel=fsdp2"],
            "train.parallel: 'fsdp2' is not one of ddp, fsdp, tp, pp, ps, or a mapping of its fields; "
            "did you mean 'fsdp'?",
        ),
        (["launcher=srnu"], "launcher: 'srnu' is not one of srun, fork, torchrun, mpi; did you mean 'srun'?"),
        (["restart.on=[hnag]"], "restart.on[0]: 'hnag' is not one of hang, rank_failure, node_failure"),
        (
            ["launcher=fork", "train.parallel=ps"],
            "launcher: fork does not run parameter-server jobs (train.parallel.ps); use srun",
        ),
        (
            ["launcher=fork", "resources.gpus_per_node=2", "resources.tasks_per_node=1"],
            "resources.tasks_per_node: the fork launcher runs one rank per GPU (2), got 1",
        ),
        (["env.FOO=[1, 2]"], "env.FOO: Expected `bool | int | float | str`, got `array`"),
        (
            ["resources.gpu_per_node=2"],
            "resources: unknown field `gpu_per_node`; did you mean `gpus_per_node`?",
        ),
        (["trian.steps=3"], "unknown field `trian`; did you mean `train`?"),
        (["train.lrr=0.1"], "train: unknown field `lrr`; did you mean `lr`?"),
        (["sweep.gird={}"], "sweep: unknown field `gird`; did you mean `grid`?"),
        (["sweep.early_stop.after_step=4"], "sweep.early_stop: unknown field `after_step`; did you mean"),
        (["resources.zzzz=1"], "resources: unknown field `zzzz` (known: nodes, gpus_per_node,"),
    ],
)
def test_refusals_name_the_key_list_the_choices_and_suggest(overrides: list[str], message: str) -> None:
    refused(overrides, message)


def test_site_typos_get_a_suggestion_naming_the_partition(tmp_path: Path) -> None:
    path = tmp_path / "site.yaml"
    path.write_text(LOCAL.read_text().replace("mem_per_node:", "mem_per_nod:", 1))
    with pytest.raises(spec.SpecError) as err:
        spec.load_site(path)
    message = str(err.value)
    assert message.startswith(f"{path}: partitions.") and "\n" not in message
    assert "unknown field `mem_per_nod`; did you mean `mem_per_node`?" in message


def test_site_env_type_error_names_the_key(tmp_path: Path) -> None:
    with pytest.raises(spec.SpecError, match=r"site.yaml: env\.BAD_VALUE: Expected"):
        spec.load_site(site_file(tmp_path, "  BAD_VALUE: {a: 1}\n"))


def test_cli_typo_in_set_exits_2_with_the_suggestion() -> None:
    message = cli_refuses(str(DIGITS), "--site", "local", "--set", "resources.gpu_per_node=1")
    assert "resources: unknown field `gpu_per_node`; did you mean `gpus_per_node`?" in message
