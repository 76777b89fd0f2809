"""Elastic training: re-planning on another world, the data order across worlds, and real 4 -> 2 -> 4 runs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st

from hpctrain.runtime import elastic
from hpctrain.runtime.data import Position, ShardedSampler

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "integration"))
import _elastic_job
import _runtime_job as job

# ------------------------------------------------------------------------------------------------
# Accumulation and layout
# ------------------------------------------------------------------------------------------------


def test_accumulation_doubles_when_half_the_shards_are_left() -> None:
    assert elastic.accumulation_for(32, 4, 1, 2) == 2
    assert elastic.accumulation_for(32, 2, 2, 4) == 1  # grown back
    assert elastic.accumulation_for(48, 4, 1, 3) == 2  # 48 = 3 x 2 x 8: micro-batch 8, not 16


def test_accumulation_refuses_a_batch_that_does_not_split() -> None:
    with pytest.raises(elastic.ElasticError, match="not divisible by 3") as caught:
        elastic.accumulation_for(32, 4, 1, 3)
    assert "\n" not in str(caught.value)


@given(
    batch=st.integers(1, 512),
    planned=st.integers(1, 16),
    accum=st.integers(1, 8),
    shards=st.integers(1, 16),
)
def test_accumulation_keeps_the_global_batch_and_never_grows_the_micro_batch(
    batch: int, planned: int, accum: int, shards: int
) -> None:
    assume(batch % (planned * accum) == 0)
    try:
        chosen = elastic.accumulation_for(batch, planned, accum, shards)
    except elastic.ElasticError:
        micro = batch // (planned * accum)
        assert all(batch % (shards * a) or batch // (shards * a) > micro for a in range(1, batch + 1))
        return
    assert batch % (shards * chosen) == 0
    assert batch // (shards * chosen) <= batch // (planned * accum)


def resolved_for(tmp_path: Path, parallel: object, nodes: int = 2, tasks_per_node: int = 2, **train: object):  # type: ignore[no-untyped-def]
    from hpctrain import spec

    train = {"parallel": parallel, "batch_size": 32, **train}
    run = job.write_run_dir(tmp_path, train, nodes, tasks_per_node)
    return spec.loads((run / "spec.json").read_bytes())


def test_replan_shrinks_the_free_dim_and_keeps_tp(tmp_path: Path) -> None:
    resolved = resolved_for(tmp_path, {"dp": -1, "tp": 2})
    plan = elastic.replan(resolved, 2)
    assert plan.changed and plan.world == 2 and plan.planned_world == 4
    assert plan.grad_accum == 2 and plan.planned_accum == 1
    layout = plan.resolved.job.train.parallel_dims.layout(plan.world)
    assert (layout.dp, layout.tp) == (1, 2)
    assert elastic.replan(resolved, 4).resolved is resolved  # the planned world: untouched


def test_replan_refuses_a_world_the_fixed_dims_do_not_divide(tmp_path: Path) -> None:
    resolved = resolved_for(tmp_path, {"dp": -1, "tp": 2})
    with pytest.raises(elastic.ElasticError, match="from 4 to 3 ranks") as caught:
        elastic.replan(resolved, 3)
    assert "\n" not in str(caught.value)


# ------------------------------------------------------------------------------------------------
# Data order
# ------------------------------------------------------------------------------------------------


@given(
    size=st.integers(1, 400),
    batch=st.integers(1, 64),
    worlds=st.lists(st.integers(1, 16), min_size=2, max_size=4),
    step=st.integers(0, 200),
    seed=st.integers(0, 2**31),
)
def test_every_world_reads_the_same_global_batch_at_every_step(
    size: int, batch: int, worlds: list[int], step: int, seed: int
) -> None:
    """The samples of step k (the union over data ranks, in rank order) do not depend on the world."""
    assume(size >= batch and all(batch % world == 0 for world in worlds))
    batches = []
    for world in worlds:
        samplers = [ShardedSampler(size, batch, rank, world, seed) for rank in range(world)]
        position = samplers[0].position_at(step)
        batches.append(torch.cat([sampler.indices(position) for sampler in samplers]))
    assert all(torch.equal(batches[0], other) for other in batches[1:])


@given(worlds=st.lists(st.sampled_from([1, 2, 4, 8]), min_size=1, max_size=6), steps=st.integers(1, 40))
def test_positions_carried_across_world_changes_replay_the_single_world_order(
    worlds: list[int], steps: int
) -> None:
    """A run whose world changes at every segment (the position travels in the checkpoint) reads
    what one world reads."""
    size, batch, seed = 100, 8, 3
    reference = ShardedSampler(size, batch, 0, 1, seed)
    position = Position()
    for segment, world in enumerate(worlds):
        samplers = [ShardedSampler(size, batch, rank, world, seed) for rank in range(world)]
        for step in range(segment * steps, (segment + 1) * steps):
            union = torch.cat([sampler.indices(position) for sampler in samplers])
            assert torch.equal(union, reference.indices(reference.position_at(step)))
            position = samplers[0].advance(position)


# ------------------------------------------------------------------------------------------------
# Real runs: 4 ranks, stopped, resumed on 2 (a node lost), and for ddp grown back to 4
# ------------------------------------------------------------------------------------------------

LOG_EVERY = 5
ELASTIC = dict(
    steps=60,
    batch_size=32,
    lr=0.003,
    log_every=LOG_EVERY,
    checkpoint_every=10,
    deterministic=True,
    export_final=True,
    entrypoint="_elastic_job:recording_digits",
    options={"delay_s": 0.03},
)
# A 2-rank world sums each gradient in another order (two micro-batches, then an all-reduce of
# two; instead of an all-reduce of four) and Adam carries the last-bit differences on: close, not bitwise.
PARAMETER_TOLERANCE = 1e-6  # measured: at most 6e-8 after 60 steps (ddp 4-2-4, fsdp 4-2)


def stop_after(run: Path, world: int, step: int) -> int:
    """Start ``world`` ranks, preempt them (flag file) once ``step`` is logged; the step they stopped at."""
    procs = job.start_local(run, world)
    assert job.wait_for(lambda: job.latest_step(run) >= step, timeout=120)
    (run / "preempt.flag").touch()
    assert [p.wait(timeout=120) for p in procs] == [0] * world
    return max(m["step"] for m in job.metrics(run) if m.get("event") == "preempted")


def world_events(run: Path) -> list[tuple[str, int, int, int]]:
    return [
        (m["event"], m["detail"]["from_world"], m["world_size"], m["detail"]["grad_accum"])
        for m in job.metrics(run)
        if m.get("event") in ("shrunk", "grew")
    ]


@pytest.mark.parametrize(("parallel", "worlds"), [("ddp", [4, 2, 4]), ("fsdp", [4, 2])])
def test_training_goes_on_with_fewer_ranks_and_matches_the_uninterrupted_run(
    tmp_path: Path, parallel: str, worlds: list[int]
) -> None:
    train = {**ELASTIC, "parallel": parallel}
    reference = job.write_run_dir(tmp_path / "reference", train, nodes=2, tasks_per_node=2)
    assert job.run_local(reference, 4, timeout=300) == [0] * 4

    run = job.write_run_dir(tmp_path / "run", train, nodes=2, tasks_per_node=2)
    stops = []
    for segment, world in enumerate(worlds[:-1]):
        stops.append(stop_after(run, world, 15 * (segment + 1)))
    assert job.run_local(run, worlds[-1], timeout=300) == [0] * worlds[-1]

    expected = [("shrunk", 4, 2, 2)] + ([("grew", 2, 4, 1)] if worlds[-1] == 4 else [])
    assert world_events(run) == expected
    resumed = [m["step"] for m in job.metrics(run) if m.get("event") == "resumed"]
    assert resumed == stops  # every segment went on from the checkpoint its predecessor left
    result = json.loads((run / "result.json").read_text())
    assert result["step"] == 60 and result["world_size"] == worlds[-1]

    # The same samples, step for step: the logged losses (the mean over the global batch and over the
    # steps since the last line) agree, except on a line whose interval a stop cut short.
    assert _elastic_job.seen(run) == _elastic_job.seen(reference)
    losses = {m["step"]: m["loss"] for m in job.metrics(reference) if m["kind"] == "train"}
    lines = [m for m in job.metrics(run) if m["kind"] == "train"]
    whole = [m for m in lines if not any(m["step"] - LOG_EVERY < stop < m["step"] for stop in stops)]
    assert len(whole) >= len(losses) - len(stops)
    for line in whole:
        assert line["loss"] == pytest.approx(losses[line["step"]], abs=1e-4), line["step"]
    finished = json.loads((reference / "result.json").read_text())
    assert abs(result["eval_accuracy"] - finished["eval_accuracy"]) <= 0.01
    model, expected_model = (torch.load(r / "final_model.pt") for r in (run, reference))
    for name, tensor in expected_model.items():
        torch.testing.assert_close(model[name], tensor, rtol=0, atol=PARAMETER_TOLERANCE, msg=name)


def test_a_world_that_cannot_keep_the_global_batch_fails_with_one_line(tmp_path: Path) -> None:
    run = job.write_run_dir(tmp_path, {**ELASTIC, "entrypoint": "hpctrain.examples.digits:build"}, 2, 2)
    codes = job.run_local(run, 3, timeout=180)
    assert all(code not in (0, None) for code in codes)
    report = json.loads((run / "failures" / "rank-0.json").read_text())
    assert report["error_type"] == "ElasticError"
    assert report["message"] == (
        "cannot keep the global batch of 32 on 3 data shards: "
        "32 is not divisible by 3 x any accumulation of at least 2"
    )
