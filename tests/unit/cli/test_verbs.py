"""The command line without a cluster: exit codes, one-line errors, no torch on the login node."""

from __future__ import annotations

import json
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


@pytest.mark.parametrize("what", ["job", "site", "files"])
def test_explain_shows_defaults_marks_required_fields_and_fits_100_columns(what: str) -> None:
    proc = run_cli("explain", what)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert max(len(line) for line in lines) <= 100, max(lines, key=len)
    if what == "job":
        assert "train.steps (int, default 100)" in lines
        assert "train.batch_size (int, default 32)" in lines
        assert "resources.time (str or int, default 00:30:00)" in lines
        assert "train.entrypoint (str, required)" in lines
        assert "    Optimizer steps to train." in lines


def test_explain_files_names_the_fields_of_a_run_directory_file() -> None:
    proc = run_cli("explain", "files", "result.json")
    assert proc.returncode == 0, proc.stderr
    assert "Result.eval_loss" in proc.stdout and "TrainLine" not in proc.stdout
    lines = run_cli("explain", "files", "metrics.jsonl").stdout
    assert "TrainLine.data_share" in lines and "EventLine.save_s" in lines
    unknown = run_cli("explain", "files", "nope.json")
    assert unknown.returncode == 2 and "the files: metrics.jsonl" in unknown.stderr
    assert unknown.stderr.count("\n") == 1 and "Traceback" not in unknown.stderr


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


def _fake_tool(tmp_path: Path, name: str, body: str) -> Path:
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    tool = bindir / name
    tool.write_text("#!/bin/sh\n" + body)
    tool.chmod(0o755)
    return bindir


def test_a_warning_after_the_job_id_still_records_the_job(hpctrain_home: Path, tmp_path: Path) -> None:
    bindir = _fake_tool(tmp_path, "sbatch", "echo 4242\necho 'sbatch: warning: the job may never start' \n")
    proc = run_cli(
        "submit",
        "jobs/digits-ddp.yaml",
        "--site",
        "local",
        "--backend",
        "slurm",
        "--json",
        env={"PATH": f"{bindir}:/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["job_id"] == "4242"
    listing = json.loads(run_cli("list", "--json").stdout)
    assert [(r["job_id"], r["state"]) for r in listing] == [("4242", "PENDING")]


def test_missing_sbatch_is_recorded_not_orphaned(hpctrain_home: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    proc = run_cli(
        "submit",
        "jobs/digits-ddp.yaml",
        "--site",
        "local",
        "--backend",
        "slurm",
        env={"PATH": str(empty)},
    )
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
    assert "sbatch not found" in proc.stderr and "kept in" in proc.stderr
    (run_dir,) = (hpctrain_home / "runs").iterdir()
    listing = json.loads(run_cli("list", "--json").stdout)
    assert [(r["run_dir"], r["state"]) for r in listing] == [(str(run_dir), "SUBMIT_FAILED")]
    assert "sbatch not found" in listing[0]["reason"]
    assert run_cli("index", "check").returncode == 0


def test_percent_in_the_run_directory_is_refused(tmp_path: Path) -> None:
    home = tmp_path / "100%j-home"
    proc = run_cli("submit", "jobs/digits-ddp.yaml", "--site", "local", env={"HPCTRAIN_HOME": str(home)})
    assert proc.returncode == 2 and "HPCTRAIN_HOME" in proc.stderr, proc.stderr
    assert not (home / "runs").exists() or not any((home / "runs").iterdir())


@pytest.mark.parametrize("runtime", ["pyxis", "apptainer"])
def test_a_colon_in_the_run_directory_is_refused_for_a_container_job(tmp_path: Path, runtime: str) -> None:
    home = tmp_path / "a:b-home"
    site = tmp_path / "containers.yaml"
    site.write_text(
        (REPO / "site-configs/local.yaml").read_text() + "\ncontainer_runtimes: [pyxis, apptainer]\n"
    )
    container = ["--set", f"container.runtime={runtime}", "--set", "container.image=/images/train.sqsh"]
    env = {"HPCTRAIN_HOME": str(home)}
    proc = run_cli("submit", "jobs/digits-ddp.yaml", "--site", str(site), *container, env=env)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "':' or ','" in proc.stderr and "HPCTRAIN_HOME" in proc.stderr, proc.stderr
    assert not (home / "runs").exists() or not any((home / "runs").iterdir())


def test_a_bad_slurm_timeout_is_one_line_exit_2(hpctrain_home: Path, tmp_path: Path) -> None:
    bindir = _fake_tool(tmp_path, "sbatch", "echo 4243\n")
    path = f"{bindir}:/usr/bin:/bin"
    submitted = run_cli(
        "submit", "jobs/digits-ddp.yaml", "--site", "local", "--backend", "slurm", env={"PATH": path}
    )
    assert submitted.returncode == 0, submitted.stderr
    proc = run_cli("status", env={"PATH": path, "HPCTRAIN_SLURM_TIMEOUT": "abc"})
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "HPCTRAIN_SLURM_TIMEOUT='abc'" in proc.stderr


@pytest.mark.parametrize(
    "bad",
    [b"[1]", b'{"op":"add","run_id":"x"}', b'{"op":"add","submitted_at":"now"}', b"\xff\xfe", b'{"op":"st'],
)
def test_verbs_survive_a_damaged_index(bad: bytes, hpctrain_home: Path, tmp_path: Path) -> None:
    bindir = _fake_tool(tmp_path, "sbatch", "echo 4244\n")
    _fake_tool(tmp_path, "squeue", "echo '4244|RUNNING|None|node1|0:05'\n")
    _fake_tool(tmp_path, "scancel", "exit 0\n")
    env = {"PATH": f"{bindir}:/usr/bin:/bin"}
    assert (
        run_cli("submit", "jobs/digits-ddp.yaml", "--site", "local", "--backend", "slurm", env=env).returncode
        == 0
    )
    with open(hpctrain_home / "index.jsonl", "ab") as handle:
        handle.write(bad + b"\n" + bad)  # the second copy is a torn last line
    for argv in (["list"], ["status"], ["status", "4244"], ["logs", "4244"], ["cancel", "4244"]):
        proc = run_cli(*argv, env=env)
        assert "Traceback" not in proc.stderr, (argv, proc.stderr)
        assert proc.stderr.count("warning") == 1, (argv, proc.stderr)
    listing = run_cli("list", "--json", env=env)
    assert [r["job_id"] for r in json.loads(listing.stdout)] == ["4244"]


@pytest.mark.parametrize("debug", ["", "1"])
def test_an_unexpected_error_is_one_line_unless_debugging(
    debug: str, hpctrain_home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from hpctrain.cli import list_cmd, main

    def broken(args: object) -> int:
        raise ZeroDivisionError("division by zero\nsecond line")

    monkeypatch.setattr(list_cmd, "run", broken)
    monkeypatch.setenv("HPCTRAIN_DEBUG", debug)
    assert main.main(["list"]) == 1
    err = capsys.readouterr().err
    last = err.splitlines()[-1]
    assert last.startswith("hpctrain: error: unexpected ZeroDivisionError: division by zero second line")
    if debug:
        assert "Traceback (most recent call last)" in err
    else:
        assert err.count("\n") == 1 and "set HPCTRAIN_DEBUG=1 for the traceback" in last


def test_unknown_ids_do_not_spare_the_known_ones(hpctrain_home: Path, tmp_path: Path) -> None:
    bindir = _fake_tool(tmp_path, "sbatch", "echo 4245\n")
    _fake_tool(tmp_path, "scancel", 'echo "$@" > "$(dirname "$0")/cancelled"\n')
    env = {"PATH": f"{bindir}:/usr/bin:/bin"}
    assert (
        run_cli("submit", "jobs/digits-ddp.yaml", "--site", "local", "--backend", "slurm", env=env).returncode
        == 0
    )
    proc = run_cli("cancel", "4245", "nope", env=env)
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1
    assert "not tracked by hpctrain: nope" in proc.stderr
    assert (bindir / "cancelled").read_text().split() == ["4245"]


def test_the_help_summary_names_every_sweep_action() -> None:
    from hpctrain.cli.sweep_cmd import ACTIONS

    proc = run_cli("--help")
    assert proc.returncode == 0, proc.stderr
    # argparse wraps the summary: the verb's entry runs to the next verb's line.
    entry = " ".join(proc.stdout.split("\n    sweep ", 1)[1].split("\n    list ", 1)[0].split())
    assert all(action in entry for action in ACTIONS), (entry, ACTIONS)
