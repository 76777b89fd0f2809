"""`hpctrain report` on real jobs of the local Slurm cluster, each submitted through `hpctrain submit`
(or `hpctrain sweep`): a 2 x 2 digits job with one slowed rank (reported while it runs and after),
a parameter-server job and a small sweep. Every figure each should have is checked to be a PNG."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hpctrain.report.ranks import rank_matrices
from hpctrain.report.series import read_run
from hpctrain.rundir import RankTimesLine, RunDir
from tests.conftest import JOBS, REPO, run_cli
from tests.integration.cluster import require_cluster, submit, wait_state
from tests.unit.report_runs import add_rank_times

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(900)]
pytest.importorskip("matplotlib", reason="hpctrain report draws with matplotlib (the test extra has it)")

SLOW_RANK = 3
QUEUE_TIMEOUT = 600  # the cluster is shared: jobs may wait behind other tests' jobs


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """One HPCTRAIN_HOME for the module: the slowed-rank job is shared by two tests."""
    require_cluster()
    yield {"HPCTRAIN_HOME": str(tmp_path_factory.mktemp("report-home"))}


def report(target: str, out: Path, env: dict[str, str]) -> str:
    proc = run_cli("report", target, "-o", str(out), env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    return (out / "report.md").read_text()


def is_png(path: Path) -> bool:
    return path.is_file() and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def figures(out: Path) -> set[str]:
    return {p.name for p in out.glob("*.png") if is_png(p)}


@pytest.fixture(scope="module")
def slowed_job(home: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A 2 x 2 digits job whose rank 3 sleeps 30 ms per forward (the others 5 ms), reported once
    while it runs (the fault injection of tests/launcher.py)."""
    submitted = submit(
        JOBS / "digits-ddp.yaml",
        "train.entrypoint=tests.launcher:faulty",
        "train.options.delay_s=0.005",
        f"train.options.slow_worker={SLOW_RANK}",
        "train.options.slow_factor=6",
        "train.steps=200",
        "train.log_every=5",
        "train.eval_every=50",
        "train.checkpoint_every=50",
        f"env.PYTHONPATH={REPO}",
        env=home,
    )
    job_id = submitted["job_id"]
    root = Path(submitted["run_dir"])
    wait_state(job_id, {"RUNNING"}, timeout=QUEUE_TIMEOUT, env=home)
    deadline = time.monotonic() + 180
    while len(read_run(RunDir(root)).train) < 3 and time.monotonic() < deadline:
        time.sleep(0.5)
    snapshot_out = tmp_path_factory.mktemp("snapshot")
    snapshot = report(job_id, snapshot_out, home)
    entry = wait_state(job_id, {"COMPLETED"}, timeout=300, env=home)
    assert entry["state"] == "COMPLETED", entry
    return {"job_id": job_id, "root": root, "snapshot": snapshot, "snapshot_out": snapshot_out}


def test_report_of_a_2x2_digits_job_while_it_runs_and_after(
    slowed_job: dict[str, Any], home: dict[str, str], tmp_path: Path
) -> None:
    if "snapshot" in slowed_job["snapshot"]:  # it was still running when reported
        assert "report-loss.png" in figures(slowed_job["snapshot_out"])
    else:
        print("the job ended before the snapshot report: only the finished report is checked")
    page = report(slowed_job["job_id"], tmp_path, home)
    assert {"report-loss.png", "report-throughput.png", "report-memory.png"} <= figures(tmp_path)
    assert "completed at step 200 of 200" in page and "ddp, 4 ranks, srun" in page
    assert "| checkpoints | 4 (last at step 200) |" in page
    assert "report-ps.png" not in figures(tmp_path)


def test_heat_map_of_the_real_run_with_rank_times_added_shows_the_slowed_rank(
    slowed_job: dict[str, Any], home: dict[str, str], tmp_path: Path
) -> None:
    """The real run's metrics plus `ranks` lines made here (rank 3 slow from step 50): what the
    report draws whatever the runtime records."""
    copy = RunDir(tmp_path / "run")
    shutil.copytree(slowed_job["root"], copy.root)
    lines = copy.metrics.read_bytes().splitlines()
    copy.metrics.write_bytes(b"\n".join(x for x in lines if b'"kind":"ranks"' not in x) + b"\n")
    assert add_rank_times(copy, slow_rank=SLOW_RANK, from_step=50) >= 40
    page = report(str(copy.root), tmp_path / "out", home)
    assert "report-ranks.png" in figures(tmp_path / "out")
    assert f"rank {SLOW_RANK} on node2" in page
    relative, _, steps = rank_matrices(read_run(copy))
    late = [i for i, step in enumerate(steps) if step >= 50]
    assert relative[:, late].mean(axis=1).argmax() == SLOW_RANK


def test_heat_map_from_the_runtimes_own_rank_times_shows_the_slowed_rank(
    slowed_job: dict[str, Any], home: dict[str, str], tmp_path: Path
) -> None:
    series = read_run(RunDir(slowed_job["root"]))
    if not series.ranks:
        pytest.skip(
            f"the runtime wrote no `{RankTimesLine.__struct_config__.tag}` lines (RankTimesLine): "
            "per-rank times are recorded once the straggler detection of issue 14 is merged"
        )
    page = report(slowed_job["job_id"], tmp_path, home)
    assert "report-ranks.png" in figures(tmp_path)
    relative, _, _ = rank_matrices(series)
    half = relative.shape[1] // 2
    assert relative[:, half:].mean(axis=1).argmax() == SLOW_RANK, relative[:, half:].mean(axis=1)
    assert f"rank {SLOW_RANK}" in page


def test_report_of_a_parameter_server_job(home: dict[str, str], tmp_path: Path) -> None:
    submitted = submit(
        JOBS / "digits-ps-async.yaml", "train.steps=200", "resources.tasks_per_node=2", env=home
    )
    entry = wait_state(submitted["job_id"], {"COMPLETED"}, timeout=QUEUE_TIMEOUT, env=home)
    assert entry["state"] == "COMPLETED", entry
    page = report(submitted["job_id"], tmp_path, home)
    assert {"report-loss.png", "report-throughput.png", "report-ps.png"} <= figures(tmp_path)
    assert "| parameter server | async, 1 servers, 2 workers |" in page
    assert sorted(read_run(RunDir(Path(submitted["run_dir"]))).workers) == [0, 1]


def test_report_of_a_sweep(home: dict[str, str], tmp_path: Path) -> None:
    proc = run_cli(
        "sweep",
        str(JOBS / "digits-sweep.yaml"),
        "--site",
        "local",
        "--grid",
        "train.lr=0.0003,0.003",
        "--grid",
        "train.batch_size=32",
        "--set",
        "train.steps=40",
        "--set",
        "train.eval_every=20",
        "--json",
        env=home,
    )
    assert proc.returncode == 0, proc.stderr
    sweep_id = json.loads(proc.stdout)["sweep_id"]
    deadline = time.monotonic() + QUEUE_TIMEOUT
    while True:
        proc = run_cli("sweep", "status", sweep_id, "--json", env=home)
        (summary,) = json.loads(proc.stdout)
        if all(t["state"] in {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"} for t in summary["trials"]):
            break
        assert time.monotonic() < deadline, summary
        time.sleep(2)
    assert summary["counts"] == {"COMPLETED": 2}, summary
    page = report(sweep_id, tmp_path, home)
    assert figures(tmp_path) == {"report-trials.png", "report-sweep.png"}
    assert "| trial 1 | COMPLETED |" in page and "train.lr=0.003, train.batch_size=32" in page
