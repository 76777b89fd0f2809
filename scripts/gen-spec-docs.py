#!/usr/bin/env python3
"""Write the field reference tables into docs/ from the structs' field docs (--check: verify).

The job spec and the site profile (hpctrain/spec/), and every file of the run directory (hpctrain/rundir/).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import NamedTuple

import msgspec

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hpctrain import rundir  # noqa: E402 - needs ROOT on sys.path
from hpctrain.spec import JobSpec, Site, field_docs  # noqa: E402
from scripts.docgen_check import checking, read, sync, with_section  # noqa: E402

SCRIPT = "gen-spec-docs.py"


class Target(NamedTuple):
    """A Markdown file holding generated tables between markers, and the text a new file starts with.

    One kind: its table alone. Several: a heading, the struct's docstring and its table, for each.
    """

    path: Path
    kinds: tuple[type[msgspec.Struct], ...]
    preamble: str
    name: str = ""
    source: str = "hpctrain/spec/"
    defaults: bool = True
    """A Default column ("required" for a field that must be given); a file's reference has none."""

    @property
    def section(self) -> str:
        return self.name or self.kinds[0].__name__


TARGETS = [
    Target(
        ROOT / "docs" / "job-spec.md",
        (JobSpec,),
        "# Job spec reference\n\n"
        "Every field of a job YAML file (`jobs/*.yaml`), as `hpctrain.spec.JobSpec` defines and checks it.\n"
        "Dotted names are nested keys (`resources.nodes` is `nodes:` under `resources:`); any field can\n"
        "also be set on the command line with `--set dotted.name=value`. `hpctrain explain` prints the\n"
        "same text.\n",
    ),
    Target(
        ROOT / "docs" / "site-config.md",
        (Site,),
        "# Site profile reference\n",
    ),
    Target(
        ROOT / "docs" / "run-directory.md",
        rundir.file_struct_kinds(),
        "# The run directory\n",
        name="run-directory file",
        source="hpctrain/rundir/",
        defaults=False,
    ),
]


def cell(text: str) -> str:
    """Table-safe text: GitHub tables split on every unescaped '|', even inside code spans."""
    return text.replace("|", r"\|").replace("\n", " ")


def table(kind: type[msgspec.Struct], defaults: bool = True) -> str:
    """The Markdown reference table of a spec type, one row per (nested) field."""
    rows = field_docs(kind)
    # Fields under a dict of structs (Site.partitions) are keyed by a name the user picks.
    names = [row.name for row in rows]
    keyed = {
        row.name
        for row in rows
        if row.type.startswith("dict[") and any(n.startswith(row.name + ".") for n in names)
    }
    columns = ["Field", "Type", *(["Default"] if defaults else []), "Description"]
    lines = ["| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)]
    for row in rows:
        parent = next((k for k in keyed if row.name.startswith(k + ".")), None)
        shown = f"{parent}.<name>{row.name[len(parent) :]}" if parent else row.name
        default = [f"`{cell(row.default)}`" if row.default else ""] if defaults else []
        cells = [f"`{cell(shown)}`", f"`{cell(row.type)}`", *default, cell(row.description)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def tables(target: Target) -> str:
    if len(target.kinds) == 1:
        return table(target.kinds[0], target.defaults)
    parts = []
    for kind in target.kinds:
        summary = " ".join((kind.__doc__ or "").split())
        files = ", ".join(f"`{name}`" for name, kinds in rundir.file_structs().items() if kind in kinds)
        heading = f"### {kind.__name__}{f' ({files})' if files else ''}"
        parts.append(f"{heading}\n\n{summary}\n\n{table(kind, target.defaults)}")
    return "\n".join(parts)


def updated(target: Target, current: str | None) -> str:
    """The file's text with its generated section replaced (or appended when it has none yet)."""
    name = f"{target.section} fields"
    return with_section(current or target.preamble, name, SCRIPT, target.source, tables(target))


def main(argv: list[str] | None = None) -> int:
    check = checking(__doc__, argv)
    code = sync({target.path: updated(target, read(target.path)) for target in TARGETS}, SCRIPT, check)
    if not check:
        for target in TARGETS:
            print(f"## {target.section}\n\n{tables(target)}")
    return code


if __name__ == "__main__":
    sys.exit(main())
