"""The run index's line format: typed msgspec records, tolerant decoding, whole writes."""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path
from typing import Annotated

import msgspec

from hpctrain.rundir import RunRecord
from hpctrain.rundir.io import decode_hook, encode_hook
from hpctrain.scheduler import NAMES
from hpctrain.scheduler.base import JobState


class Added(RunRecord, tag="add", tag_field="op"):
    """A run as submitted (or, in the archive, as it ended): the run record, marked as an index line."""


class Changed(msgspec.Struct, tag="state", tag_field="op", kw_only=True, omit_defaults=True):
    """A new state of a run added earlier; with `job_id`, the job the scheduler gave a run that was
    recorded before it was submitted (the intent)."""

    run_id: Annotated[str, msgspec.Meta(min_length=1)]
    state: JobState
    at: float
    reason: str = ""
    job_id: str | None = None


def added(run: RunRecord) -> Added:
    """The index line of a run (a run read from the index already is one)."""
    return run if isinstance(run, Added) else Added(**msgspec.structs.asdict(run))


def record(run: RunRecord) -> RunRecord:
    """A copy of the run without its index line's mark, for record.json to add its own fields to."""
    return RunRecord(**msgspec.structs.asdict(run))


class Decoded(msgspec.Struct):
    lines: list[Added | Changed]
    bad: list[tuple[int, bytes]]
    """(line number, text) of each line that did not decode."""


_DECODER = msgspec.json.Decoder(Added | Changed, dec_hook=decode_hook)
_ENCODER = msgspec.json.Encoder(enc_hook=encode_hook)
_warned = False


def decode(data: bytes, where: Path) -> Decoded:
    """Every line that decodes to a usable run or change; the others are skipped, with one warning per
    process on stderr: a damaged line never hides its neighbours."""
    try:
        whole = _DECODER.decode_lines(data)
        if all(usable(line) for line in whole):
            return Decoded(whole, [])
    except msgspec.MsgspecError:
        pass  # some line is bad: decode them one by one
    lines: list[Added | Changed] = []
    bad: list[tuple[int, bytes]] = []
    for number, text in enumerate(data.split(b"\n"), 1):
        if not text.strip():
            continue
        try:
            line = _DECODER.decode(text)
        except msgspec.MsgspecError:
            line = None
        if line is not None and usable(line):
            lines.append(line)
        else:
            bad.append((number, text))
    if bad:
        warn_unreadable(where, bad)
    return Decoded(lines, bad)


# Backends a recorded run may name: those that submit, and `?` for a run directory whose submit was killed
# before it said which (index.unsubmitted).
RECORDED_BACKENDS = frozenset((*NAMES, "?"))
# Times are seconds since the epoch; past this (the year 5138) a number is damage, not a date, and
# formatting it as one overflows.
LATEST_TIME = 1e11


def usable(line: Added | Changed) -> bool:
    """Whether a decoded line can be acted on: a known backend, times that are dates. Such a line
    that decodes but would stop every verb (`unknown backend`, an OverflowError) is a damaged line."""
    times = (line.submitted_at, line.state_at) if isinstance(line, Added) else (line.at,)
    if not all(math.isfinite(t) and 0 <= t < LATEST_TIME for t in times):
        return False
    return not isinstance(line, Added) or line.backend in RECORDED_BACKENDS


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
