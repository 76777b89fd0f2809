"""The command line without a cluster: exit codes, one-line errors, no torch on the login node."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import JOBS, REPO, run_cli


def test_help_and_render_never_import_torch() -> None:
    code = (
        "import sys; from hpctrain.cli.main import main\n"
        "for argv in (['--help'], ['render', 'jobs/digits-ddp.yaml', '--site', 'local'],"
        " ['explain', 'job']):\n"
        "    try:\n        main(argv)\n    except SystemExit:\n        pass\n"
        "heavy = [m for m in ('torch', 'numpy', 'pydantic') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr


def test_render_prints_the_script(hpctrain_home: Path) -> None:
    proc = run_cli("render", "jobs/digits-ddp.yaml", "--site", "local", "--set", "train.steps=7")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("#!/bin/bash")
    assert "#SBATCH --nodes=2" in proc.stdout
    assert not hpctrain_home.exists(), "a dry run must not record anything"


def test_render_spec_shows_resolved_overrides() -> None:
    proc = run_cli("render", "jobs/digits-ddp.yaml", "--site", "local", "--spec", "--set", "train.steps=7")
    assert proc.returncode == 0
    assert '"steps": 7' in proc.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "resources.nodes=abc"], "resources.nodes: Expected `int`, got `str`"),
        (
            ["--set", "resources.gpus_per_node=16"],
            "16 GPUs per node asked, partition debug of site local has 4",
        ),
        (["--set", "resources.time=9:00:00"], "resources.time: 9:00:00 is over the 02:00:00 limit"),
        (["--set", "bogus=1"], "unknown field `bogus`"),
        (
            ["--set", "train.parallel.dp=3", "--set", "train.parallel.tp=1"],
            "train.parallel: dp*fsdp*tp*pp = 3*1*1*1 = 3 but the job has 4 tasks",
        ),
        (
            ["--set", "train.parallel.dp=1", "--set", "train.parallel.tp=4"],
            "train.parallel.tp: tp=4 must fit inside one node (2 tasks per node)",
        ),
    ],
)
@pytest.mark.parametrize("verb", ["render", "submit"])
def test_bad_input_is_one_line_exit_2(verb: str, args: list[str], message: str, hpctrain_home: Path) -> None:
    proc = run_cli(verb, "jobs/digits-ddp.yaml", "--site", "local", *args)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (hpctrain_home / "runs").exists() or not any((hpctrain_home / "runs").iterdir())


def test_missing_files_are_clear() -> None:
    proc = run_cli("render", "jobs/nope.yaml", "--site", "local")
    assert proc.returncode == 2 and "jobs/nope.yaml: no such file" in proc.stderr
    proc = run_cli("render", "jobs/digits-ddp.yaml", "--site", "atlantis")
    assert proc.returncode == 2 and "atlantis" in proc.stderr and "Traceback" not in proc.stderr


def test_unknown_job_ids(hpctrain_home: Path) -> None:
    for verb in ("status", "logs", "cancel"):
        proc = run_cli(verb, "424242")
        assert proc.returncode == 1, (verb, proc.stderr)
        assert "424242" in proc.stderr and "Traceback" not in proc.stderr


def test_list_and_status_with_nothing_tracked(hpctrain_home: Path) -> None:
    assert run_cli("list").returncode == 0
    proc = run_cli("status")
    assert proc.returncode == 0 and "No jobs tracked" in proc.stdout


def test_explain_lists_documented_fields() -> None:
    proc = run_cli("explain", "job", "train.parallel")
    assert proc.returncode == 0
    assert "train.parallel.tp" in proc.stdout and "inside one node" in proc.stdout


def test_failed_sbatch_keeps_the_script(hpctrain_home: Path, tmp_path: Path) -> None:
    # A PATH whose sbatch refuses: the record, script and spec must survive, with the reason.
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "sbatch"
    fake.write_text(
        "#!/bin/sh\necho 'sbatch: error: Batch job submission failed: Invalid account' >&2\nexit 1\n"
    )
    fake.chmod(0o755)
    proc = run_cli(
        "submit",
        str(JOBS / "digits-ddp.yaml"),
        "--site",
        "local",
        "--backend",
        "slurm",
        env={"PATH": f"{bindir}:/usr/bin:/bin"},
    )
    assert proc.returncode == 1
    assert "Invalid account" in proc.stderr and "Traceback" not in proc.stderr
    runs = list((hpctrain_home / "runs").iterdir())
    assert len(runs) == 1
    assert (runs[0] / "job.sbatch").read_text().startswith("#!/bin/bash")
    assert (runs[0] / "spec.json").exists()
    listing = run_cli("list").stdout
    assert "SUBMIT_FAILED" in listing
