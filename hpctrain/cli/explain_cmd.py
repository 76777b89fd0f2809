"""`hpctrain explain`: the fields of job specs, site profiles and run-directory files, from their docs."""

from __future__ import annotations

import argparse

WHAT = ("job", "site", "files")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "what",
        nargs="?",
        default="job",
        choices=WHAT,
        help="job, site, or files (what a run directory's JSON files hold)",
    )
    parser.add_argument(
        "field",
        nargs="?",
        default="",
        help="Only fields starting with this, e.g. train. (files: a file such as result.json, or Result.)",
    )


def rows_of(what: str, field: str) -> list[list[str]]:
    """(field, type, meaning) rows of `what`, only those under `field` when it is given."""
    from hpctrain import rundir, spec

    if what == "files":
        structs = rundir.file_structs()
        if field in structs:
            kinds, field = structs[field], ""
        else:
            kinds = rundir.file_struct_kinds()
        docs = [row for kind in kinds for row in spec.field_docs(kind, kind.__name__ + ".")]
    else:
        docs = spec.field_docs(spec.JobSpec if what == "job" else spec.Site)
    field = field.rstrip(".")
    return [list(r) for r in docs if not field or r[0] == field or r[0].startswith(field + ".")]


def run(args: argparse.Namespace) -> int:
    from hpctrain.cli.view.table import table
    from hpctrain.errors import SpecError

    rows = rows_of(args.what, args.field)
    if not rows:
        if args.what == "files":
            from hpctrain.rundir import file_structs

            missing, listed = "file or field", f"the files: {', '.join(file_structs())}"
        else:
            missing, listed = "field", f"`hpctrain explain {args.what}` lists them"
        raise SpecError(f"explain {args.what}: no {missing} {args.field!r}; {listed}")
    print(table(rows, ["FIELD", "TYPE", "MEANING"]))
    return 0
