"""The run index's line format: typed msgspec records, tolerant decoding, whole writes."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import msgspec

Text = Annotated[str, msgspec.Meta(min_length=1)]


class Added(msgspec.Struct, tag="add", tag_field="op", kw_only=True):
    """A run as submitted (or, in the archive, as it ended)."""

    run_id: Text
    job_id: str | None
    name: str
    site: str
    backend: str
    run_dir: Text
    submitted_at: float
    state: Text
    state_at: float
    reason: str = ""


class Changed(msgspec.Struct, tag="state", tag_field="op", kw_only=True):
    """A new state of a run added earlier."""

    run_id: Text
    state: Text
    at: float
    reason: str = ""


class Decoded(msgspec.Struct):
    lines: list[Added | Changed]
    bad: list[tuple[int, bytes]]
    """(line number, text) of each line that did not decode."""


_DECODER = msgspec.json.Decoder(Added | Changed)
_ENCODER = msgspec.json.Encoder()
_warned = False


def decode(data: bytes, where: Path) -> Decoded:
    """Every line that decodes; the others are skipped, with one warning per process on stderr."""
    try:
        return Decoded(_DECODER.decode_lines(data), [])
    except msgspec.MsgspecError:
        pass  # some line is bad: decode them one by one
    lines: list[Added | Changed] = []
    bad: list[tuple[int, bytes]] = []
    for number, text in enumerate(data.split(b"\n"), 1):
        if not text.strip():
            continue
        try:
            lines.append(_DECODER.decode(text))
        except msgspec.MsgspecError:
            bad.append((number, text))
    if bad:
        warn_unreadable(where, bad)
    return Decoded(lines, bad)


def silence_warnings() -> None:
    """For `hpctrain index`, which reports every unreadable line itself."""
    global _warned
    _warned = True


def warn_unreadable(where: Path, bad: list[tuple[int, bytes]]) -> None:
    global _warned
    if _warned:
        return
    _warned = True
    numbers = ", ".join(str(n) for n, _ in bad[:5]) + (", ..." if len(bad) > 5 else "")
    sys.stderr.write(
        f"hpctrain: warning: skipped {len(bad)} unreadable line(s) of {where} (line {numbers});"
        " `hpctrain index compact` sets them aside\n"
    )


def encode_lines(lines: list[Added | Changed]) -> bytes:
    return b"".join(_ENCODER.encode(line) + b"\n" for line in lines)


def write_all(fd: int, data: bytes) -> None:
    """os.write until every byte is out: a short write must not leave half a line."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
