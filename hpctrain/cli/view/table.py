"""Plain-text output the verbs share: aligned tables, JSON, numbers and ages."""

from __future__ import annotations

import json
import sys
import time
from typing import Any

# The widest a number in a table gets: `-1.23e+308` (a throughput of 1e308 with `.0f` is 309 digits).
NUMBER_WIDTH = 10


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


def clip(text: str, width: int) -> str:
    """`text` in at most `width` characters: cut after the last whole word that fits, with `…`
    (a word longer than half the width is cut inside)."""
    if len(text) <= width:
        return text
    head = text[: width - 1]
    space = head.rfind(" ")
    if space >= width // 2:
        head = head[:space]
    return head.rstrip(" ,;:") + "…"


def ago(timestamp: float) -> str:
    seconds = max(0, int(time.time() - timestamp))
    if seconds < 120:
        return f"{seconds}s ago"
    if seconds < 7200:
        return f"{seconds // 60}m ago"
    if seconds < 172800:
        return f"{seconds // 3600}h ago"
    return f"{seconds // 86400}d ago"


def number(value: float | int | str | None, spec: str = ".4g") -> str:
    """A number as `spec` formats it, in scientific notation where that would be wider than
    NUMBER_WIDTH characters (a column stays narrow whatever a metrics line holds); `-` for none,
    `inf`/`nan` as such, and text that is not a number as it is."""
    if value is None:
        return "-"
    try:
        as_float = float(value)
    except OverflowError:  # an integer beyond any float: its sign and magnitude say enough
        return "<-1e+308" if int(value) < 0 else ">1e+308"
    except (TypeError, ValueError):
        return str(value)
    text = format(as_float, spec)
    return text if len(text) <= NUMBER_WIDTH else format(as_float, ".3g")
