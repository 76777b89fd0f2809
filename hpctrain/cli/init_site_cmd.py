"""`hpctrain init-site NAME`: write a site profile read off the live cluster, to review before use."""

from __future__ import annotations

import argparse
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
    from hpctrain import api
    from hpctrain.cli.view.user_files import refuse_overwrite, write_user_files

    target = None if args.output == "-" else Path(args.output or api.site_folder() / f"{args.name}.yaml")
    if target is not None:  # before the cluster is read: the profile (and a probe job) would be lost
        refuse_overwrite({target: None}, args.force)
    draft = api.draft_site(args.name, probe=not args.no_probe, timeout=args.timeout)
    if target is None:
        sys.stdout.write(draft.text)
        return 0
    write_user_files({target: draft.text.encode()}, force=True)  # refused above unless --force
    print(f"Wrote {target}; review it, then: hpctrain doctor --site {api.site_reference(args.name, target)}")
    return 0
