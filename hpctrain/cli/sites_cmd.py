"""`hpctrain sites`: every site profile `--site NAME` can reach, and where each one comes from."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="Machine-readable output.")
    parser.add_argument("--names", action="store_true", help="Only the names (for shell completion).")


def run(args: argparse.Namespace) -> int:
    import msgspec

    from hpctrain import api
    from hpctrain.cli.view.table import print_json, table

    entries = api.sites(describe=not args.names)
    if args.names:
        print("\n".join(sorted({e.name for e in entries})))
        return 0
    if args.json:
        print_json([msgspec.structs.asdict(e) for e in entries])
        return 0
    rows = [
        [e.name + (" (shadowed)" if e.shadowed else ""), e.source, e.path, e.description] for e in entries
    ]
    print(table(rows, ["NAME", "FROM", "PATH", "DESCRIPTION"]))
    print("\nSearch order: " + ", ".join(f"{source} ({folder})" for source, folder in api.site_search_path()))
    return 0
