"""The job's DeviceMesh over ("pp", "dp", "fsdp", "tp"), and each rank's coordinate in it.

Ranks are laid out with tp innermost (tensor-parallel peers are consecutive ranks, so on one
node), then fsdp, then dp, then pp outermost:
``rank = ((pp_i * dp + dp_i) * fsdp + fsdp_i) * tp + tp_i``.
The coordinate arithmetic is pure, so it is tested without a process group.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

    from hpctrain.spec import Parallel, Resolved

DIMS: tuple[str, ...] = ("pp", "dp", "fsdp", "tp")


def sizes(parallel: Parallel) -> dict[str, int]:
    return {name: int(getattr(parallel, name)) for name in DIMS}


def coordinates(rank: int, parallel: Parallel) -> dict[str, int]:
    """This rank's index along every dimension (size-1 dims give 0)."""
    coords: dict[str, int] = {}
    rest = rank
    for name in reversed(DIMS):
        size = sizes(parallel)[name]
        coords[name] = rest % size
        rest //= size
    if rest:
        raise ValueError(f"rank {rank} is outside the {'x'.join(map(str, sizes(parallel).values()))} mesh")
    return {name: coords[name] for name in DIMS}


def data_coordinate(rank: int, parallel: Parallel) -> tuple[int, int]:
    """(data_rank, data_world): which shard of the data this rank reads, out of dp x fsdp.

    tp and pp peers of one data-parallel replica read the same shard.
    """
    coords = coordinates(rank, parallel)
    dims = sizes(parallel)
    return coords["dp"] * dims["fsdp"] + coords["fsdp"], dims["dp"] * dims["fsdp"]


def requested_dims(resolved: Resolved) -> tuple[str, ...]:
    """The model-parallel dims the spec asked for with -1 ("all ranks"): kept even at size 1.

    So `parallel: fsdp` on one GPU runs FSDP's code path, not a plain single-process loop: a job
    tried on one device exercises the layout it will use on many.
    """
    asked = resolved.job.train.parallel_dims
    return tuple(name for name in ("pp", "fsdp", "tp") if getattr(asked, name) == -1)


def build_mesh(
    parallel: Parallel, world_size: int, device_type: str, keep: tuple[str, ...] = ()
) -> DeviceMesh | None:
    """One DeviceMesh with the dims of size > 1 and the `keep` dims (in DIMS order), or None.

    A job with only data parallelism gets a 1-D ("dp",) mesh; a single process with nothing to keep
    gets None. Needs the default process group.
    """
    from torch.distributed.device_mesh import init_device_mesh

    dims = sizes(parallel)
    product = 1
    for value in dims.values():
        product *= value
    if product != world_size:
        raise ValueError(f"parallel dims {dims} multiply to {product}, not the world size {world_size}")
    names = tuple(name for name in DIMS if dims[name] > 1 or name in keep)
    if not names:
        return None
    shape = tuple(dims[name] for name in names)
    return init_device_mesh(device_type, shape, mesh_dim_names=names)
