"""`hpctrain doctor --site SITE`: the site profile against the live cluster, then a preflight job."""

from __future__ import annotations

import argparse
import json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--site", required=True, help="Site profile: a name (see `hpctrain sites`) or a path."
    )
    parser.add_argument(
        "--partition", help="Partition whose nodes the preflight job checks (default: the site's)."
    )
    parser.add_argument("--no-job", action="store_true", help="Login-side checks only; no preflight job.")
    parser.add_argument(
        "--tolerance", type=float, default=0.5, help="A node this far under the median fails."
    )
    parser.add_argument("--timeout", type=float, default=180, help="Seconds to wait for the preflight job.")
    parser.add_argument("--json", action="store_true", help="Machine-readable output.")


def run(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from hpctrain import spec
    from hpctrain.cli.view.table import table
    from hpctrain.scheduler.slurm.facts import ClusterFacts
    from hpctrain.site import containers, doctor
    from hpctrain.site.lookup import locate

    site = spec.load_site(locate(args.site))
    partition, _ = site.partition(args.partition)
    facts = ClusterFacts.read()
    findings = doctor.accounting_findings(facts) + doctor.node_findings(site, facts)
    findings += doctor.container_findings(site, containers.detect(facts))
    if not args.no_job and partition in facts.partitions:
        nodes = doctor.healthy_nodes(findings, facts.partition_nodes(partition))
        report = doctor.run_preflight(
            site, facts, partition, nodes, doctor.doctor_home(), args.tolerance, args.timeout
        )
        findings += doctor.preflight_findings(site, report, nodes)
    bad = sorted({f.scope for f in findings if f.status == "FAIL" and f.scope in facts.nodes})
    failed = any(f.status == "FAIL" for f in findings)
    if args.json:
        print(
            json.dumps(
                {
                    "site": site.name,
                    "ok": not failed,
                    "bad_nodes": bad,
                    "findings": [asdict(f) for f in findings],
                },
                indent=2,
            )
        )
        return 1 if failed else 0
    scopes = list(dict.fromkeys(f.scope for f in findings))
    for scope in scopes:
        rows = [[f.check, f.status, f.detail] for f in findings if f.scope == scope]
        print(f"== {scope}")
        print(table(rows, ["CHECK", "STATUS", "DETAIL"]))
    if bad:
        print(f"\nBroken or slow nodes: {','.join(bad)}; until fixed, submit with --exclude={','.join(bad)}")
    print(f"\ndoctor: {'FAIL' if failed else 'PASS'} (site {site.name})")
    return 1 if failed else 0
