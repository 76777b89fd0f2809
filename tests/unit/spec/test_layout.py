"""The layout object: -1 filling, checks naming the dimension, active dims, coordinates, the DeviceMesh."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpctrain import spec
from hpctrain.spec.layout import DIMS, Layout, LayoutError

SITE = Path(__file__).resolve().parents[3] / "site-configs" / "local.yaml"

degree = st.integers(min_value=1, max_value=4)


@st.composite
def valid_requests(draw: st.DrawFn) -> tuple[dict[str, int], dict[str, int], int]:
    """(request with at most one -1, the degrees it must resolve to, world size)."""
    degrees = {name: draw(degree) for name in DIMS}
    request = dict(degrees)
    free = draw(st.sampled_from((None, *DIMS)))
    if free is not None:
        request[free] = -1
    return request, degrees, math.prod(degrees.values())


def mentions_a_dimension(error: ValueError) -> bool:
    return any(name in str(error) for name in (*DIMS, "world"))


# ----------------------------------------------------------------------------------------------
# Planning and checks
# ----------------------------------------------------------------------------------------------


@given(valid_requests())
def test_valid_requests_resolve_to_their_degrees(case: tuple[dict[str, int], dict[str, int], int]) -> None:
    request, degrees, world = case
    layout = Layout.plan(request, world)
    assert layout.degrees == degrees
    assert math.prod(layout.degrees.values()) == layout.world_size == world
    # Active: > 1, or a model-parallel dim asked for with -1.
    for name in DIMS:
        expected = degrees[name] > 1 or (request[name] == -1 and name != "dp")
        assert layout.enabled(name) is expected
    assert layout.mesh_dims == tuple(n for n in DIMS if layout.enabled(n))
    assert math.prod(layout.mesh_shape) == world


@given(
    request=st.fixed_dictionaries({name: st.integers(min_value=-3, max_value=9) for name in DIMS}),
    world=st.integers(min_value=-2, max_value=200),
    tasks_per_node=st.one_of(st.none(), st.integers(min_value=1, max_value=9)),
    batch=st.integers(min_value=1, max_value=128),
    accum=st.integers(min_value=1, max_value=4),
)
def test_any_request_builds_or_names_the_dimension(
    request: dict[str, int], world: int, tasks_per_node: int | None, batch: int, accum: int
) -> None:
    try:
        layout = Layout.plan(request, world, tasks_per_node)
        layout.check_batch(batch, accum)
    except LayoutError as error:
        assert isinstance(error, ValueError)
        assert error.field in (*DIMS, "world_size", "batch_size", "")
        assert mentions_a_dimension(error) or "batch_size" in error.field, str(error)
        assert "\n" not in str(error)
        return
    assert math.prod(layout.degrees.values()) == world
    assert all(request[n] in (-1, getattr(layout, n)) for n in DIMS)
    if tasks_per_node is not None and layout.tp > 1:
        assert tasks_per_node % layout.tp == 0
    assert batch % (layout.dp * layout.fsdp * accum) == 0


@given(
    st.dictionaries(
        st.sampled_from(DIMS), st.one_of(st.integers(-2, 5), st.booleans(), st.text(max_size=2), st.none())
    ),
    st.one_of(st.integers(-1, 64), st.booleans(), st.floats()),
)
def test_garbage_degrees_are_value_errors(request: dict[str, Any], world: Any) -> None:
    """Wrong types, missing dims (taken as 1): a Layout or a LayoutError, never another exception."""
    try:
        layout = Layout.plan(request, world)
    except LayoutError as error:
        assert mentions_a_dimension(error), str(error)
        return
    assert math.prod(layout.degrees.values()) == world


def test_messages_name_the_conflict() -> None:
    with pytest.raises(LayoutError, match=r"^fsdp=1 x tp=3 x pp=1 = 3 does not divide the world size 4$"):
        Layout.plan({"dp": -1, "fsdp": 1, "tp": 3, "pp": 1}, 4)
    with pytest.raises(LayoutError, match=r"dp\*fsdp\*tp\*pp = 2\*1\*1\*1 = 2 but the job has 4 tasks"):
        Layout.plan({"dp": 2, "fsdp": 1, "tp": 1, "pp": 1}, 4)
    with pytest.raises(LayoutError, match=r"^tp: tp=4 must fit inside one node \(2 tasks per node\)$"):
        Layout.plan({"dp": 1, "fsdp": 1, "tp": 4, "pp": 1}, 4, tasks_per_node=2)
    with pytest.raises(LayoutError, match=r"^dp: must be >= 1 or -1, got 0$"):
        Layout.plan({"dp": 0, "fsdp": 1, "tp": 1, "pp": 1}, 4)
    with pytest.raises(LayoutError, match="at most one of dp/fsdp/tp/pp may be -1"):
        Layout.plan({"dp": -1, "fsdp": -1, "tp": 1, "pp": 1}, 4)
    with pytest.raises(LayoutError, match="batch_size: 6 is not divisible by dp\\*fsdp\\*grad_accum = 4"):
        Layout(world_size=4, dp=2, fsdp=2).check_batch(6)
    with pytest.raises(LayoutError, match="dp: only pp/fsdp/tp can be requested"):
        Layout(world_size=1, requested=frozenset({"dp"}))
    assert Layout.plan({"fsdp": -1}, 4).degrees == {"pp": 1, "dp": 1, "fsdp": 4, "tp": 1}  # missing: 1


@pytest.mark.parametrize(
    ("layout", "strategy", "name"),
    [
        (Layout(world_size=1), "single", "single"),
        (Layout(world_size=4, dp=4), "ddp", "dp"),
        (Layout(world_size=4, fsdp=4), "fsdp", "fsdp"),
        (Layout(world_size=4, dp=2, fsdp=2), "fsdp", "hsdp"),
        (Layout(world_size=4, fsdp=2, tp=2), "tp", "fsdpxtp"),
        (Layout(world_size=8, pp=2, dp=2, tp=2), "pp", "ppxdpxtp"),
        (Layout(world_size=1, requested=frozenset({"fsdp"})), "fsdp", "fsdp"),
        (Layout(world_size=2, dp=2, requested=frozenset({"pp"})), "pp", "ppxdp"),
    ],
)
def test_strategy_is_the_outermost_active_model_dim(layout: Layout, strategy: str, name: str) -> None:
    assert (layout.strategy, layout.name) == (strategy, name)


@given(valid_requests())
def test_coordinates_are_a_bijection_with_tp_innermost(
    case: tuple[dict[str, int], dict[str, int], int],
) -> None:
    request, _, world = case
    layout = Layout.plan(request, world)
    seen = set()
    for rank in range(world):
        coords = layout.coordinates(rank)
        assert all(0 <= coords[n] < getattr(layout, n) for n in DIMS)
        seen.add(tuple(coords.values()))
        flat = (
            (coords["pp"] * layout.dp + coords["dp"]) * layout.fsdp + coords["fsdp"]
        ) * layout.tp + coords["tp"]
        assert flat == rank
        data_rank, data_world = layout.data_coordinate(rank)
        assert data_world == layout.dp * layout.fsdp and 0 <= data_rank < data_world
    assert len(seen) == world


# ----------------------------------------------------------------------------------------------
# The spec on the login side goes through the layout
# ----------------------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    request=st.fixed_dictionaries({name: st.integers(min_value=-2, max_value=5) for name in DIMS}),
    nodes=st.integers(min_value=1, max_value=2),
    tasks=st.integers(min_value=1, max_value=4),
    batch=st.integers(min_value=1, max_value=64),
)
def test_spec_refusals_are_one_line_spec_errors(
    request: dict[str, int], nodes: int, tasks: int, batch: int
) -> None:
    site = spec.load_site(SITE)
    data = {
        "name": "x",
        "train": {"entrypoint": "m:f", "parallel": request, "batch_size": batch},
        "resources": {"nodes": nodes, "tasks_per_node": tasks, "partition": "cpu"},
    }
    try:
        resolved = spec.resolve(spec.decode(spec.JobSpec, data, "job.yaml"), site, "job.yaml")
    except spec.SpecError as error:
        assert "\n" not in str(error)
        assert str(error).startswith(("job.yaml: train.parallel", "job.yaml: train.batch_size")), str(error)
        return
    layout = Layout.plan(request, nodes * tasks, tasks)
    assert resolved.parallel.degrees == layout.degrees


# ----------------------------------------------------------------------------------------------
# The runtime builds the mesh from the same object
# ----------------------------------------------------------------------------------------------


@pytest.fixture
def fake_group() -> Any:
    """A process-group factory on torch's fake backend: any world size, in this one process."""
    dist = pytest.importorskip("torch.distributed")
    fake_pg = pytest.importorskip(
        "torch.testing._internal.distributed.fake_pg", reason="this torch has no fake process group"
    )

    def start(rank: int, world: int) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()
        dist.init_process_group("fake", store=fake_pg.FakeStore(), rank=rank, world_size=world)

    yield start
    if dist.is_initialized():
        dist.destroy_process_group()


# The fixture is a factory that starts a fresh process group on every call.
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=valid_requests(), pick=st.integers(min_value=0, max_value=10**6))
def test_mesh_has_the_active_dims_and_agrees_on_coordinates(
    fake_group: Any, case: tuple[dict[str, int], dict[str, int], int], pick: int
) -> None:
    from hpctrain.runtime.mesh import build_mesh

    request, _, world = case
    layout = Layout.plan(request, world)
    rank = pick % world
    fake_group(rank, world)
    mesh = build_mesh(layout, "cpu")
    if not layout.mesh_dims:
        assert mesh is None and world == 1
        return
    assert mesh is not None
    assert mesh.mesh_dim_names == layout.mesh_dims
    assert tuple(mesh.shape) == layout.mesh_shape
    coords = layout.coordinates(rank)
    assert tuple(mesh.get_coordinate()) == tuple(coords[n] for n in layout.mesh_dims)


def test_mesh_refuses_a_world_of_another_size(fake_group: Any) -> None:
    from hpctrain.runtime.mesh import build_mesh

    fake_group(0, 4)
    with pytest.raises(ValueError, match="needs 8 ranks, the job has 4"):
        build_mesh(Layout(world_size=8, dp=8), "cpu")


def test_placement_of_a_resolved_spec(fake_group: Any) -> None:
    from hpctrain.runtime.mesh import TaskMesh, backend

    job = spec.decode(
        spec.JobSpec,
        {
            "name": "x",
            "train": {"entrypoint": "m:f", "parallel": {"dp": 1, "fsdp": -1, "tp": 2}},
            "resources": {"nodes": 2, "tasks_per_node": 2, "partition": "cpu"},
        },
        "test",
    )
    resolved = spec.resolve(job, spec.load_site(SITE))
    fake_group(3, 4)
    task_mesh = TaskMesh.for_task(resolved, local_rank=1)
    assert task_mesh.device.type == "cpu" and backend(resolved) == "gloo"
    assert task_mesh.layout.degrees == {"pp": 1, "dp": 1, "fsdp": 2, "tp": 2}
    assert task_mesh.mesh is not None and task_mesh.mesh.mesh_dim_names == ("fsdp", "tp")
    assert task_mesh.submesh(("tp",)).size() == 2  # type: ignore[union-attr]
    assert task_mesh.submesh(("pp", "dp")) is None
