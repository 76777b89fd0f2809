"""`hpctrain explain`: the fields of job specs and site profiles, from the typed spec's own docs."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("what", nargs="?", default="job", choices=("job", "site"), help="job or site")
    parser.add_argument("field", nargs="?", default="", help="Only fields starting with this, e.g. train.")


def run(args: argparse.Namespace) -> int:
    from hpctrain import spec
    from hpctrain.cli.common import table
    from hpctrain.errors import SpecError

    kind = spec.JobSpec if args.what == "job" else spec.Site
    field = args.field.rstrip(".")
    rows = [
        list(r) for r in spec.field_docs(kind) if not field or r[0] == field or r[0].startswith(field + ".")
    ]
    if not rows:
        raise SpecError(
            f"explain {args.what}: no field {args.field!r}; `hpctrain explain {args.what}` lists them"
        )
    print(table(rows, ["FIELD", "TYPE", "MEANING"]))
    return 0
