"""Who am I: rank, world size, local rank and rendezvous address from srun, torchrun, MPI or nothing.

Detection order: explicit ``HPCTRAIN_BOOTSTRAP``, torchrun's env, Slurm's task env, MPI's env; a
plain process is world size 1. The env parsers are pure functions of a mapping, so they are
tested with dicts; only the MPI path talks to mpi4py.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from hpctrain.rundir.ports import job_ports

KINDS = ("torchrun", "srun", "mpi", "single")
_MPI_RANK_VARS = ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "MV2_COMM_WORLD_RANK")


@dataclass(frozen=True)
class DistInfo:
    """This process's place in the job."""

    rank: int
    world_size: int
    local_rank: int
    node_rank: int
    master_addr: str
    master_port: int
    launcher: str
    job_id: str = ""
    restart_count: int = 0
    hostname: str = ""


def detect(env: Mapping[str, str]) -> str:
    """Which launcher started this process (one of KINDS)."""
    explicit = env.get("HPCTRAIN_BOOTSTRAP", "").strip().lower()
    if explicit:
        if explicit not in KINDS:
            raise ValueError(f"HPCTRAIN_BOOTSTRAP={explicit!r}: expected one of {', '.join(KINDS)}")
        return explicit
    if "TORCHELASTIC_RUN_ID" in env or all(k in env for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK")):
        return "torchrun"
    # The batch shell also has SLURM_PROCID=0; only a task started by srun has a step id.
    if "SLURM_PROCID" in env and ("SLURM_STEP_ID" in env or "SLURM_STEPID" in env):
        return "srun"
    if any(k in env for k in _MPI_RANK_VARS):
        return "mpi"
    return "single"


def first_host(nodelist: str) -> str:
    """The first host of a Slurm nodelist (`node[1-2,5],gpu03` -> node1) without calling scontrol."""
    match = re.match(r"^([^,\[]+)(?:\[([^\]]+)\])?", nodelist.strip())
    if not match:
        raise ValueError(f"cannot parse Slurm nodelist {nodelist!r}")
    prefix, ranges = match.groups()
    if not ranges:
        return prefix
    first = ranges.split(",")[0].split("-")[0]
    return prefix + first


def default_port(job_id: str) -> int:
    """Training's port of attempt 0 when MASTER_PORT is missing: the batch script's rule
    (hpctrain.rundir.ports), outside this node's ephemeral range."""
    return job_ports(job_id)[0]


def _int(env: Mapping[str, str], key: str, default: int | None = None) -> int:
    value = env.get(key)
    if value is None or value == "":
        if default is None:
            raise KeyError(f"{key} is not set")
        return default
    return int(value)


def from_torchrun(env: Mapping[str, str]) -> DistInfo:
    return DistInfo(
        rank=_int(env, "RANK"),
        world_size=_int(env, "WORLD_SIZE"),
        local_rank=_int(env, "LOCAL_RANK"),
        node_rank=_int(env, "GROUP_RANK", _int(env, "SLURM_NODEID", 0)),
        master_addr=env.get("MASTER_ADDR", "127.0.0.1"),
        master_port=_int(env, "MASTER_PORT", 29500),
        launcher="torchrun",
        job_id=env.get("SLURM_JOB_ID", ""),
        restart_count=_int(env, "SLURM_RESTART_COUNT", 0),
        hostname=env.get("SLURMD_NODENAME", "") or socket.gethostname(),
    )


def from_slurm(env: Mapping[str, str]) -> DistInfo:
    job_id = env.get("SLURM_JOB_ID", "")
    master = env.get("MASTER_ADDR") or first_host(env.get("SLURM_STEP_NODELIST") or env["SLURM_JOB_NODELIST"])
    return DistInfo(
        rank=_int(env, "SLURM_PROCID"),
        world_size=_int(env, "SLURM_STEP_NUM_TASKS", _int(env, "SLURM_NTASKS", 1)),
        local_rank=_int(env, "SLURM_LOCALID", 0),
        node_rank=_int(env, "SLURM_NODEID", 0),
        master_addr=master,
        master_port=_int(env, "MASTER_PORT", default_port(job_id)),
        launcher="srun",
        job_id=job_id,
        restart_count=_int(env, "SLURM_RESTART_COUNT", 0),
        hostname=env.get("SLURMD_NODENAME", "") or socket.gethostname(),
    )


def single(env: Mapping[str, str]) -> DistInfo:
    return DistInfo(
        rank=0,
        world_size=1,
        local_rank=0,
        node_rank=0,
        master_addr="127.0.0.1",
        master_port=0,
        launcher="single",
        job_id=env.get("SLURM_JOB_ID", ""),
        restart_count=_int(env, "SLURM_RESTART_COUNT", 0),
        hostname=socket.gethostname(),
    )


def from_mpi(env: Mapping[str, str], comm: Any) -> DistInfo:
    """Rank/size from an MPI communicator; local rank from a split by host; rank 0 picks the port.

    The host name is Slurm's node name when there is one: on the local cluster two slurmd "nodes"
    share one kernel hostname, and must still count as two hosts.
    """
    rank, size = comm.Get_rank(), comm.Get_size()
    host = env.get("SLURMD_NODENAME", "") or socket.gethostname()
    hosts = comm.allgather(host)
    ordered = list(dict.fromkeys(hosts))  # hosts in order of first rank
    local_rank = hosts[:rank].count(host)
    if rank == 0:
        addr = env.get("MASTER_ADDR") or host
        port = _int(env, "MASTER_PORT", 0) or free_port()
        rendezvous = (addr, port)
    else:
        rendezvous = None
    addr, port = comm.bcast(rendezvous, root=0)
    return DistInfo(
        rank=rank,
        world_size=size,
        local_rank=local_rank,
        node_rank=ordered.index(host),
        master_addr=addr,
        master_port=port,
        launcher="mpi",
        job_id=env.get("SLURM_JOB_ID", ""),
        restart_count=_int(env, "SLURM_RESTART_COUNT", 0),
        hostname=host,
    )


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        return int(sock.getsockname()[1])


def discover(env: Mapping[str, str] | None = None) -> DistInfo:
    """DistInfo for this process from its environment."""
    env = os.environ if env is None else env
    kind = detect(env)
    if kind == "torchrun":
        return from_torchrun(env)
    if kind == "srun":
        return from_slurm(env)
    if kind == "mpi":
        from mpi4py import MPI

        return from_mpi(env, MPI.COMM_WORLD)
    return single(env)


def init_process_group(dist_info: DistInfo, backend: str, timeout_s: int) -> None:
    """Create the default process group (a world of one too, so collectives and DCP work unchanged)."""
    import torch.distributed as dist

    # A dead peer must end the job (srun --kill-on-bad-exit) instead of hanging in NCCL forever.
    os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")
    options: dict[str, Any] = {"timeout": timedelta(seconds=timeout_s)}
    if backend == "nccl":
        import torch

        # The same local-rank binding as the strategy's device; NCCL then never guesses.
        options["device_id"] = torch.device("cuda", dist_info.local_rank % torch.cuda.device_count())
    if dist_info.world_size == 1:
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1, **options)
        return
    os.environ["MASTER_ADDR"] = dist_info.master_addr
    os.environ["MASTER_PORT"] = str(dist_info.master_port)
    dist.init_process_group(
        backend, init_method="env://", rank=dist_info.rank, world_size=dist_info.world_size, **options
    )
