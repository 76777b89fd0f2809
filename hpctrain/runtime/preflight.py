"""Preflight: each rank checks its node (GPUs, IB, versions) and times all-reduces; rank 0 names bad nodes.

Run by `hpctrain doctor`, and first thing in a job's training step: `python -m
hpctrain.runtime.preflight --then-train` checks, then trains in the same process, so a job pays
neither a second launch nor a second torch import (templates/partials/launch.j2). Rank 0 writes
`preflight.json` in the run directory and, when nodes fail, `preflight-exclude` (a Slurm node
list); then every rank exits 3, and the batch script requeues the job without those nodes.

Two bandwidth figures are measured: the bus bandwidth of an all-reduce over every rank (compared
with the site's `network.expected_busbw_gbps` by doctor), and a per-node figure from an all-reduce
inside each node's own group (all groups at once), which must be within `--tolerance` of the
median node. With one rank per node that per-node figure times the node's own side of the loop.

Test hooks (tests/integration/test_doctor.py): `HPCTRAIN_PREFLIGHT_DELAY=NODE:SECONDS` makes the
ranks on NODE sleep before each timed all-reduce (a slow node); `HPCTRAIN_PREFLIGHT_HIDE_GPUS=N1,N2`
makes those nodes see no GPU (a broken node).
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from hpctrain.errors import HpctrainError
from hpctrain.rundir import (
    PREFLIGHT_EXCLUDE,
    NodeFacts,
    NodeVerdict,
    PreflightReport,
    RunDir,
    replace_bytes,
    write_json,
)
from hpctrain.rundir.ports import job_ports
from hpctrain.runtime import bootstrap, startup_times
from hpctrain.runtime.__main__ import main as train
from hpctrain.runtime.logs import exit_now
from hpctrain.scheduler.slurm.facts import expand_hostlist
from hpctrain.scheduler.slurm.nodes import partition_nodes_left
from hpctrain.version import __version__

EXIT_BAD_NODES = 3
# Least time per all-reduce a node must lose to fail: scheduling noise on shared CPU nodes (gloo)
# is tens of milliseconds, on GPU nodes (NCCL) a fraction of one.
JITTER_S = {"gloo": 0.02, "nccl": 0.0005}


def gpus_asked(env: dict[str, str]) -> int:
    """GPUs Slurm gave this task's node: SLURM_GPUS_ON_NODE, else the ids in SLURM_JOB_GPUS."""
    if env.get("SLURM_GPUS_ON_NODE", "").isdigit():
        return int(env["SLURM_GPUS_ON_NODE"])
    ids = env.get("SLURM_STEP_GPUS") or env.get("SLURM_JOB_GPUS") or ""
    return len([i for i in ids.split(",") if i.strip()])


# Where slurmd lives when it is not on PATH: a normal user's PATH leaves out the sbin folders.
SBIN_FOLDERS = ("/usr/sbin", "/usr/local/sbin")


def slurmd_binary() -> str | None:
    """slurmd from PATH, else from the sbin folder beside srun's (a /opt/slurm prefix), else from
    SBIN_FOLDERS; None when the node has none."""
    found = shutil.which("slurmd")
    if found:
        return found
    srun = shutil.which("srun")
    folders = [str(Path(srun).resolve().parent.parent / "sbin")] if srun else []
    for folder in [*folders, *SBIN_FOLDERS]:
        candidate = os.path.join(folder, "slurmd")
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def gres_files(node: str) -> list[str]:
    """The device files slurmd's gres.conf gives this node (fake GPUs are plain files there)."""
    slurmd = slurmd_binary()
    if slurmd is None:
        return []
    try:
        proc = subprocess.run(
            [slurmd, "-G", "-N", node], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    files: list[str] = []
    for line in (proc.stdout + proc.stderr).splitlines():
        if " Name=gpu " in f" {line} " or "Name=gpu " in line:
            for word in line.split():
                if word.startswith("File=") and word != "File=(null)":
                    files += expand_hostlist(word.removeprefix("File="))
    return files


UNCHECKED_IN_CONTAINER = (
    "not checked: no CUDA, no /dev/nvidia* and no slurmd in the container to read gres.conf"
)


def count_gpus(node: str) -> tuple[int | None, str]:
    """(GPUs this node shows, how it was seen): CUDA, /dev/nvidia*, else the gres device files;
    None when nothing here can tell (a container without CUDA on fake GPUs)."""
    import torch

    if torch.cuda.is_available():
        return torch.cuda.device_count(), "torch.cuda"
    devices = [p for p in glob.glob("/dev/nvidia[0-9]*") if p[len("/dev/nvidia") :].isdigit()]
    if devices:
        return len(devices), "/dev/nvidia* (CUDA unavailable)"
    if os.environ.get("HPCTRAIN_CONTAINER") and slurmd_binary() is None:
        # Inside the container neither gres.conf nor its device files can be seen: no evidence of a
        # missing GPU (fake GPUs on the host pass this check there), so the node is not failed.
        return None, UNCHECKED_IN_CONTAINER
    files = [p for p in gres_files(node) if os.path.exists(p)]
    return len(files), "gres.conf device files (no CUDA: fake or CPU-only)"


HEALTH_QUERY = "index,ecc.errors.uncorrected.volatile.total,clocks.sm,clocks.max.sm"


def parse_gpu_health(text: str) -> list[str]:
    """Problems in `nvidia-smi --query-gpu=HEALTH_QUERY --format=csv,noheader,nounits` output."""
    problems = []
    for line in text.strip().splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != 4:
            continue
        index, ecc, _clock, max_clock = fields
        if ecc.isascii() and ecc.isdigit() and int(ecc) > 0:
            problems.append(f"GPU {index}: {ecc} uncorrected ECC errors")
        if max_clock.isascii() and max_clock.isdigit() and int(max_clock) == 0:
            problems.append(f"GPU {index}: reports a maximum SM clock of 0")
    return problems


def parse_dcgm_diag(text: str) -> list[str]:
    """Failed checks in `dcgmi diag -r 1` output: the table rows whose result cell says Fail."""
    problems = []
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and cells[0] and cells[-1].lower().startswith("fail"):
            problems.append(f"dcgmi diag: {cells[0]} failed")
    return problems


def _run_tool(argv: list[str], timeout: float) -> tuple[str, str | None]:
    """A health tool's output, and the one-line problem of running it (None when it ran fine)."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as err:
        return "", f"{argv[0]} failed: {err}"
    if proc.returncode != 0:
        return proc.stdout, f"{argv[0]} failed: {(proc.stderr or proc.stdout).strip()[:120]}"
    return proc.stdout, None


def gpu_health() -> list[str]:
    """ECC and clock problems from nvidia-smi, and DCGM's quick diagnostic where DCGM is installed."""
    problems: list[str] = []
    if shutil.which("nvidia-smi") is not None:
        query = ["nvidia-smi", f"--query-gpu={HEALTH_QUERY}", "--format=csv,noheader,nounits"]
        output, problem = _run_tool(query, timeout=20)
        problems += [problem] if problem else parse_gpu_health(output)
    if shutil.which("dcgmi") is not None:
        # Level 1 takes seconds: deployment, NVML and PCIe checks, not the long stress tests.
        output, problem = _run_tool(["dcgmi", "diag", "-r", "1"], timeout=120)
        problems += parse_dcgm_diag(output) or ([problem] if problem else [])
    return problems


def ib_ports() -> list[str]:
    """`mlx5_0/1: ACTIVE` for every InfiniBand/RoCE port the kernel shows."""
    ports = []
    for state in sorted(glob.glob("/sys/class/infiniband/*/ports/*/state")):
        parts = Path(state).parts
        text = Path(state).read_text(encoding="utf-8").strip()
        ports.append(f"{parts[-4]}/{parts[-2]}: {text.split(':')[-1].strip()}")
    return ports


def check_node(info: bootstrap.DistInfo, env: dict[str, str]) -> NodeFacts:
    asked = gpus_asked(env)
    if not asked:
        seen, source = 0, "no GPUs asked"
    elif info.hostname in env.get("HPCTRAIN_PREFLIGHT_HIDE_GPUS", "").split(","):
        seen, source = 0, "HPCTRAIN_PREFLIGHT_HIDE_GPUS (test hook)"
    elif info.local_rank == 0:
        counted, source = count_gpus(info.hostname)
        seen = asked if counted is None else counted
    else:  # one rank per node looks, the others would only repeat it
        seen, source = asked, "checked by local rank 0"
    facts = NodeFacts(
        node=info.hostname,
        rank=info.rank,
        local_rank=info.local_rank,
        python=sys.version.split()[0],
        hpctrain=__version__,
        gpus_asked=asked,
        gpus_seen=seen,
        gpu_source=source,
        ib_ports=ib_ports(),
    )
    if asked and seen < asked:
        facts.problems.append(f"{asked} GPUs allocated, {seen} visible ({source})")
    if asked and source == "torch.cuda" and info.local_rank == 0:
        facts.problems += gpu_health()
    elif asked and source == UNCHECKED_IN_CONTAINER:
        facts.warnings.append(f"GPUs {source}")
    elif asked and source.startswith("gres.conf"):
        facts.warnings.append(f"{seen} GPU device files, no CUDA device: fake GPUs or a driver problem")
    down = [p for p in facts.ib_ports if not p.endswith("ACTIVE")]
    if down:
        facts.problems.append(f"IB ports not active: {', '.join(down)}")
    return facts


def busbw_gbps(nbytes: int, ranks: int, seconds: float) -> float:
    """nccl-tests' all-reduce bus bandwidth: bytes x 2(n-1)/n per second; one rank counts as n=2."""
    factor = 2 * (ranks - 1) / ranks if ranks > 1 else 1.0
    return nbytes * factor / max(seconds, 1e-9) / 1e9


def timed_allreduce(
    tensor: object, group: object, ranks: int, iterations: int, delay: float
) -> tuple[float, float]:
    """(bus bandwidth GB/s, seconds) of the fastest of `iterations` timed all-reduces: noise only
    ever adds time, a slow node is slow every time."""
    import torch.distributed as dist

    dist.all_reduce(tensor, group=group)  # warm-up: connections are made here
    times = []
    for _ in range(iterations):
        start = time.perf_counter()
        if delay:
            time.sleep(delay)
        dist.all_reduce(tensor, group=group)
        times.append(time.perf_counter() - start)
    seconds = min(times)
    nbytes = tensor.numel() * tensor.element_size()  # type: ignore[attr-defined]
    return busbw_gbps(nbytes, ranks, seconds), seconds


def injected_delay(node: str, env: dict[str, str]) -> float:
    target, _, seconds = env.get("HPCTRAIN_PREFLIGHT_DELAY", "").partition(":")
    return float(seconds) if target == node and seconds else 0.0


def judge(
    facts: list[NodeFacts], tolerance: float, jitter_s: float = JITTER_S["gloo"]
) -> dict[str, list[str]]:
    """Problems by node: each rank's own, plus a per-node bandwidth below (1 - tolerance) x median."""
    by_node: dict[str, list[str]] = {}
    for item in facts:
        by_node.setdefault(item.node, []).extend(
            p for p in item.problems if p not in by_node.get(item.node, [])
        )
    node_bw = {n: min(f.node_busbw_gbps for f in facts if f.node == n) for n in by_node}
    node_s = {n: max(f.node_seconds for f in facts if f.node == n) for n in by_node}
    if len(node_bw) > 1:
        median = statistics.median(node_bw.values())
        typical_s = statistics.median(node_s.values())
        for node, value in node_bw.items():
            # Jitter of a small in-node all-reduce is no fault: a node must also lose at least
            # jitter_s per all-reduce to fail.
            if value < (1 - tolerance) * median and node_s[node] - typical_s > jitter_s:
                by_node[node].append(
                    f"node all-reduce {value:.3f} GB/s, {100 * (1 - value / median):.0f}% under the "
                    f"median {median:.3f} GB/s"
                )
    return by_node


def run(size_mb: float, iterations: int, tolerance: float, report: Path | None) -> int:
    startup_times.mark("interpreter")
    import torch
    import torch.distributed as dist

    startup_times.mark("torch")

    env = dict(os.environ)
    info = bootstrap.discover(env)
    # Without HPCTRAIN_PREFLIGHT_PORT (set by the batch script): attempt 0's preflight port, same rule.
    port = int(env.get("HPCTRAIN_PREFLIGHT_PORT") or job_ports(info.job_id)[1])
    info = bootstrap.DistInfo(**{**asdict(info), "master_port": port})
    started = time.perf_counter()
    facts = check_node(info, env)
    backend = "nccl" if facts.gpus_seen and torch.cuda.is_available() else "gloo"
    try:
        bootstrap.init_process_group(info, backend, timeout_s=60)
    except Exception as error:
        # A report the supervisor reads: a port that was taken (EADDRINUSE) is a fault of the
        # launch, retried on another port without spending a restart.
        run_dir = env.get("HPCTRAIN_RUN_DIR")
        if run_dir:
            # Imported here: runtime.metrics imports torch, which the container check never loads
            # (tests/unit/runtime/test_preflight.py: test_the_preflight_module_imports_no_torch).
            from hpctrain.runtime.metrics import write_failure

            write_failure(Path(run_dir), info.rank, error, info.hostname)
        raise
    device = torch.device("cuda", info.local_rank % torch.cuda.device_count()) if backend == "nccl" else None
    tensor = torch.ones(max(1, int(size_mb * 2**20 / 4)), dtype=torch.float32, device=device)
    delay = injected_delay(info.hostname, env)
    names: list[str | None] = [None] * info.world_size
    dist.all_gather_object(names, info.hostname)
    nodes = list(dict.fromkeys(names))
    groups = {n: dist.new_group([r for r, name in enumerate(names) if name == n]) for n in nodes}
    mine = [r for r, name in enumerate(names) if name == info.hostname]
    facts.node_busbw_gbps, facts.node_seconds = timed_allreduce(
        tensor, groups[info.hostname], len(mine), iterations, delay
    )
    facts.global_busbw_gbps, _ = timed_allreduce(tensor, None, info.world_size, iterations, delay)
    gathered: list[NodeFacts | None] = [None] * info.world_size
    dist.all_gather_object(gathered, facts)
    verdict: list[list[str] | None] = [None]
    if info.rank == 0:
        everyone = [f for f in gathered if f is not None]
        verdict = [report_verdict(everyone, nodes, backend, size_mb, tolerance, started, report)]
    dist.broadcast_object_list(verdict, src=0)  # every rank must know whether training may start
    dist.destroy_process_group()
    os.environ["MASTER_PORT"] = str(env.get("MASTER_PORT", ""))  # the training's own rendezvous
    if "MASTER_PORT" not in env:
        del os.environ["MASTER_PORT"]
    startup_times.mark("preflight")
    return EXIT_BAD_NODES if verdict[0] else 0


def too_few_left(bad: list[str], env: dict[str, str]) -> str | None:
    """Why requeueing without `bad` cannot work (the job would wait forever), or None."""
    partition, job_id = env.get("SLURM_JOB_PARTITION", ""), env.get("SLURM_JOB_ID", "")
    needed = int(env.get("SLURM_JOB_NUM_NODES", "0") or 0)
    if not partition or not job_id or not needed:
        return None
    try:
        nodes = partition_nodes_left(partition, job_id)
    except HpctrainError:
        return None
    left = len(nodes - set(bad))
    if left >= needed:
        return None
    return f"partition {partition} would have {left} node(s) left for a job of {needed}"


def report_verdict(
    everyone: list[NodeFacts],
    nodes: list[str],
    backend: str,
    size_mb: float,
    tolerance: float,
    started: float,
    report: Path | None,
) -> list[str]:
    """Rank 0: judge, print one line per node, write preflight.json and preflight-exclude; the bad nodes."""
    by_node = judge(everyone, tolerance, JITTER_S[backend])
    bad = [node for node, problems in by_node.items() if problems]
    stuck = too_few_left(bad, dict(os.environ)) if bad else None
    summary = PreflightReport(
        seconds=round(time.perf_counter() - started, 3),
        backend=backend,
        ranks=len(everyone),
        size_mb=size_mb,
        busbw_gbps=min(f.global_busbw_gbps for f in everyone),
        nodes={n: NodeVerdict(p) for n, p in by_node.items()},
        bad_nodes=bad,
        requeue=bool(bad) and stuck is None,
        no_requeue_because=stuck,
        facts=everyone,
    )
    for node in nodes:
        status = "FAIL" if by_node[node] else "PASS"
        print(f"hpctrain preflight: {node}: {status} {'; '.join(by_node[node])}".rstrip())
    print(f"hpctrain preflight: all-reduce {summary.busbw_gbps:.3f} GB/s over {len(everyone)} ranks")
    if stuck:
        print(f"hpctrain preflight: not requeueing without {','.join(bad)}: {stuck}")
    if report is not None:
        write_json(report, summary)
        exclude = report.parent / PREFLIGHT_EXCLUDE
        if bad and not stuck:
            replace_bytes(exclude, (",".join(bad) + "\n").encode())
        else:
            exclude.unlink(missing_ok=True)
    return bad


def container_problems(env: dict[str, str]) -> list[str]:
    """What keeps this container from running the job's ranks (the batch script's container check):
    an hpctrain other than the host's (the run directory's files are a contract between the host's
    supervisor and this runtime, version for version), or a run directory the container cannot write."""
    problems = []
    host_version = env.get("HPCTRAIN_VERSION", "")
    if host_version and host_version != __version__:
        problems.append(
            f"the image has hpctrain {__version__}, the host {host_version}: install "
            f"hpctrain=={host_version} in the image (scripts/build-image.sh), or mount the host's into it"
        )
    run_dir = env.get("HPCTRAIN_RUN_DIR", "")
    if run_dir:
        try:
            with tempfile.TemporaryFile(dir=run_dir):
                pass
        except OSError as err:
            problems.append(
                f"the run directory {run_dir} is not writable in the container ({err.strerror}): "
                "mount it at the same path"
            )
    return problems


def check_container(env: dict[str, str]) -> int:
    """One line for this node: what it runs, or why the ranks cannot run here; 1 on a problem."""
    node = env.get("SLURMD_NODENAME") or socket.gethostname()
    runtime = env.get("HPCTRAIN_CONTAINER", "none")
    problems = container_problems(env)
    try:
        import torch

        torch_version = torch.__version__
    except ImportError as err:
        problems.append(f"torch does not import: {err}")
        torch_version = "none"
    facts = f"hpctrain {__version__}, torch {torch_version}, Python {sys.version.split()[0]}"
    if problems:
        print(f"hpctrain container check: {node} ({runtime}): FAIL {'; '.join(problems)} [{facts}]")
        return 1
    print(f"hpctrain container check: {node} ({runtime}): PASS {facts}")
    return 0


# Set (to 1) by the batch script once an attempt of the allocation got past preflight.
PREFLIGHT_DONE = "HPCTRAIN_PREFLIGHT_DONE"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hpctrain.runtime.preflight", description=__doc__)
    parser.add_argument("--size-mb", type=float, default=1.0, help="All-reduce message size.")
    parser.add_argument("--iterations", type=int, default=5, help="Timed all-reduces per measurement.")
    parser.add_argument("--tolerance", type=float, default=0.5, help="Allowed fraction under the median.")
    parser.add_argument("--report", type=Path, default=None, help="preflight.json (default: run dir).")
    parser.add_argument(
        "--then-train",
        action="store_true",
        help="On success, train in this same process (python -m hpctrain.runtime): no second launch.",
    )
    parser.add_argument(
        "--container",
        action="store_true",
        help="Only check that this container can run the job's ranks (one task per node).",
    )
    args = parser.parse_args(argv)
    if args.container:
        return check_container(dict(os.environ))
    run_dir = os.environ.get("HPCTRAIN_RUN_DIR")
    report = args.report or (RunDir(run_dir).preflight_report if run_dir else None)
    # A restart inside the allocation runs on nodes that passed at its first attempt: no checks again.
    checked = args.then_train and os.environ.get(PREFLIGHT_DONE) == "1"
    code = 0 if checked else run(args.size_mb, args.iterations, args.tolerance, report)
    if code or not args.then_train:
        return code
    exit_now(train())


if __name__ == "__main__":
    sys.exit(main())
