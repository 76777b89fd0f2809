"""Parameter-server training as a strategy of the runtime: ranks 0..S-1 serve shards, the rest compute.

The runtime (``python -m hpctrain.runtime``) discovers the ranks, loads the task and records
failures as for every other layout; :func:`run` joins the gloo group and runs this rank's role.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from hpctrain.errors import HpctrainError
from hpctrain.runtime.bootstrap import DistInfo
from hpctrain.spec import Resolved

log = logging.getLogger(__name__)


class PSFailed(HpctrainError, RuntimeError):
    """The job cannot finish; the message is one line naming the rank, its node and the cause."""


def run(resolved: Resolved, info: DistInfo, run_dir: Path) -> None:
    """Run this process's role to the end, or raise :class:`PSFailed` with a one-line message."""
    import torch
    import torch.distributed as dist

    from hpctrain.runtime import bootstrap
    from hpctrain.runtime.metrics import Metrics
    from hpctrain.runtime.train import load_task

    from . import transport
    from .roles import roles
    from .server import Server, ServerFailed
    from .worker import ServerLost, Worker

    ps = resolved.parallel.ps
    assert ps is not None, "not a parameter-server job"
    try:
        lay = roles(info, ps.servers)
    except ValueError as err:
        raise PSFailed(str(err)) from None
    torch.set_num_threads(max(1, int(os.environ.get("OMP_NUM_THREADS", "1"))))
    train = resolved.job.train
    task = load_task(train)
    try:
        bootstrap.init_process_group(info, "gloo", train.timeout_s)
        hosts: list[object] = [None] * lay.info.world_size
        dist.all_gather_object(hosts, lay.info.hostname)  # node names, for error messages and the result
    except RuntimeError as err:  # includes DistStoreError and gloo connect failures
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        where = f"{info.master_addr}:{info.master_port}"
        raise PSFailed(
            f"{lay.name} on {lay.info.hostname}: could not join the job at {where}: {first}"
        ) from None
    names = [str(h) for h in hosts]
    log.info(
        "%s of %d servers + %d workers (%s, %s feeding)",
        lay.name,
        ps.servers,
        lay.workers,
        ps.mode,
        ps.feeding,
    )
    try:
        if lay.is_server:
            Server(lay, resolved, task, run_dir, names, Metrics(run_dir, info.rank)).serve()
        else:
            Worker(lay, resolved, task, run_dir, names).work()
    except (ServerFailed, ServerLost, transport.PeerLost) as err:
        raise PSFailed(f"{lay.name} on {lay.info.hostname}: {err}") from None
