"""Build a site profile from ClusterFacts and a probe of one compute node's network (init-site)."""

from __future__ import annotations

import re
from typing import Any

from hpctrain.errors import BackendError, HpctrainError
from hpctrain.scheduler.slurm.facts import (
    ClusterFacts,
    expedited_requeue,
    is_number,
    memory_text_mb,
    parse_gres,
    slurm_time,
)
from hpctrain.scheduler.slurm.probes import probe_node

# The probe runs on a compute node: IB/RoCE devices, their port state and link layer, and addresses.
PROBE = (
    'for p in /sys/class/infiniband/*/ports/*; do [ -e "$p/state" ] && '
    'echo "ib $(basename "$(dirname "$(dirname "$p")")") $(basename "$p") '
    '$(cut -d: -f2 "$p/state" | tr -d " ") $(cat "$p/link_layer" 2>/dev/null)"; done; '
    "command -v ibv_devinfo >/dev/null && echo ibv_devinfo yes; "
    "ip -o -4 addr show 2>/dev/null | awk '{print \"addr\", $2, $4}'"
)
LOOPBACK = {"127.0.0.1", "localhost", "::1"}


def partition_profile(facts: ClusterFacts, name: str, gres_name: str) -> dict[str, Any]:
    """One partition: the smallest node decides what a job may ask per node."""
    record = facts.partitions[name]
    names = [n for n in facts.partition_nodes(name) if n in facts.nodes]
    nodes = [facts.nodes[n] for n in names]
    if not nodes:
        raise HpctrainError(f"partition {name}: scontrol lists none of its nodes")
    gres = [parse_gres(n.get("Gres", ""), gres_name) for n in nodes]
    types = {kind for _, kind in gres}
    profile: dict[str, Any] = {}
    if record.get("Default") == "YES":
        profile["default"] = True
    profile["nodes"] = len(nodes)
    profile["gpus_per_node"] = min(min(count for count, _ in gres), partition_gpu_limit(record, gres_name))
    if len(types) == 1 and None not in types and profile["gpus_per_node"]:
        profile["gpu_type"] = types.pop()
    profile["cpus_per_node"] = min(int(n["CPUTot"]) if is_number(n.get("CPUTot", "")) else 1 for n in nodes)
    profile["mem_per_node"] = f"{min(memory_text_mb(n.get('RealMemory', '')) for n in nodes)}M"
    max_time = slurm_time(record.get("MaxTime", ""))
    profile["max_time"] = max_time or "365-00:00:00"
    max_nodes = record.get("MaxNodes", "UNLIMITED")
    if is_number(max_nodes) and int(max_nodes) < len(nodes):
        profile["max_nodes"] = int(max_nodes)
    # Jobs may then name only these nodes in resources.exclude / nodelist (a typo is refused at submit).
    profile["node_names"] = names
    return profile


def partition_gpu_limit(record: dict[str, str], gres_name: str) -> int:
    """The most GPUs per node the partition itself allows: a partition whose TRES leaves out
    `gres/NAME` gives its jobs none, whatever its nodes hold; no limit otherwise."""
    tres = record.get("TRES", "")
    if tres and f"gres/{gres_name}" not in {item.split("=")[0] for item in tres.split(",")}:
        return 0
    return 1 << 30


def shared_gpu_nodes(partitions: dict[str, dict[str, Any]]) -> list[str]:
    """Comment lines for partitions whose GPU nodes other partitions share: Slurm lets jobs of each
    use the GPUs, so a partition meant for CPU jobs needs `gpus_per_node: 0` by hand."""
    notes = []
    gpu_partitions = [p for p, profile in partitions.items() if profile["gpus_per_node"]]
    for index, first in enumerate(gpu_partitions):
        for second in gpu_partitions[index + 1 :]:
            shared = set(partitions[first]["node_names"]) & set(partitions[second]["node_names"])
            if shared:
                notes.append(
                    f"Partitions {first} and {second} share {len(shared)} GPU node(s): if one is meant "
                    "for CPU jobs, set its gpus_per_node to 0."
                )
    return notes


def choose_mpi(facts: ClusterFacts) -> str:
    """The cluster's MpiDefault when it is one hpctrain knows; else pmi2 (MPICH, Open MPI <= 4), else pmix."""
    default = facts.config.get("MpiDefault", "none")
    if default in ("pmi2", "pmix"):
        return default
    for plugin in ("pmi2", "pmix"):
        if plugin in facts.mpi_plugins:
            return plugin
    return "none"


def probe_network(partition: str, timeout: float = 120) -> list[str]:
    """The PROBE's lines from one node of `partition` (a one-minute step)."""
    return probe_node(partition, PROBE, "hpctrain-init-site", timeout)


def network_profile(facts: ClusterFacts, probe: list[str] | None) -> tuple[dict[str, Any], list[str]]:
    """(network section, comment lines with the NCCL settings to review)."""
    addresses = {n.get("NodeAddr", "") for n in facts.nodes.values()}
    ports = [line.split()[1:] for line in probe or [] if line.startswith("ib ") and len(line.split()) >= 4]
    notes: list[str] = []
    if ports:
        active = [p for p in ports if p[2].upper() == "ACTIVE"]
        roce = all(len(p) > 3 and p[3].lower() == "ethernet" for p in ports)
        hcas = ",".join(f"{p[0]}:{p[1]}" for p in active)
        network: dict[str, Any] = {"interconnect": "roce" if roce else "infiniband"}
        notes += [
            f"Probe saw {len(ports)} {'RoCE' if roce else 'InfiniBand'} port(s), "
            f"{len(active)} active: {hcas}.",
            "Suggested NCCL settings (review, then move them into nccl_env):",
            f'  NCCL_IB_HCA: "={hcas}"   # leave out storage-only HCAs',
            "  NCCL_NET_GDR_LEVEL: PHB   # GPUDirect RDMA: needs nvidia_peermem loaded on the nodes",
        ]
        if roce:
            notes.append("  NCCL_IB_GID_INDEX: 3   # RoCE v2 GID; check with show_gids")
        return network, notes
    if addresses and addresses <= LOOPBACK:
        return {"interconnect": "loopback", "gloo_socket_ifname": "lo"}, notes
    interfaces = [line.split()[1] for line in probe or [] if line.startswith("addr ") and " lo " not in line]
    network = {"interconnect": "ethernet"}
    if interfaces:
        network["gloo_socket_ifname"] = interfaces[0]
        notes.append(f'Suggested: NCCL_SOCKET_IFNAME: "{interfaces[0]}" (no InfiniBand/RoCE seen)')
    elif probe is None:
        notes.append("No probe job ran: interconnect unknown, ethernet assumed.")
    return network, notes


def build_site(
    name: str, facts: ClusterFacts, probe: list[str] | None, runtimes: dict[str, str] | None = None
) -> tuple[dict[str, Any], list[str]]:
    """(site profile data, comment lines) from what the cluster says; `runtimes` are the container
    runtimes found (hpctrain.site.containers.detect)."""
    gres_types = facts.config.get("GresTypes", "")
    gres_name = (
        "gpu" if "gpu" in gres_types or not gres_types or gres_types == "(null)" else gres_types.split(",")[0]
    )
    default = facts.default_partition()
    order = sorted(facts.partitions, key=lambda p: p != default)
    partitions = {p: partition_profile(facts, p, gres_name) for p in order if re.match(r"^[\w.\-]+$", p)}
    network, notes = network_profile(facts, probe)
    notes += shared_gpu_nodes(partitions)
    data: dict[str, Any] = {
        "name": name,
        "description": f"Slurm cluster {facts.config.get('ClusterName', '?')}, read by hpctrain init-site.",
        "partitions": partitions,
        "gres_name": gres_name,
        "network": network,
        "mpi": choose_mpi(facts),
        "heterogeneous_jobs": True,
        "env": {"OMP_NUM_THREADS": 1},
    }
    if runtimes:
        data["container_runtimes"] = list(runtimes)
        notes += [f"Container runtime {runtime}: {evidence}." for runtime, evidence in runtimes.items()]
    if facts.config.get("JobRequeue", "1") == "1":
        data["preemption"] = {"signal": "USR1", "lead_time": 60, "requeue": True}
    if expedited_requeue(facts.config):
        data["expedited_requeue"] = True
        notes.append("Expedited requeue: the cluster takes --requeue=expedite (enable_expedited_requeue).")
    version = facts.config.get("SLURM_VERSION", "?")
    notes = [
        f"Slurm {version}; MaxArraySize {facts.config.get('MaxArraySize', '?')}; "
        f"MPI plugins of srun: {', '.join(facts.mpi_plugins) or 'unknown'} "
        f"(MpiDefault {facts.config.get('MpiDefault', '?')}).",
        (
            f"Accounts you can charge: {', '.join(facts.accounts) or 'none'}; "
            f"QOS: {', '.join(facts.qos) or 'none'}."
            if facts.accounting
            else "No accounting (slurmdbd): sacct, accounts and QOS are not available."
        ),
        *notes,
    ]
    return data, notes


def render_yaml(data: dict[str, Any], notes: list[str]) -> str:
    import yaml

    header = ["# Written by `hpctrain init-site` from the live cluster: review before use.", "#"]
    header += [f"# {line}" for line in notes]
    return "\n".join(header) + "\n" + yaml.safe_dump(data, sort_keys=False, default_flow_style=False)


def probe_or_none(facts: ClusterFacts, timeout: float) -> tuple[list[str] | None, str]:
    partition = facts.default_partition() or next(iter(facts.partitions), None)
    if partition is None:
        return None, "no partition to probe"
    try:
        return probe_network(partition, timeout), ""
    except BackendError as err:
        return None, str(err)
