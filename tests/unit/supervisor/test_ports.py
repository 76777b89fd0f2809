"""Rendezvous ports outside the node's ephemeral range (hpctrain.supervisor.ports), without a cluster."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from hpctrain.supervisor.ports import DEFAULT_EPHEMERAL, ephemeral_range, main, rendezvous_ports


def test_the_range_is_read_from_the_kernel_file(tmp_path: Path) -> None:
    path = tmp_path / "ip_local_port_range"
    path.write_text("40000\t50000\n")
    assert ephemeral_range(path) == (40000, 50000)
    path.write_text("garbage")
    assert ephemeral_range(path) == DEFAULT_EPHEMERAL
    assert ephemeral_range(tmp_path / "missing") == DEFAULT_EPHEMERAL


def test_the_old_rule_put_preflight_inside_the_default_range() -> None:
    """Issue 23 item 13: job 20549 got MASTER_PORT 20549 and preflight 40549, an ephemeral port."""
    training, preflight = rendezvous_ports(20549, 0, DEFAULT_EPHEMERAL)
    low, high = DEFAULT_EPHEMERAL
    assert not low <= training <= high and not low <= preflight <= high
    assert preflight != 40549


@given(
    job=st.integers(0, 10**9),
    attempt=st.integers(0, 1000),
    low=st.integers(1024, 65535),
    width=st.integers(0, 40000),
)
def test_ports_avoid_the_ephemeral_range_and_each_other(job: int, attempt: int, low: int, width: int) -> None:
    high = min(65535, low + width)
    training, preflight = rendezvous_ports(job, attempt, (low, high))
    assert 20000 <= training <= 65535 and 20000 <= preflight <= 65535
    assert training != preflight
    if not (low <= 20000 and high >= 65535):  # some port is left outside the range
        assert not low <= training <= high and not low <= preflight <= high


def test_each_attempt_gets_new_ports() -> None:
    seen = {rendezvous_ports(1234, attempt, DEFAULT_EPHEMERAL) for attempt in range(6)}
    assert len(seen) == 6


def test_the_command_prints_both_ports(capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["1234", "1"]) == 0
    training, preflight = map(int, capsys.readouterr().out.split())
    assert (training, preflight) == rendezvous_ports(1234, 1, ephemeral_range())
    assert main(["x"]) == 2
