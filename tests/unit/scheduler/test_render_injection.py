"""Slurm options the spec models (exclude, nodelist, mail, sbatch passthrough...) and the names the
templates reserve: validated against the site, rendered as data, accepted by shellcheck and sbatch."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from hpctrain import spec
from hpctrain.errors import BackendError
from hpctrain.scheduler.render import TEMPLATES, batch_options, render
from hpctrain.scheduler.slurm.cli import SlurmCliBackend
from hpctrain.spec.slurm_values import env_name_problem
from tests.conftest import JOBS, SITES

LOCAL = SITES / "local.yaml"
DIGITS = JOBS / "digits-ddp.yaml"
EXTRAS = [
    "resources.nodes=1",
    "resources.exclude=[node2]",
    "resources.nodelist=[node1]",
    "begin=now",
    "comment=hostile test run",
    "mail_type=[END, FAIL]",
    "mail_user=nobody@example.org",
    "sbatch.hint=nomultithread",
    "sbatch.nice=10",
]


def resolved(overrides: list[str], job: Path = DIGITS) -> spec.Resolved:
    return spec.resolve(spec.load_job(job, overrides), spec.load_site(LOCAL), str(job), "local")


def test_every_name_a_template_assigns_is_reserved() -> None:
    assigned = set()
    for template in TEMPLATES.rglob("*.j2"):
        assigned |= set(
            re.findall(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=", template.read_text(), re.M)
        )
    assert assigned, "no assignment found: the pattern no longer matches the templates"
    free = sorted(name for name in assigned if env_name_problem(name) is None)
    assert not free, f"templates assign {free}, which a spec's env may still set"


def test_new_options_render_as_directives(tmp_path: Path) -> None:
    script = render(resolved(EXTRAS), tmp_path / "run")
    for line in [
        "#SBATCH --exclude=node2",
        "#SBATCH --nodelist=node1",
        "#SBATCH --begin=now",
        '#SBATCH --comment="hpctrain-run=run hostile test run"',  # the run id, then the user's comment
        "#SBATCH --mail-type=END,FAIL",
        "#SBATCH --mail-user=nobody@example.org",
        "#SBATCH --hint=nomultithread",
        "#SBATCH --nice=10",
    ]:
        assert line in script, line


def test_gpu_type_is_checked_against_the_site(tmp_path: Path) -> None:
    with pytest.raises(spec.SpecError, match=r"resources\.gpu_type: 'h100' asked, partition debug"):
        resolved(["resources.gpu_type=h100"])
    site = tmp_path / "site.yaml"
    site.write_text(
        LOCAL.read_text().replace("    gpus_per_node: 4\n", "    gpus_per_node: 4\n    gpu_type: a100\n")
    )
    job = spec.load_job(DIGITS, ["resources.gpu_type=a100"])
    batch = batch_options(spec.resolve(job, spec.load_site(site)), tmp_path)
    assert ("gres", "gpu:a100:2") in [(d.option, d.value) for d in batch[-1]]


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        (["resources.exclude=[node9]"], "resources.exclude: node9 not in partition debug"),
        (["resources.nodelist=[node3]"], "resources.nodelist: node3 not in partition debug"),
        (["resources.exclude=[node1]"], "2 nodes asked, 1 left"),
        (["resources.nodelist=[node1, node2, node1]"], "3 nodes named"),
        (["resources.nodelist=[node1]", "resources.exclude=[node1]"], "node1 also in exclude"),
        (["resources.exclude=['node1,node2']"], "resources.exclude"),
        (["mail_type=[SOMETIMES]"], "mail_type"),
        (["comment='say \"hi\"'"], "comment"),
        (["begin=now + 1"], "begin"),
        (["sbatch.output=/tmp/x"], "--output is set by hpctrain itself"),
        (["sbatch.out=/tmp/x"], "--out is set by hpctrain itself (--output)"),
        (["sbatch.nodes=9"], "--nodes is set by hpctrain"),
        (["sbatch.signal=B:KILL@1"], "--signal is set by hpctrain"),
        (["sbatch.job-name=x"], "--job-name is set by hpctrain"),
        (["sbatch.array=1-9"], "--array is set by hpctrain"),
        (["sbatch.partition=cpu"], "--partition is set by hpctrain"),
        (["sbatch.export=ALL"], "--export is set by hpctrain"),
        (["sbatch.--hint=x"], "without the leading --"),
        (["sbatch.hint=a b"], "hint: 'a b' may hold only"),
        (['sbatch.hint="x\\ny"'], "sbatch.hint"),
        (["sbatch.hint=false"], "false is ambiguous"),
    ],
)
def test_slurm_options_are_validated(overrides: list[str], match: str) -> None:
    with pytest.raises(spec.SpecError) as err:
        resolved(overrides)
    assert match in str(err.value)
    assert "\n" not in str(err.value)


def test_new_options_pass_shellcheck(tmp_path: Path) -> None:
    shellcheck = shutil.which("shellcheck")
    if shellcheck is None:
        pytest.fail("shellcheck is not installed (scripts/test.sh installs it)")
    path = tmp_path / "job.sbatch"
    path.write_text(render(resolved(EXTRAS), tmp_path / "run"))
    proc = subprocess.run(
        [shellcheck, "--shell=bash", "--severity=style", str(path)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout


@pytest.mark.skipif(shutil.which("sbatch") is None, reason="no sbatch: the local cluster is not installed")
def test_sbatch_test_only_accepts_the_new_options(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    (run_dir / "logs").mkdir(parents=True)
    path = run_dir / "job.sbatch"
    path.write_text(render(resolved(EXTRAS), run_dir))
    try:
        answer = SlurmCliBackend().test_only(path)
    except BackendError as err:
        pytest.fail(f"sbatch --test-only refused the script: {err}")
    assert "node1" in answer, answer
