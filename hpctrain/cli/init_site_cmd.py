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
    parser.add_argument(
        "--force", action="store_true", help="Overwrite an existing file that differs from the new profile."
    )
    parser.add_argument(
        "--no-probe", action="store_true", help="Skip the network probe job on a compute node."
    )
    parser.add_argument("--timeout", type=float, default=120, help="Seconds to wait for the probe job.")


def run(args: argparse.Namespace) -> int:
    from hpctrain import spec
    from hpctrain.cli.view.user_files import refuse_overwrite, write_user_files
    from hpctrain.errors import SpecError
    from hpctrain.scheduler.slurm.facts import ClusterFacts
    from hpctrain.site import containers
    from hpctrain.site.builder import build_site, probe_or_none, render_yaml
    from hpctrain.site.lookup import user_folder

    if not re.match(spec.NAME, args.name):
        raise SpecError(f"init-site: {args.name!r} is not a site name (letters, digits, . _ -)")
    target = None if args.output == "-" else Path(args.output or user_folder() / f"{args.name}.yaml")
    if target is not None:  # before the cluster is read: the profile (and a probe job) would be lost
        refuse_overwrite({target: None}, args.force)
    facts = ClusterFacts.read()
    probe, why = (None, "--no-probe") if args.no_probe else probe_or_none(facts, args.timeout)
    data, notes = build_site(args.name, facts, probe, containers.detect(facts))
    if probe is None:
        notes.append(f"Network probe job did not run ({why}).")
    spec.decode(spec.Site, data, f"site {args.name} read from the cluster")  # what we write must load
    text = render_yaml(data, notes)
    if target is None:
        sys.stdout.write(text)
        return 0
    write_user_files({target: text.encode()}, force=True)  # refused above unless --force
    print(f"Wrote {target}; review it, then: hpctrain doctor --site {site_argument(args.name, target)}")
    return 0


def site_argument(name: str, written: Path) -> str:
    """What `--site` must say to reach the profile just written: its name where the lookup finds
    that file by it, else its path."""
    import shlex

    from hpctrain.errors import SpecError
    from hpctrain.site.lookup import locate

    try:
        if locate(name).resolve() == written.resolve():
            return name
    except (SpecError, OSError):
        pass
    return shlex.quote(str(written))  # `--site` takes a path too
