"""Parameter-server training: ranks 0..S-1 serve parameter shards, the other ranks compute gradients."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from hpctrain.spec import Resolved


def finished(run_dir: str | Path) -> bool:
    """Did training reach ``train.steps``? (result.json by server 0.) Under ``--kill-on-bad-exit=0``
    a dropped worker leaves a non-zero srun exit code; the batch script asks this instead."""
    import json

    try:
        result = json.loads((Path(run_dir) / "result.json").read_text())
    except (OSError, ValueError):
        return False
    return int(result.get("final_step", -1)) >= int(result.get("steps", 0)) > 0


class PSFailed(RuntimeError):
    """The job cannot finish; the message is one line for the task's stderr."""


def run(
    resolved: Resolved,
    dist_info: Any | None = None,
    run_dir: str | Path | None = None,
    exit_on_failure: bool = True,
) -> None:
    """Run this process's role to the end, or exit the process with code 1 and a one-line error.

    With ``exit_on_failure=False`` a failure raises :class:`PSFailed` (one-line message) instead,
    for a caller that records failures itself.

    ``dist_info``: the runtime's DistInfo (rank, world_size, master_addr, master_port); without it
    the rank comes from the environment. The run directory is ``run_dir``, ``dist_info.run_dir``
    or ``$HPCTRAIN_RUN_DIR``.
    """
    try:
        _run(resolved, dist_info, run_dir)
    except PSFailed as err:
        if not exit_on_failure:
            raise
        print(f"hpctrain ps: {err}", file=sys.stderr, flush=True)
        # os._exit: interpreter teardown may block on gloo pairs to peers that are gone.
        os._exit(1)


def _run(resolved: Resolved, dist_info: Any | None, run_dir: str | Path | None) -> None:
    import torch
    import torch.distributed as dist

    from . import roles, transport
    from .server import Server, ServerFailed
    from .worker import ServerLost, Worker

    ps = resolved.parallel.ps
    if ps is None:
        raise PSFailed("train.parallel has no ps section")
    folder = run_dir or getattr(dist_info, "run_dir", None) or os.environ.get("HPCTRAIN_RUN_DIR")
    if not folder:
        raise PSFailed("no run directory: set HPCTRAIN_RUN_DIR")
    try:
        lay = roles.layout(ps.servers, dist_info)
        roles.check_hetjob(lay)
    except RuntimeError as err:
        raise PSFailed(str(err)) from None
    torch.set_num_threads(max(1, int(os.environ.get("OMP_NUM_THREADS", "1"))))
    try:
        transport.init(lay, float(resolved.job.train.timeout_s))
        hosts: list[Any] = [None] * lay.world_size
        dist.all_gather_object(hosts, lay.node)  # node names, for error messages
    except RuntimeError as err:  # includes DistStoreError and gloo connect failures
        raise PSFailed(
            f"{lay.name} on {lay.node}: could not join the job at {lay.master_addr}:{lay.master_port}: "
            f"{str(err).splitlines()[0] if str(err) else type(err).__name__}"
        ) from None
    names = [str(h) for h in hosts]
    try:
        if lay.is_server:
            Server(lay, resolved, Path(folder), names).serve()
        else:
            Worker(lay, resolved, Path(folder), names).work()
    except (ServerFailed, ServerLost, transport.PeerLost) as err:
        raise PSFailed(f"{lay.name} on {lay.node}: {err}") from None
