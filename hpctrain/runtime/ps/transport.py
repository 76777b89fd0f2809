"""Point-to-point messages over torch.distributed gloo: fixed-size headers, flat buffers, timeouts.

Why gloo p2p: each pair of processes has its own TCP connection, so a dead worker breaks only its
own pair (the server drops it and keeps serving the others), and a dead server shows up on the
worker as "connection closed" at once. A wait that times out closes that pair for good, so
timeouts are used only to declare a peer dead, never to poll.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from dataclasses import dataclass, fields

import torch
import torch.distributed as dist

# Message kinds in Header.kind.
PULL = 1  # worker -> server: send me your parameters (first contact, resume)
PUSH = 2  # worker -> server: gradients follow, one message per owned tensor
BYE = 3  # worker -> server: I am leaving; no more messages from me
PARAMS = 4  # server -> worker: flat parameter shard follows

HEADER_TAG = 0
PARAMS_TAG = 1
GATHER_TAG = 2  # server k -> server 0: final shard for the last evaluation
FEED_TAG = 3  # server 0 -> worker, in-graph feeding: the worker's next batch (3 messages)
GRAD_TAG0 = 16  # gradient of tensor i travels with tag GRAD_TAG0 + i


class PeerLost(RuntimeError):
    """A peer closed its connection or stayed silent past the timeout."""

    def __init__(self, peer: int, reason: str) -> None:
        super().__init__(f"rank {peer}: {reason}")
        self.peer = peer
        self.reason = reason


@dataclass
class Header:
    """Small control message; travels as a float64 tensor (exact for integers below 2**53)."""

    kind: int = 0
    clock: int = 0  # worker: steps it has pushed; server reply: the clock it should resume from
    version: int = 0  # version of the server's shard (the worker's copy, or the server's own)
    samples: int = 0
    loss: float = float("nan")
    compute_s: float = 0.0  # worker: forward+backward time of this step
    stop: int = 0  # server reply: training is over
    eval_version: int = -1  # worker 0's periodic evaluation, carried to server 0
    eval_loss: float = float("nan")
    eval_accuracy: float = float("nan")

    SIZE = 10

    def tensor(self) -> torch.Tensor:
        return torch.tensor([float(getattr(self, f.name)) for f in fields(self)], dtype=torch.float64)

    @classmethod
    def empty(cls) -> torch.Tensor:
        return torch.zeros(cls.SIZE, dtype=torch.float64)

    @classmethod
    def parse(cls, data: torch.Tensor) -> Header:
        values = data.tolist()
        kwargs = {}
        for f, value in zip(fields(cls), values, strict=True):
            kwargs[f.name] = int(value) if f.type in ("int", int) else float(value)
        return cls(**kwargs)


def _reason(err: Exception, timeout_s: float) -> str:
    text = str(err)
    if "Timed out" in text or "timed out" in text:
        return f"silent for {timeout_s:g}s"
    if "closed" in text or "reset" in text or "Broken pipe" in text:
        return "connection closed"
    return text.splitlines()[0][:200] if text else type(err).__name__


def wait(works: Sequence[dist.Work], peer: int, timeout_s: float) -> None:
    """Wait for all ``works`` (same peer); raise PeerLost naming the peer on timeout or disconnect."""
    limit = datetime.timedelta(seconds=timeout_s)
    try:
        for work in works:
            work.wait(timeout=limit)
    except RuntimeError as err:
        raise PeerLost(peer, _reason(err, timeout_s)) from None


def send(tensor: torch.Tensor, peer: int, tag: int) -> dist.Work:
    try:
        return dist.isend(tensor, dst=peer, tag=tag)
    except RuntimeError as err:  # gloo refuses at once when the pair is already closed
        raise PeerLost(peer, _reason(err, 0)) from None


def recv(tensor: torch.Tensor, peer: int, tag: int) -> dist.Work:
    try:
        return dist.irecv(tensor, src=peer, tag=tag)
    except RuntimeError as err:
        raise PeerLost(peer, _reason(err, 0)) from None


def send_header(header: Header, peer: int) -> dist.Work:
    return send(header.tensor(), peer, HEADER_TAG)


def recv_header(peer: int, timeout_s: float) -> Header:
    buf = Header.empty()
    wait([recv(buf, peer, HEADER_TAG)], peer, timeout_s)
    return Header.parse(buf)
