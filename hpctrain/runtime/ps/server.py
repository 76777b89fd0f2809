"""A parameter server: owns a shard of tensors, applies workers' gradients, answers with parameters.

One thread per worker receives that worker's messages; all shared state sits behind one condition
variable. ``sync`` averages one gradient per active worker into each update, ``async`` applies every
gradient on arrival, ``bounded`` applies on arrival but holds back the reply to a worker that is
more than ``staleness`` steps ahead of the slowest active one (stale synchronous parallel).
With in-graph feeding, server 0 is also the feeder: each reply to a worker carries its next batch.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

from hpctrain.rundir import RunDir
from hpctrain.runtime import heartbeat
from hpctrain.runtime.metrics import Metrics, write_result
from hpctrain.runtime.task import Task
from hpctrain.runtime.train import lr_factor, make_optimizer
from hpctrain.spec import Resolved

from . import checkpoint, feed, stats, transport
from .roles import Roles
from .sharding import assign, flatten, shards, unflatten_into
from .transport import BYE, GATHER_TAG, GRAD_TAG0, PARAMS, PARAMS_TAG, PULL, PUSH, Header, PeerLost
from .worker import evaluate

log = logging.getLogger(__name__)


class ServerFailed(RuntimeError):
    """Training cannot finish: every worker is gone, or another server stopped answering."""


class Server:
    def __init__(
        self, lay: Roles, resolved: Resolved, task: Task, run_dir: Path, hosts: list[str], metrics: Metrics
    ) -> None:
        self.lay, self.run_dir, self.hosts, self.task = lay, run_dir, hosts, task
        self.created = time.time()
        self.train = resolved.job.train
        ps = resolved.parallel.ps
        assert ps is not None
        self.ps = ps
        named = list(self.task.model.named_parameters())
        owner = assign([p.numel() for _, p in named], lay.servers)
        self.mine = shards(owner, lay.servers)[lay.index]
        self.names = [named[i][0] for i in self.mine]
        self.tensors = [named[i][1] for i in self.mine]
        # A server that owns nothing (more servers than tensors) still answers; give it a no-op.
        self.opt = make_optimizer(task, self.tensors or [nn.Parameter(torch.zeros(0))], self.train)
        self.base_lrs = [group["lr"] for group in self.opt.param_groups]
        self.version = 0
        self.clocks = dict.fromkeys(range(lay.workers), 0)
        self.stats = {w: stats.WorkerProgress() for w in range(lay.workers)}
        self.cond = threading.Condition()
        self.failure: str | None = None
        self.acc = [torch.zeros_like(t) for t in self.tensors]  # sync: sum of this round's gradients
        self.contrib: set[int] = set()
        self.staleness: list[int] = []
        self.window = stats.Window()
        self._snapshot: tuple[int, torch.Tensor] | None = None
        self._saved_version = -1
        self.started: float | None = None
        self.last_loss: float | None = None
        self.metrics = metrics  # writes on rank 0 (server 0) only
        self.feeder = lay.index == 0 and ps.feeding == "in-graph"
        self.shards = (
            [feed.sampler(task, self.train, w, lay.workers) for w in range(lay.workers)]
            if self.feeder
            else []
        )
        self._resume()
        self.worker_timeout = ps.worker_timeout
        self.first_timeout = float(self.train.timeout_s)
        self.answer_timeout = float(self.train.timeout_s) + ps.worker_timeout

    # ------------------------------------------------------------------ state

    def _resume(self) -> None:
        self.resumed: int | None = None
        latest = checkpoint.load_latest(self.run_dir, self._event)
        checkpoint.forget_newer_shards(self.run_dir, self.lay.index, latest[0] if latest else None)
        if latest is None:
            return
        step, state = latest
        with torch.no_grad():
            for name, tensor in zip(self.names, self.tensors, strict=True):
                tensor.copy_(state["params"][name])
                if name in state["optim"]:
                    self.opt.state[tensor] = state["optim"][name]
        self.version = self._saved_version = step
        self.clocks.update({int(w): int(c) for w, c in state["clocks"].items() if int(w) in self.clocks})
        self.resumed = step

    def _active(self) -> list[int]:
        return [w for w, s in self.stats.items() if s.status == "running"]

    def _done(self) -> bool:
        return self.version >= self.train.steps or self.failure is not None or not self._active()

    def _apply(self, grads: list[torch.Tensor], scale: float = 1.0) -> None:
        factor = lr_factor(self.version, self.train.warmup_steps, self.train.steps, self.train.lr_schedule)
        for group, base in zip(self.opt.param_groups, self.base_lrs, strict=True):
            group["lr"] = base * factor
        for tensor, grad in zip(self.tensors, grads, strict=True):
            tensor.grad = grad * scale if scale != 1.0 else grad
        self.opt.step()
        for tensor in self.tensors:
            tensor.grad = None
        self.version += 1
        # The heartbeat's step is the shard's version: a server that stops applying updates while
        # its workers push (a deadlock, a STOPped process) is hung.
        heartbeat.mark("collective", self.version)
        self._after_update()

    def _after_update(self) -> None:
        every = self.train.checkpoint_every
        if every and self.version % every == 0:
            self._save()
        if self.lay.index == 0 and self.version % self.train.log_every == 0:
            self._log_train()
        self.cond.notify_all()

    def _save(self) -> None:
        if self._saved_version == self.version:
            return
        heartbeat.mark("checkpoint")
        state: dict[str, Any] = {
            "params": {n: t.detach().clone() for n, t in zip(self.names, self.tensors, strict=True)},
            "optim": {
                n: self.opt.state[t]
                for n, t in zip(self.names, self.tensors, strict=True)
                if t in self.opt.state
            },
            "clocks": dict(self.clocks),
            "version": self.version,
        }
        checkpoint.save_shard(
            self.run_dir, self.version, self.lay.index, self.lay.servers, state, self.train.keep_checkpoints
        )
        self._saved_version = self.version
        heartbeat.mark("collective")

    def _sync_round(self) -> None:
        """Close the round once every active worker has contributed (also after a drop)."""
        active = set(self._active())
        if self.contrib and self.contrib >= active and self.version < self.train.steps:
            count = len(self.contrib)
            self._apply(self.acc, 1.0 / count)
            for acc in self.acc:
                acc.zero_()
            self.contrib.clear()

    def _within_bound(self, worker: int) -> bool:
        active = self._active()
        slowest = min((self.clocks[w] for w in active), default=self.clocks[worker])
        return self.clocks[worker] - slowest <= self.ps.staleness

    def _reply(self, worker: int) -> tuple[Header, torch.Tensor]:
        if self._snapshot is None or self._snapshot[0] != self.version:
            # A new tensor per version: replies still in flight keep reading the old one.
            self._snapshot = (self.version, flatten(self.tensors))
        header = Header(kind=PARAMS, clock=self.clocks[worker], version=self.version, stop=int(self._done()))
        return header, self._snapshot[1]

    # ------------------------------------------------------------------ metrics

    def _event(self, event: str, **fields: Any) -> None:
        self.metrics.event(event, **fields)
        if self.lay.index:
            log.info("server %d: %s %s", self.lay.index, event, fields)

    def _record(self, worker: int, header: Header, staleness: int | None) -> None:
        now = time.time()
        if self.started is None:  # the clock of the metrics starts with training, not with imports
            self.started = self.window.start = now
        self.stats[worker].record(header, now)
        self.window.losses.append(header.loss)
        self.window.samples += header.samples
        if staleness is not None:
            self.window.staleness.append(staleness)
            self.staleness.append(staleness)
        if header.eval_version >= 0:
            self.metrics.write(
                "eval",
                step=header.eval_version,
                loss=header.eval_loss,
                accuracy=header.eval_accuracy,
                by=f"worker {worker}",
            )

    def _log_train(self) -> None:
        line = self.window.line(self.version, self.train.steps, len(self._active()), self.ps.mode)
        self.last_loss = line["loss"]
        self.metrics.write("train", **line)
        self.window = stats.Window()

    # ------------------------------------------------------------------ per-worker thread

    def _push(self, worker: int, header: Header, grads: list[torch.Tensor]) -> tuple[Header, torch.Tensor]:
        with self.cond:
            self.clocks[worker] = header.clock + 1
            if self.version >= self.train.steps:
                self._record(worker, header, None)
            elif self.ps.mode == "sync":
                self._record(worker, header, 0)
                for acc, grad in zip(self.acc, grads, strict=True):
                    acc.add_(grad)
                self.contrib.add(worker)
                target = self.version + 1
                self._sync_round()
                self._wait(lambda: self.version >= target or self._done())
            else:
                self._record(worker, header, self.version - header.version)
                self._apply(grads)
            if self.ps.mode == "bounded":
                self.cond.notify_all()
                self._wait(lambda: self._within_bound(worker) or self._done())
            return self._reply(worker)

    def _wait(self, predicate: Any) -> None:
        if not self.cond.wait_for(predicate, timeout=self.answer_timeout):
            raise ServerFailed(f"server {self.lay.index}: no progress for {self.answer_timeout:g}s")

    def _handle(self, worker: int) -> None:
        peer = self.lay.servers + worker
        grads = [torch.empty_like(t) for t in self.tensors]
        timeout = self.first_timeout
        try:
            while True:
                header = transport.recv_header(peer, timeout)
                timeout = self.worker_timeout
                if header.kind == BYE:
                    with self.cond:
                        self.stats[worker].status = "finished"
                        self._settle()
                    return
                if header.kind == PUSH:
                    works = [
                        transport.recv(g, peer, GRAD_TAG0 + i) for g, i in zip(grads, self.mine, strict=True)
                    ]
                    transport.wait(works, peer, self.worker_timeout)
                    reply, flat = self._push(worker, header, grads)
                else:
                    with self.cond:
                        reply, flat = self._reply(worker)
                sends = [transport.send_header(reply, peer), transport.send(flat, peer, PARAMS_TAG)]
                if self.feeder:
                    batch = feed.batch_at(self.task, self.shards[worker], reply.clock)
                    sends += feed.send_batch(batch, peer, first=header.kind == PULL)
                transport.wait(sends, peer, self.worker_timeout)
        except PeerLost as err:
            with self.cond:
                # Status and the report print it after "worker N: dropped".
                reason = f"lost on {self.hosts[peer]} at its step {self.clocks[worker]} ({err.reason})"
                self.stats[worker].status, self.stats[worker].reason = "dropped", reason
                self._event("worker_dropped", worker=worker, reason=reason, step=self.version)
                self._settle()
        except Exception as err:  # a bug or a stuck server: fail the job rather than hang
            with self.cond:
                self.failure = f"{type(err).__name__}: {err}"
                self.cond.notify_all()

    def _settle(self) -> None:
        """A worker left: a sync round or a bounded wait may be complete now."""
        if self.ps.mode == "sync":
            self._sync_round()
        self.cond.notify_all()

    # ------------------------------------------------------------------ main

    def serve(self) -> None:
        start = time.time()
        common = {
            "layout": "ps",
            "world_size": self.lay.info.world_size,
            "launcher": self.lay.info.launcher,
            "job_id": self.lay.info.job_id,
            "restart_count": self.lay.info.restart_count,
        }
        heartbeat.mark("collective", self.version)
        if self.resumed is None:
            self._event("start", step=0, **common)
        else:
            self._event("resumed", step=self.resumed, **common)
        threads = [
            threading.Thread(target=self._handle, args=(w,), daemon=True, name=f"ps-worker-{w}")
            for w in range(self.lay.workers)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if self.failure is not None:
            raise ServerFailed(self.failure)
        with self.cond:
            self._save()
        if self.lay.index == 0:
            self._finish(time.time() - (self.started or start))
        else:
            try:
                flat = flatten(self.tensors)
                transport.wait([transport.send(flat, 0, GATHER_TAG)], 0, self.answer_timeout)
            except PeerLost as err:
                raise ServerFailed(f"server 0 on {self.hosts[0]} stopped answering ({err.reason})") from None
        if self.version < self.train.steps:
            raise ServerFailed(
                f"all workers lost at step {self.version} of {self.train.steps} "
                f"({', '.join(f'worker {w}: {s.reason}' for w, s in self.stats.items() if s.reason)})"
            )

    def _finish(self, train_time: float) -> None:
        """Server 0: gather every shard, evaluate the full model, write the eval line and the result."""
        named = list(self.task.model.named_parameters())
        owner = assign([p.numel() for _, p in named], self.lay.servers)
        for server, indices in enumerate(shards(owner, self.lay.servers)):
            if server == 0 or not indices:
                continue
            tensors = [named[i][1] for i in indices]
            flat = torch.empty(sum(t.numel() for t in tensors))
            try:
                transport.wait([transport.recv(flat, server, GATHER_TAG)], server, self.answer_timeout)
            except PeerLost as err:
                raise ServerFailed(
                    f"server {server} on {self.hosts[server]} stopped answering ({err.reason})"
                ) from None
            unflatten_into(flat, tensors)
        heartbeat.mark("eval")
        evaluation = evaluate(self.task, self.task.model, self.train.batch_size)
        if evaluation:
            self.metrics.write("eval", step=self.version, **evaluation, by="server 0")
        if self.train.export_final:
            torch.save(self.task.model.state_dict(), RunDir(self.run_dir).final_model)
        if self.version < self.train.steps:
            return  # serve() reports the failure
        times = (time.time() - self.created, train_time)
        write_result(
            self.run_dir,
            stats.result(
                self.train,
                self.ps,
                self.version,
                self.stats,
                self.staleness,
                evaluation,
                self.hosts,
                times,
                self.last_loss,
            ),
        )
        self.metrics.event("done", step=self.version, wall_time_s=round(times[0], 3))
