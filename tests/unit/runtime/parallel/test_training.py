"""Every parallel layout trains the tiny GPT to the same loss curve as one process, through the real runtime.

Each case starts ``python -m hpctrain.runtime`` in 4 local processes (torchrun-style env, gloo on
loopback, one thread each) against a run directory holding ``spec.json``, then reads rank 0's
``metrics.jsonl``. The single-process reference runs the same model and global batch. The helpers
here are also what ``benchmarks/bench_layouts_cpu.py`` drives.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hpctrain import spec
from tests import launcher

ROOT = Path(__file__).resolve().parents[4]
WORLD = 4
STEPS = 6
TOLERANCE = 2e-3
"""Absolute loss difference allowed: fp32 reductions in a different order, nothing more."""

LAYOUTS: dict[str, dict[str, Any]] = {
    "ddp": {"dp": 4},
    "fsdp": {"dp": 1, "fsdp": 4},
    "zero2": {"dp": 1, "fsdp": 4, "reshard_after_forward": False},
    "hsdp": {"dp": 2, "fsdp": 2},
    "tp": {"dp": 1, "tp": 4},
    "fsdp_tp": {"dp": 1, "fsdp": 2, "tp": 2},
    "pp_gpipe": {"dp": 1, "pp": 4, "pp_schedule": "gpipe"},
    "pp_1f1b": {"dp": 1, "pp": 4, "pp_schedule": "1f1b"},
    "pp_interleaved": {"dp": 2, "pp": 2, "pp_schedule": "interleaved1f1b"},
    "dp_pp": {"dp": 2, "pp": 2, "pp_schedule": "1f1b"},
    "fsdp_pp": {"dp": 1, "fsdp": 2, "pp": 2, "pp_schedule": "gpipe"},
    "pp_tp": {"dp": 1, "tp": 2, "pp": 2, "pp_schedule": "1f1b"},
}


def write_spec(run_dir: Path, parallel: dict[str, Any], world: int, **train: Any) -> Path:
    """A resolved spec for the tiny GPT on the local site's CPU partition, as spec.json."""
    options = train.pop("options", {"size": "tiny"})
    settings = {"steps": STEPS, "batch_size": 16, "lr": 3e-3, "log_every": 1, "seed": 0, **train}
    job = spec.decode(
        spec.JobSpec,
        {
            "name": "gpt-layouts",
            "train": {
                "entrypoint": "hpctrain.examples.gpt:build",
                "parallel": {"microbatches": 4, **parallel},
                "options": options,
                **settings,
            },
            # One node of `world` tasks: tp=4 must fit inside a node (the 2-node case is the cluster test).
            "resources": {"nodes": 1, "tasks_per_node": world, "partition": "cpu"},
        },
        "test",
    )
    resolved = spec.resolve(job, spec.load_site(ROOT / "site-configs" / "local.yaml"))
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "spec.json").write_bytes(spec.dumps(resolved))
    return run_dir


def launch(run_dir: Path, world: int, timeout: float = 300) -> list[dict[str, Any]]:
    """Run the runtime in ``world`` local processes; returns rank 0's metrics records."""
    codes = launcher.run(run_dir, world, timeout=timeout)
    failed = [
        f"rank {rank} exit {code}:\n" + launcher.log_text(run_dir, rank)[-3000:]
        for rank, code in enumerate(codes)
        if code
    ]
    if failed:
        raise AssertionError("\n".join(failed))
    return launcher.metrics(run_dir)


def run_layout(
    run_dir: Path, parallel: dict[str, Any], world: int = WORLD, **train: Any
) -> list[dict[str, Any]]:
    return launch(write_spec(run_dir, parallel, world, **train), world)


def losses(records: list[dict[str, Any]]) -> list[float]:
    return [r["loss"] for r in records if r["kind"] == "train"]


def memory(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if r["kind"] == "memory"]


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> list[float]:
    curve = losses(run_layout(tmp_path_factory.mktemp("single"), {"dp": 1}, world=1))
    assert len(curve) == STEPS and curve[-1] < curve[0] - 0.2, f"the tiny GPT does not learn: {curve}"
    return curve


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_layout_matches_single_process(name: str, reference: list[float], tmp_path: Path) -> None:
    curve = losses(run_layout(tmp_path, LAYOUTS[name]))
    assert curve == pytest.approx(reference, abs=TOLERANCE), f"{name}: {curve} vs single {reference}"


def test_fsdp_holds_under_30_percent_of_ddp_state(tmp_path: Path) -> None:
    def state_bytes(records: list[dict[str, Any]]) -> int:
        reports = memory(records)
        assert len(reports) == WORLD
        return max(r["rank_bytes"]["params"] + r["rank_bytes"]["optimizer"] for r in reports)

    ddp = state_bytes(run_layout(tmp_path / "ddp", LAYOUTS["ddp"], steps=1))
    fsdp = state_bytes(run_layout(tmp_path / "fsdp", LAYOUTS["fsdp"], steps=1))
    assert fsdp <= 0.3 * ddp, (fsdp, ddp)


@pytest.mark.parametrize(("saved", "resumed"), [("fsdp", "fsdp_tp"), ("pp_1f1b", "hsdp")])
def test_resharded_resume_matches(saved: str, resumed: str, reference: list[float], tmp_path: Path) -> None:
    """Save at step 3 under one layout, resume under another: the next losses are the reference's.

    fsdp=4 -> fsdp=2 x tp=2 reshards DTensors; pp=4 -> dp=2 x fsdp=2 joins the stages' keys.
    """
    run_dir = tmp_path / "run"
    first = losses(run_layout(run_dir, LAYOUTS[saved], steps=3, checkpoint_every=3))
    assert first == pytest.approx(reference[:3], abs=TOLERANCE)
    (run_dir / "metrics.jsonl").unlink()
    records = run_layout(run_dir, LAYOUTS[resumed], steps=STEPS)
    assert any(r.get("event") == "resumed" and r["step"] == 3 for r in records)
    assert losses(records) == pytest.approx(reference[3:], abs=TOLERANCE)
