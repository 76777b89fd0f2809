"""Rendered scripts: complete, quoted, and clean under shellcheck for every shipped job and site."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import msgspec
import pytest

from hpctrain import spec
from hpctrain.scheduler.render import TEMPLATES, RenderError, render
from tests.conftest import JOBS, SITES

SHELLCHECK = shutil.which("shellcheck")


def resolved_pairs() -> list[tuple[Path, Path]]:
    """Every (job, site) pair where the site can run the job."""
    pairs = []
    for job in sorted(JOBS.glob("*.yaml")):
        for site in sorted(SITES.glob("*.yaml")):
            try:
                spec.resolve(spec.load_job(job), spec.load_site(site))
            except spec.SpecError:
                continue
            pairs.append((job, site))
    return pairs


def shellcheck(script: str, tmp_path: Path) -> None:
    if SHELLCHECK is None:
        pytest.fail("shellcheck is not installed (apt-get install shellcheck; scripts/test.sh does it)")
    path = tmp_path / "job.sbatch"
    path.write_text(script)
    proc = subprocess.run(
        [SHELLCHECK, "--shell=bash", "--severity=style", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout


@pytest.mark.parametrize(("job", "site"), resolved_pairs(), ids=lambda p: p.stem)
@pytest.mark.parametrize("template", ["sbatch.sh.j2", "local.sh.j2"])
def test_every_shipped_job_renders_shellcheck_clean(
    job: Path, site: Path, template: str, tmp_path: Path
) -> None:
    resolved = spec.resolve(spec.load_job(job), spec.load_site(site))
    script = render(resolved, tmp_path / "run", template=template)
    assert script.startswith("#!/bin/bash\n")
    # The batch script hands over to the attempt loop; the local one runs the rank program itself.
    ranks = "hpctrain.command" if resolved.job.command else "hpctrain.runtime"
    assert ("hpctrain.supervisor.attempt_loop" if template == "sbatch.sh.j2" else ranks) in script
    shellcheck(script, tmp_path)


def test_every_site_has_a_job_that_renders() -> None:
    sites = {site for _, site in resolved_pairs()}
    assert sites == set(SITES.glob("*.yaml"))


def test_hostile_values_are_quoted(tmp_path: Path) -> None:
    hostile = "$(touch /tmp/pwned); `id` 'quote' \"dq\" \\ ;rm -rf /"
    job = spec.load_job(JOBS / "digits-ddp.yaml", [f"env.EVIL={hostile}"])
    script = render(spec.resolve(job, spec.load_site(SITES / "local.yaml")), tmp_path / "run")
    shellcheck(script, tmp_path)
    # Run just the export line in bash: the value must arrive byte for byte, nothing executed.
    line = next(x for x in script.splitlines() if x.startswith("export EVIL="))
    out = subprocess.run(
        ["bash", "-c", f'{line}; printf %s "$EVIL"'], capture_output=True, text=True, check=True, cwd=tmp_path
    )
    assert out.stdout == hostile
    assert not Path("/tmp/pwned").exists()


def test_directives_follow_the_spec(tmp_path: Path) -> None:
    job = spec.load_job(
        JOBS / "digits-ddp.yaml",
        [
            "resources.account=proj1",
            "resources.qos=high",
            "resources.exclusive=true",
            "array=0-3%2",
            "dependency=afterok:12",
        ],
    )
    script = render(spec.resolve(job, spec.load_site(SITES / "local.yaml")), tmp_path / "run")
    for line in [
        "#SBATCH --nodes=2",
        "#SBATCH --ntasks-per-node=2",
        "#SBATCH --gres=gpu:2",
        "#SBATCH --account=proj1",
        "#SBATCH --qos=high",
        "#SBATCH --exclusive",
        "#SBATCH --array=0-3%2",
        "#SBATCH --dependency=afterok:12",
        "#SBATCH --requeue",
        "#SBATCH --signal=B:USR1@60",
        "#SBATCH --time=00:15:00",
        "#SBATCH --mem=2048M",
    ]:
        assert line in script, line
    assert f"#SBATCH --output={tmp_path}/run/logs/batch-%a.log" in script


def test_torchrun_launcher_starts_one_agent_per_node(tmp_path: Path) -> None:
    job = spec.load_job(JOBS / "digits-ddp.yaml", ["launcher=torchrun"])
    script = render(spec.resolve(job, spec.load_site(SITES / "local.yaml")), tmp_path / "run")
    assert "#SBATCH --ntasks-per-node=1" in script
    shellcheck(script, tmp_path)


def test_parameter_server_job_is_heterogeneous(tmp_path: Path) -> None:
    job = spec.load_job(JOBS / "digits-ps-async.yaml")
    script = render(spec.resolve(job, spec.load_site(SITES / "local.yaml")), tmp_path / "run")
    head, _, tail = script.partition("#SBATCH hetjob")
    assert "#SBATCH --partition=cpu" in head and "#SBATCH --ntasks=1" in head
    assert "#SBATCH --partition=debug" in tail and "#SBATCH --ntasks-per-node=4" in tail
    # Slurm 24.11+ starts one task per node of a component without --ntasks in srun --het-group.
    assert f"#SBATCH --ntasks={job.resources.nodes * 4}" in tail


def test_unsafe_run_dir_is_refused(tmp_path: Path) -> None:
    resolved = spec.resolve(spec.load_job(JOBS / "digits-ddp.yaml"), spec.load_site(SITES / "local.yaml"))
    with pytest.raises(RenderError, match="HPCTRAIN_HOME"):
        render(resolved, tmp_path / "has space")


@pytest.mark.parametrize("preemption", ["USR1", "USR2"])
def test_the_batch_script_forwards_the_preemption_signal_and_guards_the_supervisor(
    preemption: str, tmp_path: Path
) -> None:
    overrides = ["restart.warm_standby=true", f"preemption.signal={preemption}"]
    job = spec.load_job(JOBS / "digits-ddp.yaml", overrides)
    script = render(spec.resolve(job, spec.load_site(SITES / "local.yaml")), tmp_path / "run")
    assert f'"$PYTHON" -m hpctrain.supervisor.attempt_loop "$RUN_DIR" {preemption} &' in script
    assert (
        f'kill -{preemption} "$HPCTRAIN_SUPERVISOR"' in script
        and f"trap forward_preemption {preemption}" in script
    )
    assert 'scontrol requeue "$HPCTRAIN_JOB_REF"' in script  # the guard, for a supervisor that died
    shellcheck(script, tmp_path)


def test_the_launch_part_of_the_batch_script_stays_small() -> None:
    launch = (TEMPLATES / "partials" / "launch.j2").read_text().splitlines()
    assert len(launch) <= 60 and not (TEMPLATES / "partials" / "standby.j2").exists()


def test_the_jobs_python_wins_over_the_sites_and_the_submitting_one(tmp_path: Path) -> None:
    job = spec.load_job(JOBS / "digits-ddp.yaml", ["python=/opt/venvs/train/bin/python"])
    script = render(spec.resolve(job, spec.load_site(SITES / "local.yaml")), tmp_path / "run")
    assert (
        "PYTHON=/opt/venvs/train/bin/python\n" in script or "PYTHON='/opt/venvs/train/bin/python'\n" in script
    )
    assert "cannot import hpctrain" in script


@pytest.mark.parametrize(
    ("overrides", "expedite"),
    [([], True), (["resources.nodelist=[node1]"], False), (["preemption.requeue=false"], False)],
)
def test_a_site_with_expedited_requeue_asks_for_it_and_a_failed_script_ends_unrequeued(
    overrides: list[str], expedite: bool, tmp_path: Path
) -> None:
    site = msgspec.structs.replace(spec.load_site(SITES / "local.yaml"), expedited_requeue=True)
    job = spec.load_job(JOBS / "digits-ddp.yaml", overrides)
    script = render(spec.resolve(job, site), tmp_path / "run")
    assert ("#SBATCH --requeue=expedite" in script) is expedite
    # Without the guard an expedited job whose script fails would be requeued and held for good.
    assert ("trap end_without_requeue EXIT" in script) is expedite
    if expedite:
        assert 'scontrol update jobid="$HPCTRAIN_JOB_REF" Requeue=0' in script
    shellcheck(script, tmp_path)
    plain = render(spec.resolve(job, spec.load_site(SITES / "local.yaml")), tmp_path / "run")
    assert "--requeue=expedite" not in plain and "end_without_requeue" not in plain


@pytest.mark.parametrize("template", ["sbatch.sh.j2", "local.sh.j2"])
@pytest.mark.parametrize(
    ("python", "expanded"),
    [("~/venv/bin/python", "/home/u/venv/bin/python"), ("/opt/~x/python", "/opt/~x/python")],
)
def test_a_python_under_the_home_folder_expands_in_the_job(
    python: str, expanded: str, template: str, tmp_path: Path
) -> None:
    job = spec.load_job(JOBS / "digits-ddp.yaml", [f"python={python}"])
    resolved = spec.resolve(job, spec.load_site(SITES / "local.yaml"))
    script = render(resolved, tmp_path / "run", template=template)
    (line,) = [row for row in script.splitlines() if row.startswith("PYTHON=")]
    shown = subprocess.run(
        ["bash", "-c", f'{line}; printf %s "$PYTHON"'],
        capture_output=True,
        text=True,
        check=True,
        env={"HOME": "/home/u"},
    )
    assert shown.stdout == expanded
    shellcheck(script, tmp_path)
