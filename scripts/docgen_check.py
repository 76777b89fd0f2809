"""Shared by the docs generators (gen-spec-docs.py, gen-api-docs.py): generated sections and --check."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def with_section(current: str, name: str, script: str, source: str, body: str) -> str:
    """`current` with its generated section `name` replaced by `body` (appended when it has none yet).

    A section is found by its name alone: a moved source must not leave the old section behind.
    """
    begin = f"<!-- BEGIN GENERATED: {name}, by scripts/{script} from {source} -->"
    end = f"<!-- END GENERATED: {name} -->"
    section = f"{begin}\n\n{body}\n{end}\n"
    start, stop = current.find(f"<!-- BEGIN GENERATED: {name},"), current.find(end)
    if start < 0 or stop < start:
        return current.rstrip("\n") + "\n\n" + section
    return current[:start] + section + current[stop + len(end) :].removeprefix("\n")


def read(path: Path) -> str | None:
    """The file's text, or None when it does not exist yet."""
    return path.read_text(encoding="utf-8") if path.exists() else None


def checking(description: str | None, argv: list[str] | None) -> bool:
    """The generators' one command line: whether --check (write nothing, report stale files) was given."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a file is stale")
    return bool(parser.parse_args(argv).check)


def sync(wanted: dict[Path, str], script: str, check: bool) -> int:
    """Write each file whose text differs from the wanted one, or with `check` name them; 1 if any is stale
    under `check`, else 0."""
    stale = [path for path, text in wanted.items() if read(path) != text]
    for path in stale:
        shown = path.relative_to(ROOT)
        if check:
            print(f"{shown} is stale: run python scripts/{script}", file=sys.stderr)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(wanted[path], encoding="utf-8")
        print(f"wrote {shown}", file=sys.stderr)
    return 1 if check and stale else 0
