"""What the submit path imports: a whole `hpctrain submit` (sbatch stubbed) in a fresh interpreter.

Not a timing test (timings live in benchmarks/bench_submit_peers.py): it names modules that cost
a login-side submit start-up time and that no pre-submit check needs. The child runs with `-S`, so
no .pth file of the environment (an editable install's finder, a certifi hook) imports them first
and hides a regression; the parent's sys.path is handed over as PYTHONPATH instead.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import hpctrain
from tests.conftest import JOBS

# torch and numpy: the job's own imports, found (never imported) by the entrypoint check.
# importlib.metadata / email: version and entry-point look-ups. importlib.resources / zipfile:
# package data is found from the package's own folder. inspect / tokenize: the spec's field docs
# read sources only for `explain` and the docs (but msgspec imports inspect through typing_extensions
# where that is installed, so it is not listed).
NOT_ON_THE_SUBMIT_PATH = ("torch", "numpy", "importlib.metadata", "email", "importlib.resources", "zipfile")

CHILD = """
import json, sys
job = sys.argv[1]
before = set(sys.modules)
from hpctrain.scheduler.slurm.cli import SlurmCliBackend
SlurmCliBackend.submit = lambda self, *args, **kwargs: "4242"  # everything but the sbatch call
from hpctrain.cli.main import main
code = main(["submit", job, "--site", "local"])
loaded = set(sys.modules) - before
print(json.dumps({"code": code, "loaded": sorted(loaded)}))
"""


def submit_path_modules(tmp_path: Path) -> tuple[int, set[str]]:
    repo_root = str(Path(hpctrain.__file__).resolve().parents[1])
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([repo_root, *(p for p in sys.path if p)]),
        "HPCTRAIN_HOME": str(tmp_path / "home"),
        "HPCTRAIN_BACKEND": "slurm",
    }
    proc = subprocess.run(
        [sys.executable, "-S", "-c", CHILD, str(JOBS / "digits-ddp.yaml")],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.splitlines()[-1])
    return result["code"], set(result["loaded"])


def test_submit_imports_nothing_it_does_not_need(tmp_path: Path) -> None:
    code, loaded = submit_path_modules(tmp_path)
    assert code == 0
    assert "hpctrain.submission.submit_path" in loaded and "jinja2" in loaded, "the child did not submit"
    heavy = sorted(m for m in loaded for name in NOT_ON_THE_SUBMIT_PATH if f"{m}.".startswith(f"{name}."))
    assert not heavy, f"the submit path imports {heavy}"
