"""A parameter-server worker: computes gradients on its data shard, pushes them, pulls parameters.

Gradients leave per tensor as soon as autograd has them (post-accumulate hooks), so sending
overlaps the rest of the backward pass; the next batch is gathered while the replies are in
flight. A server that closes its connection or stays silent past the timeout ends the worker with
one line naming that server and its node.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from hpctrain.spec import Resolved

from . import transport
from .common import JsonLines, batch_indices, build_task, collate, evaluate, worker_batch
from .roles import Layout
from .sharding import assign, shards, unflatten_into
from .transport import BYE, GRAD_TAG0, HEADER_TAG, PARAMS_TAG, PULL, PUSH, Header, PeerLost


class ServerLost(RuntimeError):
    """A server stopped answering; the message is the one line the worker prints."""


def injected_crash(worker: int) -> int | None:
    """``HPCTRAIN_PS_CRASH=<worker>:<step>``: that worker dies (exit 3) at that step; for failure tests."""
    who, _, step = os.environ.get("HPCTRAIN_PS_CRASH", "").partition(":")
    return int(step) if who and int(who) == worker else None


def injected_delay(worker: int) -> float:
    """Seconds of simulated compute per step, for benchmarks and tests.

    ``HPCTRAIN_PS_DELAY`` (seconds, every worker) stands in for a heavier model;
    ``HPCTRAIN_PS_SLOW=<worker>:<factor>`` makes one worker that many times slower.
    """
    delay = float(os.environ.get("HPCTRAIN_PS_DELAY", "0") or 0)
    slow = os.environ.get("HPCTRAIN_PS_SLOW", "")
    if slow:
        who, _, factor = slow.partition(":")
        if int(who) == worker:
            delay *= float(factor or 1)
    return delay


class Worker:
    def __init__(self, lay: Layout, resolved: Resolved, run_dir: Path, hosts: list[str]) -> None:
        self.lay, self.hosts = lay, hosts
        self.train = resolved.job.train
        assert resolved.parallel.ps is not None
        self.task = build_task(self.train)
        self.model: nn.Module = self.task.model
        self.params = list(self.model.parameters())
        self.owner = assign([p.numel() for p in self.params], lay.servers)
        self.by_server = [[self.params[i] for i in idx] for idx in shards(self.owner, lay.servers)]
        self.flats = [torch.empty(sum(p.numel() for p in ps)) for ps in self.by_server]
        self.versions = [0] * lay.servers
        self.batch = worker_batch(self.train.batch_size, lay.index, lay.workers)
        self.delay = injected_delay(lay.index)
        self.crash_at = injected_crash(lay.index)
        self.first_timeout = float(self.train.timeout_s)
        self.answer_timeout = float(self.train.timeout_s) + resolved.parallel.ps.worker_timeout
        self.log = JsonLines(run_dir / "metrics" / f"worker-{lay.index}.jsonl")
        self.sends: list[tuple[int, dist.Work]] = []
        self.sent: set[int] = set()
        self.pending_eval: tuple[int, float, float] | None = None
        self.lost: PeerLost | None = None
        self.last_eval = 0
        # Clipping needs the whole gradient's norm, so it gives up the per-tensor overlap.
        self.streaming = self.train.grad_clip is None
        if self.streaming:
            for index, param in enumerate(self.params):
                param.register_post_accumulate_grad_hook(lambda p, i=index: self._ship(i, p))

    def _ship(self, index: int, param: torch.Tensor) -> None:
        """Send one tensor's gradient to its server now (called from autograd's hook)."""
        assert param.grad is not None
        server = self.owner[index]
        self.sent.add(index)
        try:
            self.sends.append((server, transport.send(param.grad, server, GRAD_TAG0 + index)))
        except PeerLost as err:  # raised again after backward: autograd may not pass it through
            self.lost = self.lost or err

    def _ship_rest(self) -> None:
        """Send what the hooks did not: every gradient when clipping, zeros for unused parameters."""
        if not self.streaming:
            torch.nn.utils.clip_grad_norm_(self.params, self.train.grad_clip or 0.0)
        for index, param in enumerate(self.params):
            if index not in self.sent:
                if param.grad is None:
                    param.grad = torch.zeros_like(param)
                self._ship(index, param)

    @contextmanager
    def _servers(self) -> Iterator[None]:
        """Turn a lost peer into the one-line error that names the server and its node."""
        try:
            yield
        except PeerLost as err:
            host = self.hosts[err.peer] if err.peer < len(self.hosts) else "?"
            raise ServerLost(f"server {err.peer} on {host} stopped answering ({err.reason})") from None

    def _send_headers(self, headers: list[Header]) -> None:
        for server, header in enumerate(headers):
            self.sends.append((server, transport.send_header(header, server)))

    def _flush(self, timeout: float) -> None:
        """Wait until every header and gradient sent this step has left; then drop the gradients."""
        if self.lost is not None:
            raise self.lost
        for server, work in self.sends:
            transport.wait([work], server, timeout)
        self.sends.clear()
        self.sent.clear()
        for param in self.params:
            param.grad = None

    def _pull(self, timeout: float, overlap: Callable[[], Any] | None = None) -> tuple[list[Header], Any]:
        """Receive every server's reply; ``overlap`` runs while the parameters are in flight."""
        heads = [Header.empty() for _ in range(self.lay.servers)]
        works = [
            (transport.recv(heads[s], s, HEADER_TAG), transport.recv(self.flats[s], s, PARAMS_TAG))
            for s in range(self.lay.servers)
        ]
        extra = overlap() if overlap is not None else None
        for server, pair in enumerate(works):
            transport.wait(pair, server, timeout)
        replies = [Header.parse(h) for h in heads]
        for server, reply in enumerate(replies):
            unflatten_into(self.flats[server], self.by_server[server])
            self.versions[server] = reply.version
        return replies, extra

    def _headers(self, loss: float, samples: int, clock: int, compute_s: float) -> list[Header]:
        headers = [
            Header(
                kind=PUSH,
                clock=clock,
                version=self.versions[s],
                samples=samples,
                loss=loss,
                compute_s=compute_s,
            )
            for s in range(self.lay.servers)
        ]
        if self.pending_eval is not None:  # server 0 writes metrics.jsonl, so the result goes there
            headers[0].eval_version, headers[0].eval_loss, headers[0].eval_accuracy = self.pending_eval
            self.pending_eval = None
        return headers

    def _maybe_eval(self) -> None:
        """Worker 0 evaluates its fresh copy every ``eval_every`` server steps."""
        every = self.train.eval_every
        if self.lay.index != 0 or not every or self.versions[0] // every <= self.last_eval:
            return
        self.last_eval = self.versions[0] // every
        result = evaluate(self.task, self.model)
        if result:
            self.pending_eval = (self.versions[0], result["loss"], result.get("accuracy", float("nan")))

    def work(self) -> None:
        with self._servers():
            self._loop()
        self.log.close()

    def _loop(self) -> None:
        self._send_headers([Header(kind=PULL)] * self.lay.servers)
        self._flush(self.first_timeout)
        replies, _ = self._pull(self.first_timeout)
        clock = replies[0].clock
        every = self.train.eval_every
        self.last_eval = self.versions[0] // every if every else 0
        data = self.task.train_data
        length = len(data)  # type: ignore[arg-type]

        def batch_at(step: int) -> tuple[torch.Tensor, torch.Tensor]:
            index = batch_indices(length, self.lay.index, self.lay.workers, self.batch, self.train.seed, step)
            return collate(data, index)

        inputs, targets = batch_at(clock)
        window = _Window()
        compute_s = 0.0
        stop = any(r.stop for r in replies)
        while not stop:
            if clock == self.crash_at:
                os._exit(3)
            begin = time.time()
            if self.delay:
                time.sleep(self.delay)
            loss = self.task.loss(self.model(inputs), targets)
            loss_value = float(loss.detach())
            # Headers go before backward so servers post their gradient receives early.
            self._send_headers(self._headers(loss_value, len(targets), clock, compute_s))
            loss.backward()
            self._ship_rest()
            compute_s = time.time() - begin
            clock += 1
            self._flush(self.answer_timeout)
            replies, (inputs, targets) = self._pull(self.answer_timeout, lambda c=clock: batch_at(c))
            window.add(loss_value, compute_s, time.time() - begin - compute_s)
            stop = any(r.stop for r in replies)
            if not stop:
                self._maybe_eval()
            if window.steps == self.train.log_every or stop:
                self.log.write(window.line(self.lay.index, clock, self.versions[0], self.batch))
                window = _Window()
        self._send_headers([Header(kind=BYE)] * self.lay.servers)
        self._flush(self.answer_timeout)


class _Window:
    """This worker's numbers since its last metrics line."""

    def __init__(self) -> None:
        self.start = time.time()
        self.steps = 0
        self.loss = self.compute = self.wait = 0.0

    def add(self, loss: float, compute_s: float, wait_s: float) -> None:
        self.steps += 1
        self.loss += loss
        self.compute += compute_s
        self.wait += wait_s

    def line(self, worker: int, clock: int, version: int, batch: int) -> dict[str, Any]:
        steps = max(1, self.steps)
        return {
            "kind": "train",
            "worker": worker,
            "step": clock,
            "version": version,
            "loss": self.loss / steps,
            "samples_per_s": self.steps * batch / max(1e-9, time.time() - self.start),
            "compute_s": self.compute / steps,
            "wait_s": self.wait / steps,
        }
