"""The container lines of the batch script: pyxis, Slurm's OCI support and Apptainer, checked against
each runtime's documented options, shellcheck, and hostile image and mount strings (hypothesis)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpctrain import spec
from hpctrain.scheduler.render import render
from hpctrain.scheduler.slurm import steps
from tests.conftest import JOBS, SITES

DIGITS = JOBS / "digits-ddp.yaml"


def site_with_runtimes(tmp_path: Path, runtimes: str) -> Path:
    path = tmp_path / "site.yaml"
    path.write_text((SITES / "local.yaml").read_text() + f"container_runtimes: [{runtimes}]\n")
    return path


def rendered(tmp_path: Path, overrides: list[str], runtimes: str = "pyxis, oci, apptainer") -> str:
    site = site_with_runtimes(tmp_path, runtimes)
    resolved = spec.resolve(spec.load_job(DIGITS, overrides), spec.load_site(site), "job", "site")
    return render(resolved, tmp_path / "run")


def shell_words(text: str) -> list[str]:
    """The words bash makes of `text` (quoting undone, nothing expanded that is quoted)."""
    proc = subprocess.run(
        ["bash", "-c", f"printf '%s\\n' {text}"],
        capture_output=True,
        text=True,
        check=True,
        env={"HOME": "/home/someone", "PATH": "/usr/bin:/bin"},
    )
    return proc.stdout.splitlines()


def shellcheck(tmp_path: Path, script: str) -> None:
    found = shutil.which("shellcheck")
    if found is None:
        pytest.fail("shellcheck is not installed (scripts/test.sh installs it)")
    path = tmp_path / "job.sh"
    path.write_text(script)
    proc = subprocess.run(
        [found, "--shell=bash", "--severity=style", str(path)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout


def step_words(tmp_path: Path, overrides: list[str]) -> steps.ContainerWords:
    site = site_with_runtimes(tmp_path, "pyxis, oci, apptainer")
    resolved = spec.resolve(spec.load_job(DIGITS, overrides), spec.load_site(site), "job", "site")
    job = resolved.job
    return steps.container_words(job.container, str(tmp_path / "run"), True, "77", "/usr/bin/python3")


def test_pyxis_ranks_run_with_the_image_the_mounts_and_the_run_directory(tmp_path: Path) -> None:
    overrides = [
        "container.runtime=pyxis",
        "container.image=nvcr.io#nvidia/pytorch:24.05-py3",
        "container.mounts=[/data:/data:ro, /scratch]",
        "container.workdir=/workspace",
        "container.env=[WANDB_API_KEY]",
    ]
    script = rendered(tmp_path, overrides)
    run = str(tmp_path / "run")
    box = step_words(tmp_path, overrides)
    assert box.srun == (
        "--container-image=nvcr.io#nvidia/pytorch:24.05-py3",
        f"--container-mounts={run}:{run},/data:/data:ro,/scratch:/scratch",
        "--container-readonly",
        "--container-workdir=/workspace",
        "--container-env=WANDB_API_KEY",
        "--container-name=hpctrain-77",
    )
    assert box.prefix == () and box.python == "python3"
    # The container check and every rank step carry the options; the supervisor stays on the host.
    check = steps.container_check_step(2, box)
    assert check[:6] == [
        "srun",
        "--nodes=2",
        "--ntasks=2",
        "--ntasks-per-node=1",
        "--kill-on-bad-exit=1",
        box.srun[0],
    ]
    assert check[-4:] == ["python3", "-m", "hpctrain.runtime.preflight", "--container"]
    rank = steps.rank_step(["node1"], 2, "/r/rank-%t.log", box, ["hpctrain.runtime"])
    assert rank[-len(box.srun) - 3 :] == [*box.srun, "python3", "-m", "hpctrain.runtime"]
    assert '"$PYTHON" -m hpctrain.supervisor.attempt_loop' in script
    assert "export HPCTRAIN_CONTAINER='pyxis'" in script
    shellcheck(tmp_path, script)


def test_oci_ranks_run_in_the_bundle(tmp_path: Path) -> None:
    overrides = ["container.runtime=oci", "container.image=/shared/bundles/torch"]
    assert step_words(tmp_path, overrides).srun == ("--container=/shared/bundles/torch",)
    shellcheck(tmp_path, rendered(tmp_path, overrides))


def test_apptainer_exec_follows_its_documented_options(tmp_path: Path) -> None:
    # apptainer exec [exec options...] <container> <command>: --bind src[:dest[:opts]], --pwd,
    # --writable-tmpfs, --nv (NVIDIA GPUs); APPTAINERENV_NAME sets NAME inside the container.
    overrides = [
        "container.runtime=apptainer",
        "container.image=/images/torch.sif",
        "container.mounts=[/data:/d:ro]",
        "container.workdir=/work",
        "container.writable=true",
        "container.env=[HF_HOME]",
    ]
    script = rendered(tmp_path, overrides)
    run = str(tmp_path / "run")
    box = step_words(tmp_path, overrides)
    assert box.prefix == (
        "apptainer", "exec", "--bind", f"{run}:{run}", "--bind", "/data:/d:ro", "--pwd", "/work",
        "--writable-tmpfs", "--nv", "/images/torch.sif",
    )  # fmt: skip
    assert steps.het_step(box, ["hpctrain.runtime"])[-4:] == [
        "/images/torch.sif",
        "python3",
        "-m",
        "hpctrain.runtime",
    ]
    assert 'export APPTAINERENV_HF_HOME="${HF_HOME-}"' in script
    shellcheck(tmp_path, script)


def test_no_container_renders_no_container_line(tmp_path: Path) -> None:
    script = rendered(tmp_path, [])
    assert "HPCTRAIN_CONTAINER" not in script and "--container" not in script and "apptainer" not in script
    box = step_words(tmp_path, [])
    assert box == steps.ContainerWords(python="/usr/bin/python3")


@pytest.mark.parametrize(
    ("overrides", "runtimes", "match"),
    [
        (
            ["container.runtime=pyxis", "container.image=/i.sqsh"],
            "oci",
            "container.runtime: site .* has no pyxis",
        ),
        (["container.runtime=pyxis", "container.image=images/x.sqsh"], "pyxis", "must be an absolute path"),
        (["container.runtime=oci", "container.image=bundle"], "oci", "must be an absolute path"),
        (["container.runtime=oci", "container.image=/b", "container.mounts=[/d]"], "oci", "config.json"),
        (["container.runtime=pyxis"], "pyxis", "needs an image"),
        (["container.image=/x.sqsh"], "pyxis", "runtime is none"),
        (["container.runtime=pyxis", "container.image=/i", "container.mounts=[/a,b]"], "pyxis", "mounts"),
        (["container.runtime=pyxis", "container.image=--help"], "pyxis", "container.image"),
        (["container.runtime=docker", "container.image=/i"], "pyxis", "container.runtime"),
    ],
)
def test_refusals_name_the_field(tmp_path: Path, overrides: list[str], runtimes: str, match: str) -> None:
    with pytest.raises(spec.SpecError, match=match):
        rendered(tmp_path, overrides, runtimes)


# Mostly what validation lets through (where `#`, `~` and `=` still mean something to bash), and the
# rest of the shell's specials, which validation must refuse.
PASSABLE = st.text(alphabet=st.sampled_from(list("/a-_.:#@=+~")), min_size=1, max_size=20)
SPECIALS = st.text(alphabet=st.sampled_from(list("/a-_.:,#@=+~ '\"$`\\;&|*?!(){}[]<>\n\t%")), max_size=20)
HOSTILE = st.one_of(PASSABLE, SPECIALS)


def launch_words(runtime: str, image: str, mounts: list[str]) -> tuple[spec.Container, list[str]] | None:
    """The words bash makes of the rendered container options, or None when validation refuses."""
    try:
        container = msgspec.convert({"runtime": runtime, "image": image, "mounts": mounts}, spec.Container)
    except msgspec.ValidationError:
        return None
    box = steps.container_words(container, "/runs/r1", False, "1", "python3")
    return container, [*box.srun, *box.prefix]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(image=HOSTILE, runtime=st.sampled_from(["pyxis", "apptainer"]))
def test_hostile_images_are_refused_or_reach_srun_as_written(image: str, runtime: str) -> None:
    found = launch_words(runtime, image, [])
    if found is None:
        return
    _, words = found
    if runtime == "pyxis":
        assert words[0] == f"--container-image={image}"
    else:
        assert words[-1] == image


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    mount=st.one_of(PASSABLE.map(lambda text: "/" + text), SPECIALS),
    runtime=st.sampled_from(["pyxis", "apptainer"]),
)
def test_hostile_mounts_are_refused_or_reach_srun_as_written(mount: str, runtime: str) -> None:
    found = launch_words(runtime, "/images/x.sif" if runtime == "apptainer" else "/images/x.sqsh", [mount])
    if found is None:
        return
    container, words = found
    mounted = container.bind_mounts[0]
    bind = f"{mounted.source}:{mounted.target}{':ro' if mounted.readonly else ''}"
    if runtime == "pyxis":
        assert words[1] == f"--container-mounts=/runs/r1:/runs/r1,{bind}"
    else:
        assert words[2:6] == ["--bind", "/runs/r1:/runs/r1", "--bind", bind]
