"""A parameter server: owns a shard of tensors, applies workers' gradients, answers with parameters.

One thread per worker receives that worker's messages; all shared state sits behind one condition
variable. ``sync`` averages one gradient per active worker into each update, ``async`` applies every
gradient on arrival, ``bounded`` applies on arrival but holds back the reply to a worker that is
more than ``staleness`` steps ahead of the slowest active one (stale synchronous parallel).
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from hpctrain.spec import Resolved

from . import checkpoint, transport
from .common import JsonLines, build_task, evaluate, lr_factor, make_optimizer, write_json_atomic
from .roles import Layout
from .sharding import assign, flatten, shards, unflatten_into
from .transport import BYE, GATHER_TAG, GRAD_TAG0, PARAMS, PARAMS_TAG, PUSH, Header, PeerLost


class ServerFailed(RuntimeError):
    """Training cannot finish: every worker is gone, or another server stopped answering."""


@dataclass
class WorkerStats:
    samples: int = 0
    pushes: int = 0
    first: float | None = None
    last: float = 0.0
    status: str = "running"
    reason: str = ""


@dataclass
class Window:
    """What server 0 saw since its last metrics line."""

    start: float = field(default_factory=time.time)
    losses: list[float] = field(default_factory=list)
    samples: int = 0
    staleness: list[int] = field(default_factory=list)


class Server:
    def __init__(self, lay: Layout, resolved: Resolved, run_dir: Path, hosts: list[str]) -> None:
        self.lay, self.run_dir, self.hosts = lay, run_dir, hosts
        self.train = resolved.job.train
        ps = resolved.parallel.ps
        assert ps is not None
        self.ps = ps
        self.task = build_task(self.train)
        named = list(self.task.model.named_parameters())
        owner = assign([p.numel() for _, p in named], lay.servers)
        self.mine = shards(owner, lay.servers)[lay.index]
        self.names = [named[i][0] for i in self.mine]
        self.tensors = [named[i][1] for i in self.mine]
        self.opt = make_optimizer(self.task, self.train, self.tensors)
        self.base_lrs = [group["lr"] for group in self.opt.param_groups]
        self.version = 0
        self.clocks = dict.fromkeys(range(lay.workers), 0)
        self.stats = {w: WorkerStats() for w in range(lay.workers)}
        self.cond = threading.Condition()
        self.failure: str | None = None
        self.acc = [torch.zeros_like(t) for t in self.tensors]  # sync: sum of this round's gradients
        self.contrib: set[int] = set()
        self.staleness: list[int] = []
        self.window = Window()
        self._snapshot: tuple[int, torch.Tensor] | None = None
        self._saved_version = -1
        self.started: float | None = None
        self.metrics = JsonLines(run_dir / "metrics.jsonl") if lay.index == 0 else None
        self._resume()
        self.worker_timeout = ps.worker_timeout
        self.first_timeout = float(self.train.timeout_s)
        self.answer_timeout = float(self.train.timeout_s) + ps.worker_timeout

    # ------------------------------------------------------------------ state

    def _resume(self) -> None:
        latest = checkpoint.load_latest(self.run_dir)
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
        self._event("resumed", step=step)

    def _active(self) -> list[int]:
        return [w for w, s in self.stats.items() if s.status == "running"]

    def _done(self) -> bool:
        return self.version >= self.train.steps or self.failure is not None or not self._active()

    def _apply(self, grads: list[torch.Tensor], scale: float = 1.0) -> None:
        factor = lr_factor(self.train, self.version)
        for group, base in zip(self.opt.param_groups, self.base_lrs, strict=True):
            group["lr"] = base * factor
        for tensor, grad in zip(self.tensors, grads, strict=True):
            tensor.grad = grad * scale if scale != 1.0 else grad
        self.opt.step()
        for tensor in self.tensors:
            tensor.grad = None
        self.version += 1
        self._after_update()

    def _after_update(self) -> None:
        every = self.train.checkpoint_every
        if every and self.version % every == 0:
            self._save()
        if self.metrics is not None and self.version % self.train.log_every == 0:
            self._log_train()
        self.cond.notify_all()

    def _save(self) -> None:
        if self._saved_version == self.version:
            return
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
        if self.metrics is not None:
            self.metrics.write({"kind": "event", "event": event, **fields})
        else:
            print(f"hpctrain ps: server {self.lay.index}: {event} {fields}", file=sys.stderr, flush=True)

    def _record(self, worker: int, header: Header, staleness: int | None) -> None:
        now = time.time()
        if self.started is None:  # the clock of the metrics starts with training, not with imports
            self.started = self.window.start = now
            if self.metrics is not None:
                self.metrics.start = now
        stats = self.stats[worker]
        stats.first = stats.first if stats.first is not None else now
        stats.last, stats.samples, stats.pushes = now, stats.samples + header.samples, stats.pushes + 1
        self.window.losses.append(header.loss)
        self.window.samples += header.samples
        if staleness is not None:
            self.window.staleness.append(staleness)
            self.staleness.append(staleness)
        if self.metrics is not None and header.eval_version >= 0:
            self.metrics.write(
                {
                    "kind": "eval",
                    "step": header.eval_version,
                    "loss": header.eval_loss,
                    "accuracy": header.eval_accuracy,
                    "by": f"worker {worker}",
                }
            )

    def _log_train(self) -> None:
        assert self.metrics is not None
        win, now = self.window, time.time()
        stale = win.staleness or [0]
        self.metrics.write(
            {
                "kind": "train",
                "step": self.version,
                "steps": self.train.steps,
                "loss": sum(win.losses) / max(1, len(win.losses)),
                "samples_per_s": win.samples / max(1e-9, now - win.start),
                "staleness_mean": sum(stale) / len(stale),
                "staleness_max": max(stale),
                "workers_alive": len(self._active()),
                "mode": self.ps.mode,
            }
        )
        self.window = Window(start=now)

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
                transport.wait(sends, peer, self.worker_timeout)
        except PeerLost as err:
            with self.cond:
                self.stats[worker].status, self.stats[worker].reason = "dropped", err.reason
                self._event("worker_dropped", worker=worker, reason=err.reason, step=self.version)
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

    def _finish(self, wall: float) -> None:
        """Server 0: gather every shard, evaluate the full model, write the eval line and result.json."""
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
        assert self.metrics is not None
        result = evaluate(self.task, self.task.model)
        if result:
            self.metrics.write({"kind": "eval", "step": self.version, **result, "by": "server 0"})
        if self.train.export_final:
            torch.save(self.task.model.state_dict(), self.run_dir / "final_model.pt")
        total = sum(s.samples for s in self.stats.values())
        stale = self.staleness or [0]
        write_json_atomic(
            self.run_dir / "result.json",
            {
                "parallel": "ps",
                "mode": self.ps.mode,
                "servers": self.lay.servers,
                "workers": self.lay.workers,
                "nodes": {
                    "servers": self.hosts[: self.lay.servers],
                    "workers": self.hosts[self.lay.servers :],
                },
                "final_step": self.version,
                "steps": self.train.steps,
                "eval": result,
                "wall_time_s": round(wall, 3),
                "samples": total,
                "samples_per_s": total / max(1e-9, wall),
                "staleness_mean": sum(stale) / len(stale),
                "staleness_max": max(stale),
                "per_worker": {
                    str(w): {
                        "status": s.status,
                        "reason": s.reason,
                        "steps": s.pushes,
                        "samples": s.samples,
                        "samples_per_s": s.samples / max(1e-9, s.last - (s.first or s.last))
                        if s.pushes > 1
                        else 0.0,
                    }
                    for w, s in self.stats.items()
                },
            },
        )
        self.metrics.close()
