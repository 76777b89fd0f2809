"""A test entrypoint for the report's straggler test: digits where one rank sleeps in every forward.

The job imports it as ``_report_job:slow_rank_digits`` with this folder on its PYTHONPATH.
"""

from __future__ import annotations

import time


def slow_rank_digits(train):  # type: ignore[no-untyped-def]
    """digits, with ``train.options.delay_s`` seconds of sleep per training forward on rank
    ``train.options.slow_rank`` only: that rank computes slower and the others wait for it."""
    import torch
    import torch.distributed as dist

    from hpctrain.examples import digits

    task = digits.build(train)
    delay = float(train.options.get("delay_s", 0.02))
    slow = int(train.options.get("slow_rank", 0))
    inner = task.loss

    def loss(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        if outputs.requires_grad and dist.is_initialized() and dist.get_rank() == slow:
            time.sleep(delay)
        return inner(outputs, targets)

    task.loss = loss
    return task
