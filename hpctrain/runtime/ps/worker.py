"""A parameter-server worker: computes gradients on its batches, pushes them, pulls parameters.

Gradients leave per tensor as soon as autograd has them (post-accumulate hooks), so sending
overlaps the rest of the backward pass; the next batch is read (between-graph) or received from
server 0 (in-graph) while the replies are in flight. A server that closes its connection or stays
silent past the timeout ends the worker with one line naming that server and its node.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from hpctrain.runtime import data, heartbeat
from hpctrain.runtime.metrics import Metrics
from hpctrain.runtime.task import Task
from hpctrain.runtime.train import evaluation_result, evaluation_sums
from hpctrain.spec import Resolved

from . import transport
from .feed import ServerFeed, ShardFeed
from .roles import Roles
from .sharding import assign, shards, unflatten_into
from .stats import WorkerWindow
from .transport import BYE, GRAD_TAG0, HEADER_TAG, PARAMS_TAG, PULL, PUSH, Header, PeerLost


class ServerLost(RuntimeError):
    """A server stopped answering; the message is the one line the worker prints."""


class Worker:
    def __init__(self, lay: Roles, resolved: Resolved, task: Task, run_dir: Path, hosts: list[str]) -> None:
        self.lay, self.hosts, self.task = lay, hosts, task
        self.lines = Metrics(run_dir, lay.info.rank, worker=lay.index)  # this worker's own file
        self.train = resolved.job.train
        ps = resolved.parallel.ps
        assert ps is not None
        self.model: nn.Module = self.task.model
        self.params = list(self.model.parameters())
        self.owner = assign([p.numel() for p in self.params], lay.servers)
        self.by_server = [[self.params[i] for i in idx] for idx in shards(self.owner, lay.servers)]
        self.flats = [torch.empty(sum(p.numel() for p in ps)) for ps in self.by_server]
        self.versions = [0] * lay.servers
        self.feed: ShardFeed | ServerFeed = (
            ServerFeed() if ps.feeding == "in-graph" else ShardFeed(task, self.train, lay.index, lay.workers)
        )
        self.first_timeout = float(self.train.timeout_s)
        self.answer_timeout = float(self.train.timeout_s) + ps.worker_timeout
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

    def _pull(self, timeout: float, clock: int) -> list[Header]:
        """Receive every server's reply and the batch of step ``clock``, which arrives meanwhile."""
        heads = [Header.empty() for _ in range(self.lay.servers)]
        works = [
            (transport.recv(heads[s], s, HEADER_TAG), transport.recv(self.flats[s], s, PARAMS_TAG))
            for s in range(self.lay.servers)
        ]
        posted = self.feed.post(clock)
        for server, pair in enumerate(works):
            transport.wait(pair, server, timeout)
        replies = [Header.parse(h) for h in heads]
        for server, reply in enumerate(replies):
            unflatten_into(self.flats[server], self.by_server[server])
            self.versions[server] = reply.version
        self.inputs, self.targets = self.feed.take(posted, timeout)  # type: ignore[arg-type]
        return replies

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
        heartbeat.mark("eval")
        result = evaluate(self.task, self.model, self.train.batch_size)
        if result:
            self.pending_eval = (self.versions[0], result["loss"], result.get("accuracy", float("nan")))

    def work(self) -> None:
        with self._servers():
            self._loop()

    def _loop(self) -> None:
        self._send_headers([Header(kind=PULL)] * self.lay.servers)
        self._flush(self.first_timeout)
        # The first reply says where this worker resumes; the feed still needs that clock, so the
        # first batch is asked for again once it is known (server 0 sends it either way).
        replies = self._pull(self.first_timeout, 0)
        clock = replies[0].clock
        if isinstance(self.feed, ShardFeed):
            self.inputs, self.targets = self.feed.post(clock)
        every = self.train.eval_every
        self.last_eval = self.versions[0] // every if every else 0
        window = WorkerWindow()
        compute_s = 0.0
        stop = any(r.stop for r in replies)
        while not stop:
            begin = time.time()
            # The heartbeat's step is this worker's clock; the watchdog judges a hang by it.
            heartbeat.mark("forward", clock)
            loss = self.task.loss(self.model(self.inputs), self.targets)
            loss_value = float(loss.detach())
            # Headers go before backward so servers post their gradient receives early.
            self._send_headers(self._headers(loss_value, len(self.targets), clock, compute_s))
            heartbeat.mark("backward")
            loss.backward()
            self._ship_rest()
            compute_s = time.time() - begin
            clock += 1
            heartbeat.mark("collective")  # waiting for the servers' replies
            self._flush(self.answer_timeout)
            replies = self._pull(self.answer_timeout, clock)
            window.add(loss_value, compute_s, time.time() - begin - compute_s)
            stop = any(r.stop for r in replies)
            if not stop:
                self._maybe_eval()
            if window.steps == self.train.log_every or stop:
                self.lines.write(window.line(self.lay.index, clock, self.versions[0], len(self.targets)))
                window = WorkerWindow()
        self._send_headers([Header(kind=BYE)] * self.lay.servers)
        self._flush(self.answer_timeout)


def evaluate(task: Task, model: nn.Module, batch_size: int) -> dict[str, float]:
    """Loss (and accuracy) of ``model`` over the whole eval set, in this process."""
    if task.eval_data is None:
        return {}
    model.eval()
    batches = data.eval_batches(task.eval_data, batch_size, 0, 1)
    result = evaluation_result(task, evaluation_sums(task, model, batches, torch.device("cpu")))
    model.train()
    return result
