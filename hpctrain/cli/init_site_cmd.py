"""`hpctrain init-site NAME`: write a site profile read off the live cluster, to review before use."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", help="Site name (the file is NAME.yaml).")
    parser.add_argument(
        "-o",
        "--output",
        help="Where to write it: a file, or - for stdout (default: ~/.config/hpctrain/sites/).",
    )
    parser.add_argument("--force", action="store_true", help="Overwrite an existing file.")
    parser.add_argument(
        "--no-probe", action="store_true", help="Skip the network probe job on a compute node."
    )
    parser.add_argument("--timeout", type=float, default=120, help="Seconds to wait for the probe job.")


def run(args: argparse.Namespace) -> int:
    from hpctrain import spec
    from hpctrain.errors import SpecError
    from hpctrain.scheduler.slurm.facts import ClusterFacts
    from hpctrain.site.builder import build_site, probe_or_none, render_yaml
    from hpctrain.site.lookup import user_folder

    if not re.match(spec.NAME, args.name):
        raise SpecError(f"init-site: {args.name!r} is not a site name (letters, digits, . _ -)")
    target = None if args.output == "-" else Path(args.output or user_folder() / f"{args.name}.yaml")
    if target is not None and target.exists() and not args.force:
        raise SpecError(f"{target} exists; pass --force to overwrite it")
    facts = ClusterFacts.read()
    probe, why = (None, "--no-probe") if args.no_probe else probe_or_none(facts, args.timeout)
    data, notes = build_site(args.name, facts, probe)
    if probe is None:
        notes.append(f"Network probe job did not run ({why}).")
    spec.decode(spec.Site, data, f"site {args.name} read from the cluster")  # what we write must load
    text = render_yaml(data, notes)
    if target is None:
        sys.stdout.write(text)
        return 0
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")
    print(f"Wrote {target}; review it, then: hpctrain doctor --site {args.name}")
    return 0
