"""The parallel layout: pp/dp/fsdp/tp degrees, their checks, which dims are active, each rank's coordinates.

One validated object answers every layout question on both sides. The login node builds it in
``spec.resolve`` (so an impossible layout is refused at submit time) and the runtime builds the same
object from the recorded spec to make its DeviceMesh (``hpctrain.runtime.mesh``) and to pick the
strategy. Torch-free: the CLI imports it.

Ranks are laid out with tp innermost (tensor-parallel peers are consecutive ranks, so on one
node), then fsdp, then dp, then pp outermost:
``rank = ((pp_i * dp + dp_i) * fsdp + fsdp_i) * tp + tp_i``.

A dimension is *active* (``enabled(dim)``, part of the mesh) when its degree is > 1, or when it is a
model-parallel dim (pp, fsdp, tp) that the spec asked for with -1 ("all the rest") and that came
out at 1: ``parallel: fsdp`` on one device runs FSDP's code path, so a job tried on one device
exercises the layout it will use on many.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

DIMS: tuple[str, ...] = ("pp", "dp", "fsdp", "tp")
"""Mesh order, outermost first."""

KEEPABLE: tuple[str, ...] = ("pp", "fsdp", "tp")
"""Dims that stay active at degree 1 when requested with -1 (dp at 1 is just one replica)."""

STRATEGY_ORDER: tuple[str, ...] = ("pp", "tp", "fsdp")
"""Which active dim names the strategy: the pipeline composes tp and fsdp, tp composes fsdp."""


class LayoutError(ValueError):
    """An impossible layout; ``field`` names the culprit (a dim, ``batch_size``, or "" for the whole)."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}" if field else problem)
        self.field = field
        self.problem = problem


def check_request(request: Mapping[str, int]) -> None:
    """The requested degrees (a missing one is 1) are each >= 1 or -1, with at most one -1."""
    for name in DIMS:
        value = request.get(name, 1)
        if isinstance(value, bool) or not isinstance(value, int) or value == 0 or value < -1:
            raise LayoutError(name, f"must be >= 1 or -1, got {value!r}")
    if sum(1 for name in DIMS if request.get(name, 1) == -1) > 1:
        raise LayoutError("", "at most one of dp/fsdp/tp/pp may be -1")


def _check_positive(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise LayoutError(name, f"must be >= 1, got {value!r}")


def _product(values: Mapping[str, int] | list[int]) -> int:
    result = 1
    for value in values.values() if isinstance(values, Mapping) else values:
        result *= value
    return result


class Layout(msgspec.Struct, frozen=True):
    """Degrees whose product is the world size; ``requested``: model-parallel dims asked for with -1,
    active even at degree 1. A msgspec struct, not a dataclass: the CLI imports it, and msgspec is
    loaded already (a dataclass costs the dataclasses import and an ``exec`` at start-up)."""

    world_size: int
    pp: int = 1
    dp: int = 1
    fsdp: int = 1
    tp: int = 1
    requested: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        _check_positive("world_size", self.world_size)
        for name in DIMS:
            _check_positive(name, getattr(self, name))
        odd = set(self.requested) - set(KEEPABLE)
        if odd:
            raise LayoutError(sorted(odd)[0], f"only {'/'.join(KEEPABLE)} can be requested with -1")
        product = _product(self.degrees)
        if product != self.world_size:
            raise LayoutError(
                "",
                f"dp*fsdp*tp*pp = {self.dp}*{self.fsdp}*{self.tp}*{self.pp} = {product} "
                f"but the job has {self.world_size} tasks",
            )

    # ------------------------------------------------------------------------------------------
    # Construction and checks
    # ------------------------------------------------------------------------------------------

    @classmethod
    def plan(cls, request: Mapping[str, int], world_size: int, tasks_per_node: int | None = None) -> Layout:
        """The layout for ``request`` (degrees, one may be -1) on ``world_size`` tasks.

        Fills the -1 with what the others leave, checks the product and, given ``tasks_per_node``,
        that tp peers share a node. Raises :class:`LayoutError` naming the dimension at fault.
        """
        check_request(request)
        _check_positive("world_size", world_size)
        degrees = {name: request.get(name, 1) for name in DIMS}
        free = [name for name in DIMS if degrees[name] == -1]
        if free:
            fixed = {name: value for name, value in degrees.items() if value != -1}
            if world_size % _product(fixed):
                # The order users write them in: dp, fsdp, tp, pp.
                named = " x ".join(f"{n}={fixed[n]}" for n in ("dp", "fsdp", "tp", "pp") if n in fixed)
                raise LayoutError(
                    "", f"{named} = {_product(fixed)} does not divide the world size {world_size}"
                )
            degrees[free[0]] = world_size // _product(fixed)
        requested = frozenset(name for name in free if name in KEEPABLE)
        layout = cls(world_size=world_size, requested=requested, **degrees)
        if tasks_per_node is not None:
            layout.check_node(tasks_per_node)
        return layout

    def check_node(self, tasks_per_node: int) -> None:
        """tp peers are consecutive ranks: a tp group must fit in, and tile, one node."""
        if self.tp > 1 and (self.tp > tasks_per_node or tasks_per_node % self.tp):
            raise LayoutError(
                "tp", f"tp={self.tp} must fit inside one node ({tasks_per_node} tasks per node)"
            )

    def check_batch(self, batch_size: int, grad_accum: int = 1) -> None:
        """The global batch splits evenly over data shards and micro-steps."""
        parts = self.data_world * grad_accum
        if batch_size % parts:
            raise LayoutError("batch_size", f"{batch_size} is not divisible by dp*fsdp*grad_accum = {parts}")

    # ------------------------------------------------------------------------------------------
    # What is active
    # ------------------------------------------------------------------------------------------

    @property
    def degrees(self) -> dict[str, int]:
        """Every dim's degree, in mesh order."""
        return {name: getattr(self, name) for name in DIMS}

    def enabled(self, name: str) -> bool:
        """Whether dim `name` is active: degree > 1, or requested with -1 (the one rule)."""
        return getattr(self, name) > 1 or name in self.requested

    @property
    def mesh_dims(self) -> tuple[str, ...]:
        """The active dims, in mesh order: the DeviceMesh's dim names (empty: no mesh)."""
        return tuple(name for name in DIMS if self.enabled(name))

    @property
    def mesh_shape(self) -> tuple[int, ...]:
        return tuple(getattr(self, name) for name in self.mesh_dims)

    @property
    def strategy(self) -> str:
        """The strategy that runs this layout: pp, tp, fsdp, ddp or single."""
        for name in STRATEGY_ORDER:
            if self.enabled(name):
                return name
        return "ddp" if self.enabled("dp") else "single"

    @property
    def name(self) -> str:
        """One word for logs: the active dims joined by x, dp x fsdp written hsdp."""
        return "x".join(self.mesh_dims).replace("dpxfsdp", "hsdp") or "single"

    # ------------------------------------------------------------------------------------------
    # Coordinates
    # ------------------------------------------------------------------------------------------

    @property
    def data_world(self) -> int:
        """Data shards: one per dp x fsdp coordinate (tp and pp peers read the same one)."""
        return self.dp * self.fsdp

    def coordinates(self, rank: int) -> dict[str, int]:
        """This rank's index along every dimension (degree-1 dims give 0)."""
        if not 0 <= rank < self.world_size:
            raise LayoutError(
                "", f"rank {rank} is outside the {'x'.join(map(str, self.degrees.values()))} mesh"
            )
        coords: dict[str, int] = {}
        rest = rank
        for name in reversed(DIMS):
            coords[name] = rest % getattr(self, name)
            rest //= getattr(self, name)
        return {name: coords[name] for name in DIMS}

    def data_coordinate(self, rank: int) -> tuple[int, int]:
        """(data_rank, data_world): which shard of the data this rank reads, out of dp x fsdp."""
        coords = self.coordinates(rank)
        return coords["dp"] * self.fsdp + coords["fsdp"], self.data_world
