"""`hpctrain submit` from a non-editable wheel against submitit 1.5.4 and a floor script, in paired turns.

Builds the wheel of the checkout this file sits in (or takes ``--wheel``) and makes two side venvs
(``--system-site-packages``, so torch and the rest come from the system): one with that wheel
installed non-editable (``pip install --no-deps``; the benchmark checks that the venv imports the
wheel's hpctrain, not an editable checkout), one with ``submitit==1.5.4``. It then times whole
processes, the order of the three swapped every run so that load on the shared machine falls on all:

- ``hpctrain``: the venv's own ``hpctrain`` executable, ``submit jobs/digits-ddp.yaml --site local
  --set dependency=afterok:ANCHOR`` (a fresh ``HPCTRAIN_HOME``; every pre-submit check on);
- ``submitit``: a script run by the submitit venv's python that submits a trivial function through
  ``AutoExecutor(cluster="slurm")``;
- ``floor``: a python that imports jinja2 and yaml, then calls sbatch.

Jobs must pend and never run, without touching the partition (others use the cluster): Slurm 22.05's
sbatch has no SBATCH_HOLD variable, so the benchmark submits one held anchor job and every measured
job depends on it (``afterok``; each tool's own way of saying so). It checks that the first jobs pend
on that dependency and ``scancel`` s every job it made at the end. Prints medians of wall time and of
CPU time (the process and the children it waited for, such as sbatch: less sensitive to the load of
others), and the ratios hpctrain / submitit and hpctrain / floor (of the medians, and the median and
quartiles of the run-by-run ratios).

    python benchmarks/bench_submit_peers.py [--runs 21] [--wheel WHEEL] [--venvs DIR] [--isolated-site]
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import site
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SUBMITIT = "submitit==1.5.4"

SUBMITIT_SCRIPT = """
import sys
import submitit

def noop():
    return 0

executor = submitit.AutoExecutor(folder=sys.argv[1], cluster="slurm")
executor.update_parameters(
    timeout_min=5, slurm_partition="debug", slurm_additional_parameters={"dependency": sys.argv[2]}
)
print(executor.submit(noop).job_id)
"""

FLOOR_SCRIPT = """
import subprocess, sys
import jinja2, yaml
out = subprocess.run(sys.argv[1:], capture_output=True, text=True, check=True).stdout
print(out.strip().split(";")[0])
"""


def sh(argv: list[str], **kwargs: object) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True, **kwargs)  # type: ignore[call-overload]
    if proc.returncode:
        raise SystemExit(f"failed: {' '.join(map(str, argv))}\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return proc.stdout


def build_wheel(into: Path) -> Path:
    """The wheel of this checkout's working tree, built from a clean copy (an in-tree build/ may be stale)."""
    files = sh(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO).split("\0")
    source = into / "source"
    for name in filter(None, files):
        if (REPO / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, source / name)
    wheels = into / "wheels"
    pip_wheel = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
    sh([*pip_wheel, "-w", wheels, source])
    return next(wheels.glob("hpctrain-*.whl"))


def make_venv(folder: Path, isolated_site: bool, *pip_args: str) -> Path:
    """A venv that sees the system's site-packages, with `pip_args` installed; its python.

    `--system-site-packages` also runs the system's .pth files at every start (on this machine an
    editable hpctrain's finder and a certifi hook, which import pathlib, typing, importlib.resources
    and more before the program starts). With `isolated_site` the venv sees the same packages
    through a plain path line instead, as a venv with its own copies would: no .pth of the system runs.
    """
    python = folder / "bin" / "python"
    if not python.exists():
        sh([sys.executable, "-m", "venv", *([] if isolated_site else ["--system-site-packages"]), folder])
    if isolated_site:
        purelib = sh([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).strip()
        (Path(purelib) / "_system_site.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    sh([python, "-m", "pip", "install", "-q", "--disable-pip-version-check", *pip_args])
    return python


def check_wheel_install(python: Path, venv: Path) -> None:
    where = sh([python, "-c", "import hpctrain; print(hpctrain.__file__)"], cwd="/").strip()
    if not Path(where).resolve().is_relative_to(venv.resolve()):
        raise SystemExit(f"the venv imports hpctrain from {where}, not from its own wheel install")


def held_anchor() -> str:
    argv = ["sbatch", "--parsable", "--hold", "--job-name=bench-anchor", "-o", "/dev/null", "--wrap", "true"]
    out = sh(argv)
    return out.strip().split(";")[0]


def pending_reason(job_id: str) -> str:
    return sh(["squeue", "-h", "-j", job_id, "-o", "%T %r"]).strip()


def quartiles(values: list[float]) -> tuple[float, float]:
    q = statistics.quantiles(values, n=4)
    return q[0], q[2]


def report(label: str, samples: dict[str, list[float]]) -> None:
    """Medians per command, and hpctrain's ratios to the others: of the medians and run by run."""
    medians = {name: statistics.median(values) for name, values in samples.items()}
    print(f"{label} ms    {'median':>8} {'min':>7} {'max':>7}")
    for name, values in samples.items():
        print(f"  {name:10} {medians[name]:8.1f} {min(values):7.1f} {max(values):7.1f}")
    for other in ("submitit", "floor"):
        paired = [a / b for a, b in zip(samples["hpctrain"], samples[other], strict=True)]
        low, high = quartiles(paired)
        print(
            f"  hpctrain / {other:8}: {medians['hpctrain'] / medians[other]:.3f} of the medians; "
            f"run by run: median {statistics.median(paired):.3f}, quartiles {low:.3f}-{high:.3f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--wheel", type=Path, help="an hpctrain wheel (default: build this checkout's)")
    parser.add_argument("--venvs", type=Path, help="folder for the side venvs, kept (default: a temp dir)")
    parser.add_argument("--job", type=Path, default=REPO / "jobs" / "digits-ddp.yaml")
    parser.add_argument(
        "--isolated-site",
        action="store_true",
        help="venvs see the system's packages through a path line, not --system-site-packages "
        "(the system's .pth files do not run at start-up)",
    )
    args = parser.parse_args()

    scratch = Path(tempfile.mkdtemp(prefix="bench-peers-"))
    venvs = args.venvs.resolve() if args.venvs else scratch
    wheel = args.wheel.resolve() if args.wheel else build_wheel(scratch)
    venvs = venvs / ("isolated-site" if args.isolated_site else "system-site")
    hpctrain_venv, submitit_venv = venvs / "hpctrain-wheel", venvs / "submitit"
    install_wheel = ("--no-deps", "--force-reinstall", str(wheel))
    hpctrain_python = make_venv(hpctrain_venv, args.isolated_site, *install_wheel)
    check_wheel_install(hpctrain_python, hpctrain_venv)
    submitit_python = make_venv(submitit_venv, args.isolated_site, SUBMITIT)
    (scratch / "submitit_submit.py").write_text(SUBMITIT_SCRIPT)
    (scratch / "floor.py").write_text(FLOOR_SCRIPT)

    env = {**os.environ, "HPCTRAIN_HOME": str(scratch / "home")}
    env.pop("PYTHONPATH", None)  # the venvs' own installs, nothing from a checkout
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    anchor = held_anchor()
    dependency = f"afterok:{anchor}"
    commands = {
        "hpctrain": [
            str(hpctrain_venv / "bin" / "hpctrain"),
            *("submit", str(args.job), "--site", "local", "--set", f"dependency={dependency}"),
        ],
        "submitit": [
            *(str(submitit_python), str(scratch / "submitit_submit.py")),
            *(str(scratch / "submitit"), dependency),
        ],
        "floor": [
            str(hpctrain_python),
            str(scratch / "floor.py"),
            *("sbatch", "--parsable", f"--dependency={dependency}", "-o", "/dev/null", "--wrap", "true"),
        ],
    }
    job_ids: list[str] = []

    def once(name: str) -> tuple[float, float]:
        """Wall ms and CPU ms (user + system of the process and the children it waited for, e.g. sbatch)."""
        cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        proc = subprocess.run(commands[name], capture_output=True, text=True, env=env, cwd=scratch)
        elapsed = time.perf_counter() - start
        cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (cpu_after.ru_utime + cpu_after.ru_stime) - (cpu_before.ru_utime + cpu_before.ru_stime)
        found = re.search(r"(\d+)", proc.stdout.replace("Submitted job", ""))
        if found:
            job_ids.append(found.group(1))
        if proc.returncode or not found:
            output = proc.stdout[-1500:] + proc.stderr[-1500:]
            raise SystemExit(f"{name} failed ({proc.returncode}):\n{output}")
        return elapsed * 1000, cpu * 1000

    walls: dict[str, list[float]] = {name: [] for name in commands}
    cpus: dict[str, list[float]] = {name: [] for name in commands}
    load_before = os.getloadavg()[0]
    try:
        for name in commands:  # untimed: page cache, bytecode, Jinja's template cache
            once(name)
            state = pending_reason(job_ids[-1])
            if "PENDING" not in state or "Dependency" not in state:
                raise SystemExit(f"{name}'s job {job_ids[-1]} is not pending on the anchor: {state!r}")
        order = list(commands)
        for run in range(args.runs):
            for name in order if run % 2 == 0 else order[::-1]:
                wall, cpu = once(name)
                walls[name].append(wall)
                cpus[name].append(cpu)
    finally:
        # The dependants first: with the anchor gone first, none could start, but there is no need to try.
        subprocess.run(["scancel", *job_ids], check=False)
        subprocess.run(["scancel", anchor], check=False)
        shutil.rmtree(scratch / "home", ignore_errors=True)

    for label, samples in (("wall", walls), ("CPU", cpus)):
        report(label, samples)
    print(
        f"{args.runs} runs each, order swapped every run; wheel {wheel.name}; "
        f"venvs: {'isolated site (path line)' if args.isolated_site else '--system-site-packages'}; "
        f"load average (1 min) before {load_before:.2f}, after {os.getloadavg()[0]:.2f}"
    )
    shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
