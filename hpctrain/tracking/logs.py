"""All ranks' logs as one stream: each line prefixed with its rank, interleaved by the time it carries.

The runtime's log lines start with a timestamp (``2026-12-03 04:12:47,906 [rank 3/4 node2] ...``,
``hpctrain/runtime/logs.py``); lines without one (tracebacks, NCCL or gloo output) keep the time of
the line before them in the same log, so they stay with it. Which node a rank ran on is read from
that same tag, so ``--node`` works from the first log line on, before any metrics exist.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from hpctrain.rundir import RANK_LOG, RunDir, list_names, numbered, read_at

# What one read takes from one log at most: a rank that logged gigabytes is streamed in rounds.
CHUNK = 1 << 20
# How far into a log its `[rank R/W node]` tag is looked for.
HEAD = 16 << 10
_TIMESTAMP = re.compile(rb"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}")
_RANK_TAG = re.compile(rb"\[rank (\d+)/\d+ ([^\]\s]+)\]")


def rank_logs(root: RunDir) -> dict[int, Path]:
    """Every `logs/rank-N.log` of the run directory, by rank."""
    return {rank: root.logs / name for rank, name in numbered(list_names(root.logs, root.top), RANK_LOG)}


def node_of(path: Path, below: Path | None = None) -> str | None:
    """The node a rank's log says it ran on (its first runtime line), None before that line exists."""
    head = read_at(path, 0, HEAD, below) or b""
    match = _RANK_TAG.search(head)
    return match.group(2).decode("utf-8", "replace") if match else None


class LogMerger:
    """Reads the selected ranks' logs incrementally and returns their new whole lines, merged by time.

    ``ranks``/``node`` filter (None: all); logs that appear later (a rank that starts late) are
    picked up on the next read, and a rank whose node is not known yet is asked again next time.
    """

    def __init__(self, root: RunDir, ranks: Iterable[int] | None = None, node: str | None = None) -> None:
        self.root = root
        self.ranks = set(ranks) if ranks is not None else None
        self.node = node
        self.offsets: dict[int, int] = {}
        self.partial: dict[int, bytes] = {}
        self.last_time: dict[int, bytes] = {}
        self.rejected: set[int] = set()
        self.moved = False
        """Whether the last read found new bytes (a line longer than CHUNK spans several reads)."""

    def _selected(self) -> dict[int, Path]:
        chosen = {}
        for rank, path in rank_logs(self.root).items():
            if rank in self.rejected or (self.ranks is not None and rank not in self.ranks):
                continue
            if self.node is not None and rank not in self.offsets:
                found = node_of(path, self.root.top)
                if found is None:
                    continue  # not known yet: asked again on the next read
                if found != self.node:
                    self.rejected.add(rank)
                    continue
            chosen[rank] = path
        return chosen

    def read(self, final: bool = False) -> list[bytes]:
        """The lines written since the last read, each `[rank N] line`, in time order.

        With `final`, a last line without its newline is returned too once nothing more is read
        after it (the job has ended)."""
        batch: list[tuple[bytes, int, bytes]] = []
        self.moved = False
        for rank, path in sorted(self._selected().items()):
            data = self._read_new(rank, path)
            lines = (self.partial.get(rank, b"") + data).split(b"\n")
            rest = lines.pop()
            if final and rest and not data:  # the log's end: its last line has no newline
                lines.append(rest)
                rest = b""
            self.partial[rank] = rest
            prefix = f"[rank {rank}] ".encode()
            for line in lines:
                stamp = _TIMESTAMP.match(line)
                # Never earlier than the line before it in the same log: one rank's order is kept.
                when = max(stamp.group(0) if stamp else b"", self.last_time.get(rank, b""))
                self.last_time[rank] = when
                batch.append((when, rank, prefix + line))
        batch.sort(key=lambda item: item[0])  # stable: same time keeps rank, then file order
        return [line for _, _, line in batch]

    def _read_new(self, rank: int, path: Path) -> bytes:
        offset = self.offsets.get(rank, 0)
        data = read_at(
            path, offset, CHUNK, self.root.top
        )  # never through a link planted in the run directory
        if data is None:
            return b""
        self.offsets[rank] = offset + len(data)
        self.moved = self.moved or bool(data)
        return data

    def drain(self, final: bool = False) -> Iterable[bytes]:
        """Everything there is now, in rounds of at most CHUNK bytes per log."""
        while True:
            yield from self.read(final)
            if not self.moved:
                return
