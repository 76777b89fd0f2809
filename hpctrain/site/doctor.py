"""Doctor's checks: a site profile against the live cluster, then a preflight job over its nodes.

Every check gives a Finding (scope = `cluster`, a partition or a node; PASS/WARN/FAIL, or SKIP where
there is nothing to check; detail).
The preflight job is hpctrain.runtime.preflight run with one task per healthy node: the backend renders
it (templates/doctor.sh.j2) and launch.submission submits and records it, as it does a run.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass

from hpctrain.rundir import PreflightReport, RunDir, Unreadable
from hpctrain.scheduler import select_backend
from hpctrain.scheduler.base import Backend
from hpctrain.scheduler.render import DoctorJob
from hpctrain.scheduler.slurm.facts import (
    TESTED_SLURM,
    ClusterFacts,
    accounting_problem,
    expedited_requeue,
    is_number,
    memory_text_mb,
    parse_gres,
    slurm_time,
    tested_release,
)
from hpctrain.spec import Site
from hpctrain.spec.job import CONTAINER_RUNTIMES
from hpctrain.spec.slurm_values import memory_mb, time_minutes
from hpctrain.submission.submit_path import submit_doctor_job
from hpctrain.tracking.index import Index, RunRecord
from hpctrain.tracking.poll import ended, poll_and_record
from hpctrain.version import __version__

BAD_STATES = ("DOWN", "DRAIN", "FAIL", "NOT_RESPONDING", "INVAL", "UNKNOWN", "NO_RESPOND")


@dataclass
class Finding:
    scope: str
    check: str
    status: str  # PASS, WARN, FAIL, or SKIP (nothing to check: a runtime neither installed nor listed)
    detail: str


def node_findings(site: Site, facts: ClusterFacts) -> list[Finding]:
    """Partitions, limits and GRES of the profile against scontrol's view; node states."""
    found: list[Finding] = []
    seen: set[str] = set()
    for name, part in site.partitions.items():
        if name not in facts.partitions:
            found.append(
                Finding(
                    name,
                    "partition",
                    "FAIL",
                    f"not a partition of the cluster ({', '.join(facts.partitions)})",
                )
            )
            continue
        nodes = facts.partition_nodes(name)
        status = "PASS" if part.nodes <= len(nodes) else "FAIL"
        found.append(Finding(name, "nodes", status, f"profile {part.nodes}, cluster {len(nodes)}"))
        limit = slurm_time(facts.partitions[name].get("MaxTime", ""))
        too_long = limit is not None and time_minutes(part.max_time) > time_minutes(limit)
        found.append(
            Finding(
                name,
                "max_time",
                "FAIL" if too_long else "PASS",
                f"profile {part.max_time}, cluster {limit or 'UNLIMITED'}",
            )
        )
        for node in nodes:
            found += _one_node(site, name, node, facts.nodes.get(node, {}), node not in seen)
            seen.add(node)
    return found


def _one_node(site: Site, partition: str, node: str, record: dict[str, str], state: bool) -> list[Finding]:
    part = site.partitions[partition]
    if not record:
        return [Finding(node, "state", "FAIL", "scontrol does not know this node")]
    found = [node_state(node, record)] if state else []
    gpus, kind = parse_gres(record.get("Gres", ""), site.gres_name)
    short = part.gpus_per_node > gpus or (part.gpu_type and part.gpu_type != kind and part.gpus_per_node)
    found.append(
        Finding(
            node,
            f"gpus ({partition})",
            "FAIL" if short else "PASS",
            f"profile {part.gpus_per_node} {part.gpu_type + ' ' if part.gpu_type else ''}GPUs, "
            f"node Gres={record.get('Gres', '')}",
        )
    )
    cpus = int(record.get("CPUTot", "0")) if is_number(record.get("CPUTot", "")) else 0
    found.append(
        Finding(
            node,
            f"cpus ({partition})",
            "FAIL" if part.cpus_per_node > cpus else "PASS",
            f"profile {part.cpus_per_node}, node {cpus}",
        )
    )
    mem = memory_text_mb(record.get("RealMemory", "0") or "0")
    found.append(
        Finding(
            node,
            f"mem ({partition})",
            "FAIL" if memory_mb(part.mem_per_node) > mem else "PASS",
            f"profile {part.mem_per_node}, node {mem}M",
        )
    )
    return found


def node_state(node: str, record: dict[str, str]) -> Finding:
    state = record.get("State", "?")
    bad = [s for s in BAD_STATES if s in state.upper()] or (["NOT_RESPONDING"] if state.endswith("*") else [])
    return Finding(node, "state", "FAIL" if bad else "PASS", f"{state} {record.get('Reason', '')}".strip())


def container_findings(site: Site, found: dict[str, str]) -> list[Finding]:
    """Each container runtime: found on the cluster (hpctrain.site.containers.detect) and listed in
    the profile's container_runtimes, or not; a listed runtime the cluster lacks is a FAIL."""
    findings = []
    for runtime in CONTAINER_RUNTIMES:
        listed = runtime in site.container_runtimes
        if runtime in found:
            status = "PASS" if listed else "WARN"
            detail = found[runtime] + ("" if listed else "; add it to the profile's container_runtimes")
        else:
            status = "FAIL" if listed else "SKIP"
            detail = "listed in container_runtimes, not found" if listed else "not installed"
        findings.append(Finding("cluster", f"container {runtime}", status, detail))
    return findings


def version_finding(facts: ClusterFacts) -> Finding:
    """The cluster's Slurm version, and whether hpctrain's tests ran on its release."""
    version = facts.config.get("SLURM_VERSION", "") or "unknown"
    release, tested = tested_release(version)
    untested = f"not tested on it (tested: {', '.join(TESTED_SLURM)})"
    detail = f"tested on {release} ({tested})" if tested else untested
    return Finding("cluster", "slurm", "PASS" if tested else "WARN", f"Slurm {version}; hpctrain {detail}")


def requeue_finding(site: Site, facts: ClusterFacts) -> Finding:
    """Whether the profile's expedited_requeue matches what the cluster takes: asked for where the
    cluster refuses it, every submission fails."""
    takes = expedited_requeue(facts.config)
    if site.expedited_requeue and not takes:
        detail = "expedited_requeue is set, but the cluster refuses --requeue=expedite: set it false"
        return Finding("cluster", "requeue", "FAIL", detail)
    if takes and not site.expedited_requeue:
        detail = "the cluster takes --requeue=expedite: set expedited_requeue: true to use it"
        return Finding("cluster", "requeue", "WARN", detail)
    return Finding("cluster", "requeue", "PASS", "expedited" if takes else "plain (Slurm's requeue hold)")


def accounting_findings(facts: ClusterFacts) -> list[Finding]:
    problem = accounting_problem()
    found = [
        version_finding(facts),
        Finding(
            "cluster",
            "accounting",
            "WARN" if problem else "PASS",
            f"no accounting: {problem[:80]}" if problem else "works",
        ),
    ]
    if facts.accounting:
        found.append(
            Finding(
                "cluster",
                "accounts",
                "PASS" if facts.accounts else "WARN",
                f"accounts {', '.join(facts.accounts) or 'none'}; QOS {', '.join(facts.qos) or 'none'}",
            )
        )
    return found


def run_preflight(
    site: Site,
    facts: ClusterFacts,
    partition: str,
    nodes: list[str],
    tolerance: float,
    timeout: float,
    backend: Backend | None = None,
    index: Index | None = None,
) -> PreflightReport | str:
    """Submit the preflight job (the site's backend: pyslurm where it has it) and wait for it: its
    preflight.json, or why there is none (one line)."""
    if not nodes:
        return "no node to run the preflight job on"
    part_gpus = site.partitions[partition].gpus_per_node
    gpus = min([part_gpus, *(parse_gres(facts.nodes[n].get("Gres", ""), site.gres_name)[0] for n in nodes)])
    backend = backend or select_backend()
    index = index or Index()
    done = submit_doctor_job(DoctorJob(site, partition, nodes, gpus, tolerance), backend, index)
    run = RunDir(done.run.run_dir)
    if done.error is not None or done.run.job_id is None:
        return f"the preflight job was not submitted: {done.error}"
    job_id = done.run.job_id
    if not waited(done.run, index, timeout):
        backend.cancel([job_id])
        return f"preflight job {job_id} did not finish within {timeout:.0f} s"
    report = run.read_preflight()
    if report is None:
        return f"preflight job {job_id} ended without a report (its log: {run.batch_log})"
    return str(report) if isinstance(report, Unreadable) else report


def waited(run: RunRecord, index: Index, timeout: float, longest_delay: float = 2.0) -> bool:
    """Poll the run through its backend (states recorded in the index) until it ends: False when
    `timeout` seconds pass first. The delay between polls grows from 0.25 s to `longest_delay`."""
    deadline = time.monotonic() + timeout
    delay = 0.25
    while True:
        poll_and_record(index, [run])
        if ended(run):
            return True
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(delay, left))
        delay = min(longest_delay, delay * 2)


def preflight_findings(site: Site, report: PreflightReport | str, nodes: list[str]) -> list[Finding]:
    if isinstance(report, str):
        return [Finding(n, "preflight", "FAIL", report) for n in nodes]
    found: list[Finding] = []
    login = sys.version.split()[0]
    for fact in report.facts:
        node = fact.node
        same = fact.python == login and fact.hpctrain == __version__
        found.append(
            Finding(
                node,
                "versions",
                "PASS" if same else "FAIL",
                f"python {fact.python} hpctrain {fact.hpctrain} (login: {login}, {__version__})",
            )
        )
        gpu_status = (
            "FAIL"
            if any("GPUs allocated" in p for p in fact.problems)
            else "WARN"
            if fact.warnings
            else "PASS"
        )
        found.append(
            Finding(
                node,
                "gpus visible",
                gpu_status,
                f"{fact.gpus_seen}/{fact.gpus_asked} via {fact.gpu_source}",
            )
        )
        health = [p for p in fact.problems if p.startswith(("GPU ", "nvidia-smi"))]
        checked = "no ECC/clock problem" if fact.gpu_source == "torch.cuda" else "not checked (no CUDA)"
        found.append(Finding(node, "gpu health", "FAIL" if health else "PASS", "; ".join(health) or checked))
        ib = [p for p in fact.problems if p.startswith("IB")]
        found.append(
            Finding(
                node,
                "ib ports",
                "FAIL" if ib else "PASS",
                "; ".join(ib) or ", ".join(fact.ib_ports) or "no IB devices",
            )
        )
        verdict = report.nodes.get(node)
        slow = [p for p in verdict.problems if "all-reduce" in p] if verdict else []
        found.append(
            Finding(
                node,
                "node all-reduce",
                "FAIL" if slow else "PASS",
                slow[0] if slow else f"{fact.node_busbw_gbps:.3f} GB/s",
            )
        )
    expected = site.network.expected_busbw_gbps
    measured = report.busbw_gbps
    if expected is None:
        found.append(
            Finding(
                "cluster",
                "all-reduce",
                "PASS",
                f"{measured:.3f} GB/s over {report.ranks} ranks (site sets no expected_busbw_gbps)",
            )
        )
    else:
        low = measured < 0.5 * expected
        found.append(
            Finding(
                "cluster",
                "all-reduce",
                "FAIL" if low else "PASS",
                f"{measured:.3f} GB/s, site expects {expected} GB/s",
            )
        )
    return found


def healthy_nodes(findings: list[Finding], nodes: list[str]) -> list[str]:
    broken = {f.scope for f in findings if f.check == "state" and f.status == "FAIL"}
    return [n for n in nodes if n not in broken]
