#!/usr/bin/env python3
"""Write the JobSpec and Site reference tables into docs/ from hpctrain.spec.field_docs (--check: verify)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import NamedTuple

import msgspec

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hpctrain.spec import JobSpec, Site, field_docs  # noqa: E402 - needs ROOT on sys.path

BEGIN = "<!-- BEGIN GENERATED: {name} fields, by scripts/gen-spec-docs.py from hpctrain/spec/ -->"
END = "<!-- END GENERATED: {name} fields -->"


class Target(NamedTuple):
    """A Markdown file holding one generated table between markers, and the text a new file starts with."""

    path: Path
    kind: type[msgspec.Struct]
    preamble: str


TARGETS = [
    Target(
        ROOT / "docs" / "job-spec.md",
        JobSpec,
        "# Job spec reference\n\n"
        "Every field of a job YAML file (`jobs/*.yaml`), as `hpctrain.spec.JobSpec` defines and checks it.\n"
        "Dotted names are nested keys (`resources.nodes` is `nodes:` under `resources:`); any field can\n"
        "also be set on the command line with `--set dotted.name=value`. `hpctrain explain` prints the\n"
        "same text.\n",
    ),
    Target(
        ROOT / "docs" / "site-config.md",
        Site,
        "# Site profile reference\n",
    ),
]


def cell(text: str) -> str:
    """Table-safe text: GitHub tables split on every unescaped '|', even inside code spans."""
    return text.replace("|", r"\|").replace("\n", " ")


def table(kind: type[msgspec.Struct]) -> str:
    """The Markdown reference table of a spec type, one row per (nested) field."""
    rows = field_docs(kind)
    # Fields under a dict of structs (Site.partitions) are keyed by a name the user picks.
    names = [name for name, _, _ in rows]
    keyed = {
        name
        for name, type_name, _ in rows
        if type_name.startswith("dict[") and any(n.startswith(name + ".") for n in names)
    }
    lines = ["| Field | Type | Description |", "| --- | --- | --- |"]
    for name, type_name, description in rows:
        parent = next((k for k in keyed if name.startswith(k + ".")), None)
        shown = f"{parent}.<name>{name[len(parent) :]}" if parent else name
        lines.append(f"| `{cell(shown)}` | `{cell(type_name)}` | {cell(description)} |")
    return "\n".join(lines) + "\n"


def generated(target: Target) -> str:
    name = target.kind.__name__
    return f"{BEGIN.format(name=name)}\n\n{table(target.kind)}\n{END.format(name=name)}\n"


def updated(target: Target, current: str | None) -> str:
    """The file's text with its generated section replaced (or appended when it has none yet)."""
    name = target.kind.__name__
    section = generated(target)
    if current is None:
        return f"{target.preamble}\n{section}"
    begin, end = BEGIN.format(name=name), END.format(name=name)
    start, stop = current.find(begin), current.find(end)
    if start < 0 or stop < start:
        return current.rstrip("\n") + "\n\n" + section
    rest = current[stop + len(end) :]
    return current[:start] + section + rest.removeprefix("\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a file is stale")
    args = parser.parse_args(argv)
    stale = []
    for target in TARGETS:
        current = target.path.read_text(encoding="utf-8") if target.path.exists() else None
        wanted = updated(target, current)
        if current == wanted:
            continue
        stale.append(target.path.relative_to(ROOT))
        if not args.check:
            target.path.parent.mkdir(parents=True, exist_ok=True)
            target.path.write_text(wanted, encoding="utf-8")
    if args.check:
        for path in stale:
            print(f"{path} is stale: run python scripts/gen-spec-docs.py", file=sys.stderr)
        return 1 if stale else 0
    for target in TARGETS:
        print(f"## {target.kind.__name__}\n\n{table(target.kind)}")
    for path in stale:
        print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
