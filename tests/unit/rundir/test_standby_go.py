"""The warm standby's go file and the rank order of its per-node steps (rundir/standby_go.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpctrain.rundir.standby_go import global_rank, go_nodes, read_go


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("stop\n", None),
        ("A=1\nHPCTRAIN_ATTEMPT=2\nMASTER_PORT=3=4\n", {"HPCTRAIN_ATTEMPT": "2", "MASTER_PORT": "3=4"}),
    ],
)
def test_read_go(tmp_path: Path, text: str, expected: dict[str, str] | None) -> None:
    (tmp_path / "go").write_text(text)
    assert read_go(tmp_path / "go") == expected
    assert read_go(tmp_path / "missing") is None


def test_the_go_files_nodes(tmp_path: Path) -> None:
    go = tmp_path / "go"
    assert go_nodes(read_go(go)) == []
    go.write_text("HPCTRAIN_ATTEMPT=1\nHPCTRAIN_NODES=n1,n3\n")
    assert go_nodes(read_go(go)) == ["n1", "n3"]
    go.write_text("stop\n")
    assert go_nodes(read_go(go)) == []


def test_ranks_follow_the_attempts_node_order() -> None:
    nodes = ["n3", "n1"]
    assert [global_rank(nodes, node, 2, local) for node in nodes for local in (0, 1)] == [0, 1, 2, 3]
