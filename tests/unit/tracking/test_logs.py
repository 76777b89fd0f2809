"""All ranks' logs as one stream: interleaved by time, filtered by node and rank, nothing lost."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from hpctrain.rundir import RunDir
from hpctrain.tracking.logs import LogMerger


def _write_log(folder: Path, rank: int, node: str, lines: list[str], tail: str = "") -> None:
    path = RunDir(folder).rank_log(rank)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(f"2026-12-03 04:00:{s} [rank {rank}/2 {node}] INFO x: {m}\n" for s, m in lines)
    path.write_text(text + tail)


def test_merged_logs_interleave_by_time_and_keep_unstamped_lines_with_theirs(tmp_path: Path) -> None:
    _write_log(tmp_path, 0, "node1", [("01,000", "a"), ("03,000", "c")], tail="Traceback\n  boom\n")
    _write_log(tmp_path, 1, "node2", [("02,000", "b"), ("04,000", "d")], tail="no newline yet")
    merger = LogMerger(RunDir(tmp_path))
    got = [line.decode() for line in merger.drain()]
    assert [line[:9] + line[-1] for line in got] == [
        "[rank 0] a",
        "[rank 1] b",
        "[rank 0] c",
        "[rank 0] k",  # the traceback stays after its rank's last stamped line
        "[rank 0] m",
        "[rank 1] d",
    ]
    with RunDir(tmp_path).rank_log(1).open("a") as handle:
        handle.write("\n")
    assert [line.decode() for line in merger.drain()] == ["[rank 1] no newline yet"]  # follow: new lines


def test_merged_logs_filter_by_node_and_rank(tmp_path: Path) -> None:
    _write_log(tmp_path, 0, "node1", [("01,000", "a")])
    _write_log(tmp_path, 1, "node2", [("02,000", "b")])
    (only,) = LogMerger(RunDir(tmp_path), node="node2").drain()
    assert only.decode().startswith("[rank 1] ") and only.endswith(b"b")
    assert list(LogMerger(RunDir(tmp_path), ranks=[0], node="node2").drain()) == []
    assert list(LogMerger(RunDir(tmp_path / "none")).drain()) == []


@given(st.lists(st.binary(max_size=300), min_size=1, max_size=3), st.integers(1, 64))
def test_merged_logs_lose_and_add_nothing_whatever_the_bytes(logs: list[bytes], chunk: int) -> None:
    """Hostile log content (no newlines, escapes, invalid UTF-8, fake timestamps), read in small
    rounds as `-f` would: each rank's lines come out whole, once, in their own order."""
    import tempfile

    from hpctrain.tracking import logs as log_merge

    with tempfile.TemporaryDirectory() as folder:
        root = RunDir(folder)
        root.logs.mkdir()
        for rank, data in enumerate(logs):
            root.rank_log(rank).write_bytes(data)
        merger = LogMerger(root)
        original = log_merge.CHUNK
        log_merge.CHUNK = chunk
        try:
            got = list(merger.drain(final=True))
        finally:
            log_merge.CHUNK = original
    for rank, data in enumerate(logs):
        prefix = f"[rank {rank}] ".encode()
        expected = data.split(b"\n")
        if expected[-1] == b"":
            expected.pop()
        assert [line[len(prefix) :] for line in got if line.startswith(prefix)] == expected
