"""The runtime half of the layout: the GPU/CPU decision, the process-group backend and the job's DeviceMesh.

``hpctrain.spec.layout.Layout`` says which dims are active and how ranks map onto them; this module
turns that into torch objects. :func:`device_type` is the only place that decides between GPU and
CPU; the backend, the task's device and the mesh all follow from it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from hpctrain.spec.layout import Layout

if TYPE_CHECKING:
    import torch
    from torch.distributed.device_mesh import DeviceMesh

    from hpctrain.spec import Resolved

DeviceType = Literal["cuda", "cpu"]
BACKENDS: dict[str, str] = {"cuda": "nccl", "cpu": "gloo"}


def device_type(resolved: Resolved) -> DeviceType:
    """cuda when the job asked for GPUs and this machine has CUDA, else cpu."""
    import torch

    return "cuda" if resolved.job.resources.gpus_per_node > 0 and torch.cuda.is_available() else "cpu"


def backend(resolved: Resolved) -> str:
    """The process-group backend for this job on this machine: nccl on GPUs, gloo on CPUs."""
    return BACKENDS[device_type(resolved)]


def job_layout(resolved: Resolved) -> Layout:
    """The job's layout, planned from the spec's request so the dims it asked for with -1 stay active."""
    return resolved.job.train.parallel_dims.layout(resolved.world_size)


def build_mesh(layout: Layout, kind: DeviceType) -> DeviceMesh | None:
    """One DeviceMesh over the layout's active dims (in mesh order), or None when none is active.

    A job with only data parallelism gets a 1-D ("dp",) mesh. Needs the default process group.
    """
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    world = dist.get_world_size()
    if world != layout.world_size:
        raise ValueError(f"the layout {layout.degrees} needs {layout.world_size} ranks, the job has {world}")
    if not layout.mesh_dims:
        return None
    return init_device_mesh(kind, layout.mesh_shape, mesh_dim_names=layout.mesh_dims)


def submesh(mesh: DeviceMesh | None, names: Sequence[str]) -> DeviceMesh | None:
    """The sub-mesh over those of ``names`` that the mesh has (it holds only the active dims)."""
    if mesh is None or mesh.mesh_dim_names is None:
        return None
    present = tuple(name for name in names if name in mesh.mesh_dim_names)
    if not present:
        return None
    return mesh[present[0]] if len(present) == 1 else mesh[present]


def bind_device(kind: DeviceType, local_rank: int) -> torch.device:
    """cuda:<local rank> (made current) on GPU jobs, else the CPU.

    Binds by local rank instead of trusting CUDA_VISIBLE_DEVICES, which some sites (and the local
    fake-GPU cluster) leave unset.
    """
    import torch

    if kind == "cuda":
        index = local_rank % torch.cuda.device_count()
        torch.cuda.set_device(index)
        return torch.device("cuda", index)
    return torch.device("cpu")


@dataclass(frozen=True)
class TaskMesh:
    """Where one task computes: the job's layout, this task's device and the job's DeviceMesh."""

    layout: Layout
    device: torch.device
    mesh: DeviceMesh | None

    @classmethod
    def for_task(cls, resolved: Resolved, local_rank: int) -> TaskMesh:
        """Decide the device once, then bind it and build the mesh (needs the process group)."""
        kind = device_type(resolved)
        layout = job_layout(resolved)
        return cls(layout=layout, device=bind_device(kind, local_rank), mesh=build_mesh(layout, kind))

    def submesh(self, names: Sequence[str]) -> DeviceMesh | None:
        return submesh(self.mesh, names)
