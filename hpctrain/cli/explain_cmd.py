"""`hpctrain explain`: the fields of job specs and site profiles, from the typed spec's own docs."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("what", nargs="?", default="job", choices=("job", "site"), help="job or site")
    parser.add_argument("field", nargs="?", default="", help="Only fields starting with this, e.g. train.")


def run(args: argparse.Namespace) -> int:
    from hpctrain import spec
    from hpctrain.cli.common import table

    kind = spec.JobSpec if args.what == "job" else spec.Site
    rows = [list(r) for r in spec.field_docs(kind) if r[0].startswith(args.field)]
    print(table(rows, ["FIELD", "TYPE", "MEANING"]))
    return 0
