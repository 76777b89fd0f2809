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

    from hpctrain import api
    from hpctrain.cli.view.table import table

    report = api.doctor(args.site, args.partition, not args.no_job, args.tolerance, args.timeout)
    findings, bad = report.findings, report.bad_nodes
    if args.json:
        print(
            json.dumps(
                {
                    "site": report.site,
                    "ok": report.ok,
                    "bad_nodes": bad,
                    "findings": [asdict(f) for f in findings],
                },
                indent=2,
            )
        )
        return 0 if report.ok else 1
    scopes = list(dict.fromkeys(f.scope for f in findings))
    for scope in scopes:
        rows = [[f.check, f.status, f.detail] for f in findings if f.scope == scope]
        print(f"== {scope}")
        print(table(rows, ["CHECK", "STATUS", "DETAIL"]))
    if bad:
        print(f"\nBroken or slow nodes: {','.join(bad)}; until fixed, submit with --exclude={','.join(bad)}")
    print(f"\ndoctor: {'PASS' if report.ok else 'FAIL'} (site {report.site})")
    return 0 if report.ok else 1
