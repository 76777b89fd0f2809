"""A second attempt of a compiled job finds the compile cache of the first in its run directory.

The runtime points the inductor and Triton caches at ``$RUN/compile-cache/`` (train.compile_cache),
so a restart on other nodes, or with a fresh /tmp, does not compile again. Without CUDA (CI, the
login node) this test is skipped, and says so: inductor's Triton path needs a GPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU here: the compiled attempts need one", allow_module_level=True)

from hpctrain import spec  # noqa: E402
from hpctrain.rundir.names import COMPILE_CACHE  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
STEPS_PER_ATTEMPT = 10


def attempt(run_dir: Path, steps: int, tmpdir: Path) -> tuple[float, list[dict[str, Any]]]:
    """One attempt of the compiled GPT as a plain process: seconds from its start to its first
    step, and the metrics lines it added. TMPDIR moves torch's default cache where we can see it."""
    job = {
        "name": "compile-cache",
        "resources": {"nodes": 1, "gpus_per_node": 1},
        "train": {
            "entrypoint": "hpctrain.examples.gpt:build",
            "options": {"size": "small"},
            "steps": steps,
            "batch_size": 8,
            "log_every": 1,
            "compile": True,
            "tensorboard": False,
        },
    }
    (run_dir / "job.yaml").write_text(json.dumps(job))
    resolved = spec.resolve(
        spec.load_job(run_dir / "job.yaml"), spec.load_site(REPO / "site-configs" / "local.yaml")
    )
    (run_dir / "spec.json").write_bytes(spec.dumps(resolved))
    metrics = run_dir / "metrics.jsonl"
    seen = len(metrics.read_text().splitlines()) if metrics.exists() else 0
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "RANK", "WORLD_SIZE"))}
    for variable in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"):
        env.pop(variable, None)
    began = time.time()
    proc = subprocess.run(
        [sys.executable, "-m", "hpctrain.runtime"],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**env, "HPCTRAIN_RUN_DIR": str(run_dir), "TMPDIR": str(tmpdir), "HOME": str(tmpdir)},
        timeout=400,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [json.loads(x) for x in metrics.read_text().splitlines()[seen:]]
    first = next(line for line in lines if line.get("kind") == "train")
    return first["time"] - began, lines


def fx_graph_entries(cache: Path) -> set[str]:
    """The compiled graphs inductor stored (one folder per graph key)."""
    return {str(p.relative_to(cache)) for p in (cache / "inductor" / "fxgraph").glob("*/*")}


def test_a_second_attempt_of_a_compiled_job_finds_its_compile_cache(tmp_path: Path) -> None:
    run_dir, tmpdir = tmp_path / "run", tmp_path / "tmp"
    run_dir.mkdir()
    tmpdir.mkdir()
    cold_s, _ = attempt(run_dir, STEPS_PER_ATTEMPT, tmpdir)
    cache = run_dir / COMPILE_CACHE
    graphs = fx_graph_entries(cache)
    assert graphs, f"the first attempt stored no compiled graph in {cache}"
    assert any((cache / "triton").rglob("*.cubin")), "no Triton kernel in the run's cache"

    warm_s, lines = attempt(run_dir, 2 * STEPS_PER_ATTEMPT, tmpdir)
    resumed = [line for line in lines if line.get("event") == "resumed"]
    assert resumed and resumed[0]["step"] == STEPS_PER_ATTEMPT, lines[:3]
    assert fx_graph_entries(cache) == graphs, "the second attempt compiled graphs the first had stored"
    # Torch's defaults (TMPDIR, ~/.triton) stayed unused: every kernel came from the run's cache.
    assert not list(tmpdir.glob("torchinductor_*")) and not (tmpdir / ".triton").exists()
    print(f"time to the first step: cold {cold_s:.1f} s, warm {warm_s:.1f} s; {len(graphs)} graphs cached")
    assert warm_s < cold_s, (cold_s, warm_s)
