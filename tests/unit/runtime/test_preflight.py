"""Preflight's verdicts (slow node, missing GPUs, ECC) and when the batch script runs it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hpctrain import spec
from hpctrain.runtime.preflight import (
    NodeFacts,
    busbw_gbps,
    gpu_health,
    injected_delay,
    judge,
    parse_gpu_health,
)
from hpctrain.scheduler.render import context
from tests.conftest import JOBS, SITES


def facts(node: str, rank: int, bw: float, seconds: float, problems: list[str] | None = None) -> NodeFacts:
    return NodeFacts(
        node=node,
        rank=rank,
        local_rank=0,
        python="3.11.7",
        hpctrain="0.1.0",
        gpus_asked=0,
        gpus_seen=0,
        gpu_source="",
        problems=problems or [],
        node_busbw_gbps=bw,
        node_seconds=seconds,
    )


def test_a_slow_node_is_named_and_jitter_is_not() -> None:
    slow = [facts("a", 0, 10.0, 0.001), facts("b", 1, 9.0, 0.0011), facts("c", 2, 0.1, 0.05)]
    assert {n: bool(p) for n, p in judge(slow, 0.5).items()} == {"a": False, "b": False, "c": True}
    # 100x slower in bandwidth but only microseconds lost: noise of a tiny in-node all-reduce.
    jitter = [facts("a", 0, 100.0, 0.00001), facts("b", 1, 1.0, 0.001)]
    assert not any(judge(jitter, 0.5).values())


def test_a_rank_problem_fails_its_node_once() -> None:
    found = judge(
        [
            facts("a", 0, 1, 0, ["2 GPUs allocated, 0 visible"]),
            facts("a", 1, 1, 0, ["2 GPUs allocated, 0 visible"]),
        ],
        0.5,
    )
    assert found == {"a": ["2 GPUs allocated, 0 visible"]}


def test_bus_bandwidth_formula() -> None:
    assert busbw_gbps(10**9, 4, 1.0) == pytest.approx(1.5)
    assert busbw_gbps(10**9, 1, 2.0) == pytest.approx(0.5)


def test_gpu_health_and_delay_hook() -> None:
    text = "0, 0, 1980, 1980\n1, 3, 1980, 1980\n2, [N/A], 1500, 0\n"
    assert parse_gpu_health(text) == [
        "GPU 1: 3 uncorrected ECC errors",
        "GPU 2: reports a maximum SM clock of 0",
    ]
    assert injected_delay("node2", {"HPCTRAIN_PREFLIGHT_DELAY": "node2:0.25"}) == 0.25
    assert injected_delay("node1", {"HPCTRAIN_PREFLIGHT_DELAY": "node2:0.25"}) == 0.0


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ([], True),  # 2 nodes x 2 GPUs: on by default
        (["resources.nodes=1"], False),
        (["resources.gpus_per_node=0"], False),
        (["preflight=false"], False),
        (["resources.nodes=1", "preflight=true"], True),
    ],
)
def test_preflight_step_default(overrides: list[str], expected: bool, tmp_path: Path) -> None:
    job = spec.load_job(JOBS / "digits-ddp.yaml", overrides)
    resolved = spec.resolve(job, spec.load_site(SITES / "local.yaml"))
    # The attempt loop runs the ranks' preflight when the render context says so (rank_program).
    assert context(resolved, tmp_path)["preflight"] is expected


DCGM_DIAG = """\
+---------------------------+------------------------------------------------+
| Diagnostic                | Result                                         |
+===========================+================================================+
|-----  Deployment  --------+------------------------------------------------|
| Denylist                  | Pass                                           |
| NVML Library              | Pass                                           |
| Persistence Mode          | Fail                                           |
|                           | GPU0: Persistence mode for GPU 0 is disabled.  |
| Environment Variables     | Pass                                           |
+---------------------------+------------------------------------------------+
"""


def test_dcgm_quick_diagnostic_failures_are_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where DCGM is installed, `dcgmi diag -r 1` runs and each failed check is one problem."""
    tool = tmp_path / "dcgmi"
    (tmp_path / "diag.txt").write_text(DCGM_DIAG)
    diag = tmp_path / "diag.txt"
    # Like dcgmi: the table on stdout, a non-zero exit when a check failed.
    cat, grep = shutil.which("cat"), shutil.which("grep")  # PATH will hold only the fake tool
    tool.write_text(f'#!/bin/sh\n[ "$*" = "diag -r 1" ] || exit 9\n{cat} {diag}\n! {grep} -q Fail {diag}\n')
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi here: only the DCGM check runs
    assert gpu_health() == ["dcgmi diag: Persistence Mode failed"]
    (tmp_path / "diag.txt").write_text(DCGM_DIAG.replace("| Fail ", "| Pass "))
    assert gpu_health() == []
    tool.write_text("#!/bin/sh\necho 'Error: unable to connect to host engine' >&2\nexit 1\n")
    assert gpu_health() == ["dcgmi failed: Error: unable to connect to host engine"]


def fake_slurmd(folder: Path, node_file: Path) -> None:
    """A slurmd whose `-G` prints one gres line with `node_file` as its device file."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "slurmd"
    script.write_text(f"#!/bin/sh\necho 'slurmd: Gres Name=gpu Type=(null) Count=1 File={node_file}'\n")
    script.chmod(0o755)


@pytest.mark.parametrize("where", ["sbin beside srun", "/usr/sbin"])
def test_fake_gpus_are_found_with_sbin_off_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """A normal user's PATH has no sbin folder: slurmd -G must still be found, or a demo job on
    fake GPUs fails preflight with `2 GPUs allocated, 0 visible`."""
    from hpctrain.runtime import preflight

    device = tmp_path / "gpu0"
    device.write_text("")
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "srun").write_text("#!/bin/sh\n")
    (tmp_path / "bin" / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    if where == "/usr/sbin":
        fake_slurmd(tmp_path / "usr-sbin", device)
        monkeypatch.setattr(
            preflight, "SBIN_FOLDERS", (str(tmp_path / "nowhere"), str(tmp_path / "usr-sbin"))
        )
    else:
        fake_slurmd(tmp_path / "sbin", device)  # an /opt/slurm-style prefix: bin/srun, sbin/slurmd
        monkeypatch.setattr(preflight, "SBIN_FOLDERS", ())
    assert preflight.gres_files("node1") == [str(device)]
    monkeypatch.setattr(preflight, "SBIN_FOLDERS", ())
    (tmp_path / "bin" / "srun").unlink()
    assert preflight.gres_files("node1") == []  # no slurmd anywhere: no files, no error


def test_the_container_check_names_a_version_mismatch_and_an_unmounted_run_dir(tmp_path: Path) -> None:
    from hpctrain.runtime.preflight import container_problems
    from hpctrain.version import __version__

    assert container_problems({"HPCTRAIN_VERSION": __version__, "HPCTRAIN_RUN_DIR": str(tmp_path)}) == []
    (problem,) = container_problems({"HPCTRAIN_VERSION": "0.0.1", "HPCTRAIN_RUN_DIR": str(tmp_path)})
    assert f"the image has hpctrain {__version__}, the host 0.0.1" in problem
    (problem,) = container_problems({"HPCTRAIN_RUN_DIR": str(tmp_path / "not-mounted")})
    assert "not-mounted is not writable in the container" in problem and "mount it" in problem


def test_the_container_check_prints_one_line_per_node(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from hpctrain.runtime.preflight import main

    env = {
        "HPCTRAIN_RUN_DIR": str(tmp_path / "gone"),
        "SLURMD_NODENAME": "node7",
        "HPCTRAIN_CONTAINER": "pyxis",
    }
    with pytest.MonkeyPatch.context() as patch:
        for key, value in env.items():
            patch.setenv(key, value)
        assert main(["--container"]) == 1
    line = capsys.readouterr().out.strip()
    assert line.startswith("hpctrain container check: node7 (pyxis): FAIL the run directory"), line


def test_the_preflight_module_imports_no_torch() -> None:
    """`python -m hpctrain.runtime.preflight --container` runs on every node before any step: torch
    (seconds to import) is loaded only by the checks that use it."""
    code = "import sys, hpctrain.runtime.preflight; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_fake_gpus_unseen_inside_a_container_are_not_a_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 36: inside a pyxis container on fake gres neither CUDA, /dev/nvidia* nor slurmd (for
    gres.conf) is there; the host sees the GPUs. No evidence of a missing GPU: a warning, no failure."""
    import torch

    from hpctrain.runtime import preflight
    from hpctrain.runtime.bootstrap import DistInfo

    if torch.cuda.is_available() or preflight.glob.glob("/dev/nvidia[0-9]*"):
        pytest.skip("this machine has GPUs")
    monkeypatch.setenv("PATH", str(tmp_path))  # no slurmd, no srun
    monkeypatch.setattr(preflight, "SBIN_FOLDERS", ())
    info = DistInfo(0, 2, 0, 0, "node1", 1, "srun", hostname="node1")
    env = {"SLURM_GPUS_ON_NODE": "2"}
    monkeypatch.setenv("HPCTRAIN_CONTAINER", "pyxis")
    assert preflight.count_gpus("node1") == (None, preflight.UNCHECKED_IN_CONTAINER)
    facts = preflight.check_node(info, env)
    assert facts.problems == [] and facts.gpus_seen == 2 and "not checked" in facts.warnings[0]
    monkeypatch.delenv("HPCTRAIN_CONTAINER")  # on the host the same emptiness is a missing GPU
    facts = preflight.check_node(info, env)
    assert facts.problems == [
        "2 GPUs allocated, 0 visible (gres.conf device files (no CUDA: fake or CPU-only))"
    ]
