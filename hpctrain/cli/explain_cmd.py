"""`hpctrain explain`: the fields of job specs, site profiles and run-directory files, from their docs."""

from __future__ import annotations

import argparse
import textwrap
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hpctrain.api import FieldDoc

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


def entry(row: FieldDoc) -> str:
    """A field as explain prints it: name, type and default on the first line, the meaning indented
    below, every line at most WIDTH columns."""
    from hpctrain import api

    default = {"": "", api.REQUIRED: f", {api.REQUIRED}"}.get(row.default, f", default {row.default}")
    facts = f"{row.type}{default}"
    head = textwrap.wrap(f"{row.name} ({facts})", WIDTH, subsequent_indent="    ", break_on_hyphens=False)
    body = textwrap.wrap(row.description, WIDTH, initial_indent="    ", subsequent_indent="    ")
    return "\n".join(head + body)


def run(args: argparse.Namespace) -> int:
    from hpctrain import api

    print("\n".join(entry(row) for row in api.fields(args.what, args.field)))
    return 0
