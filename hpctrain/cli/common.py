"""Arguments and output helpers that several verbs share."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from hpctrain.scheduler import NAMES as BACKEND_NAMES


def add_job_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job", help="Job spec (YAML), e.g. jobs/digits-ddp.yaml.")
    parser.add_argument("--site", required=True, help="Site profile: a path, or a name in site-configs/.")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="Override a spec field, e.g. --set train.steps=500 (repeatable).",
    )
    parser.add_argument(
        "--backend",
        choices=BACKEND_NAMES,
        default=None,
        help="Scheduler backend (default: $HPCTRAIN_BACKEND or auto).",
    )
    parser.add_argument(
        "--no-check",
        dest="check",
        action="store_false",
        help="Skip the entrypoint and path checks (module found, function defined, files readable).",
    )


def print_json(data: Any) -> None:
    json.dump(data, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


def table(rows: list[list[str]], header: list[str]) -> str:
    widths = [len(h) for h in header]
    for row in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    return "\n".join(lines)


def ago(timestamp: float) -> str:
    seconds = max(0, int(time.time() - timestamp))
    if seconds < 120:
        return f"{seconds}s ago"
    if seconds < 7200:
        return f"{seconds // 60}m ago"
    if seconds < 172800:
        return f"{seconds // 3600}h ago"
    return f"{seconds // 86400}d ago"
