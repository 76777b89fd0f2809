"""`hpctrain explain`: the fields of job specs, site profiles and run-directory files, from their docs."""

from __future__ import annotations

import argparse
import textwrap
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hpctrain.spec import FieldDoc

WHAT = ("job", "site", "files")
WIDTH = 100
"""Columns of the widest line explain prints."""


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


def rows_of(what: str, field: str) -> list[FieldDoc]:
    """The documented fields of `what`, only those under `field` when it is given."""
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
    return [r for r in docs if not field or r.name == field or r.name.startswith(field + ".")]


def entry(row: FieldDoc) -> str:
    """A field as explain prints it: name, type and default on the first line, the meaning indented
    below, every line at most WIDTH columns."""
    from hpctrain.spec.docs import REQUIRED

    default = {"": "", REQUIRED: f", {REQUIRED}"}.get(row.default, f", default {row.default}")
    facts = f"{row.type}{default}"
    head = textwrap.wrap(f"{row.name} ({facts})", WIDTH, subsequent_indent="    ", break_on_hyphens=False)
    body = textwrap.wrap(row.description, WIDTH, initial_indent="    ", subsequent_indent="    ")
    return "\n".join(head + body)


def run(args: argparse.Namespace) -> int:
    from hpctrain.errors import SpecError

    rows = rows_of(args.what, args.field)
    if not rows:
        if args.what == "files":
            from hpctrain.rundir import file_structs

            missing, listed = "file or field", f"the files: {', '.join(file_structs())}"
        else:
            missing, listed = "field", f"`hpctrain explain {args.what}` lists them"
        raise SpecError(f"explain {args.what}: no {missing} {args.field!r}; {listed}")
    print("\n".join(entry(row) for row in rows))
    return 0
