"""Sweeps without a cluster: grid and --random expansion, trial validation, chunk plans, status parsing."""

from __future__ import annotations

import itertools
import time
from pathlib import Path

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpctrain import rundir, spec
from hpctrain.scheduler.base import Limits, incomplete_arrays, merge_accounting
from hpctrain.scheduler.slurm.parse import parse_sacct, parse_squeue
from hpctrain.sweep import grid as sweep_grid
from hpctrain.sweep import plan as sweep
from hpctrain.sweep.status import Polled, element_states, rank, summarize
from tests.conftest import JOBS, SITES, run_cli

KEYS = st.lists(st.sampled_from(["train.lr", "train.seed", "train.steps", "train.batch_size"]), unique=True)
GRIDS = KEYS.flatmap(
    lambda keys: st.fixed_dictionaries(
        {k: st.lists(st.integers(0, 10**6), min_size=1, max_size=5, unique=True) for k in keys}
    )
).filter(bool)


@given(GRIDS)
def test_grid_expands_to_every_combination_once(grid: dict[str, list[int]]) -> None:
    trials = sweep_grid.expand(grid)
    as_tuples = [tuple(t[k] for k in grid) for t in trials]
    assert as_tuples == list(itertools.product(*grid.values()))
    assert len(set(as_tuples)) == len(trials) == sweep_grid.grid_size(grid)


@given(GRIDS, st.data(), st.integers(0, 2**32))
def test_random_draw_is_distinct_deterministic_and_inside_the_grid(
    grid: dict[str, list[int]], data: st.DataObject, seed: int
) -> None:
    total = sweep_grid.grid_size(grid)
    draw = data.draw(st.integers(1, total))
    trials = sweep_grid.expand(grid, draw, seed)
    as_tuples = [tuple(t[k] for k in grid) for t in trials]
    assert len(trials) == draw == len(set(as_tuples))
    assert set(as_tuples) <= set(itertools.product(*grid.values()))
    assert sweep_grid.expand(grid, draw, seed) == trials


def test_random_draw_from_a_huge_grid_does_not_enumerate_it() -> None:
    grid = {f"train.options.k{i}": list(range(100)) for i in range(12)}  # 10**24 combinations
    start = time.perf_counter()
    trials = sweep_grid.expand(grid, 50, seed=3)
    assert len({tuple(t.values()) for t in trials}) == 50
    assert time.perf_counter() - start < 1.0


@pytest.mark.parametrize(
    ("grid", "draw", "message"),
    [
        ({}, None, "nothing to sweep"),
        ({"train.lr": []}, None, "sweep.grid.train.lr: no values"),
        ({"train.lr": [0.1, 0.1]}, None, "0.1 is listed twice"),
        ({"train.lr": [0.1, 0.2]}, 3, "3 trials asked, the grid has only 2"),
    ],
)
def test_bad_grids_are_refused(grid: dict[str, list[float]], draw: int | None, message: str) -> None:
    with pytest.raises(spec.SpecError, match=message):
        sweep_grid.expand(grid, draw)


def test_grid_option_values_parse_like_set_values() -> None:
    assert sweep_grid.parse_grid_option("train.lr=1e-3,3e-3,0.01") == ("train.lr", [0.001, 0.003, 0.01])
    assert sweep_grid.parse_grid_option("train.parallel=ddp,fsdp") == ("train.parallel", ["ddp", "fsdp"])
    assert sweep_grid.parse_grid_option("train.compile=true,false") == ("train.compile", [True, False])
    with pytest.raises(spec.SpecError, match=r"expected dotted\.key=VALUE1"):
        sweep_grid.parse_grid_option("train.lr")


def test_every_trial_is_validated_and_the_bad_one_is_named() -> None:
    with pytest.raises(spec.SpecError) as err:
        sweep.resolve_trials(
            JOBS / "digits-sweep.yaml", str(SITES / "local.yaml"), [], ["resources.nodes=1,3"]
        )
    message = str(err.value)
    # The command line's keys come after the spec's, and the last key varies fastest.
    assert message.startswith("trial 1 (train.lr=0.0003, train.batch_size=16, resources.nodes=3):")
    assert "resources.nodes: 3 nodes asked" in message


def test_each_trial_gets_its_own_resolved_spec() -> None:
    chosen, trials, resolved = sweep.resolve_trials(
        JOBS / "digits-sweep.yaml", str(SITES / "local.yaml"), ["train.steps=7"], ["train.seed=1,2"]
    )
    assert chosen.max_parallel == 4 and chosen.metric == "eval_loss"
    assert len(trials) == len(resolved) == 4 * 3 * 2
    for trial, one in zip(trials, resolved, strict=True):
        assert one.job.train.lr == trial.params["train.lr"]
        assert one.job.train.batch_size == trial.params["train.batch_size"]
        assert one.job.train.seed == trial.params["train.seed"]
        assert one.job.train.steps == 7 and one.job.array is None
        assert one.job.sweep is not None and one.job.sweep.max_parallel == 4


def test_unknown_swept_field_is_a_spec_error() -> None:
    with pytest.raises(spec.SpecError, match=r"trial 0 \(.*train\.lrr=0\.1\):.*unknown field `lrr`"):
        sweep.resolve_trials(JOBS / "digits-sweep.yaml", str(SITES / "local.yaml"), [], ["train.lrr=0.1"])


def test_invalid_trial_exits_2_and_creates_nothing(hpctrain_home: Path) -> None:
    proc = run_cli(
        "sweep", str(JOBS / "digits-sweep.yaml"), "--site", "local", "--grid", "train.batch_size=16,0"
    )
    assert proc.returncode == 2, proc.stderr
    assert "trial 1 (train.lr=0.0003, train.batch_size=0)" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (hpctrain_home / "runs").exists() or not any((hpctrain_home / "runs").iterdir())


@given(
    st.lists(st.integers(1, 2000), min_size=1, max_size=4),
    st.integers(1, 1200),
    st.one_of(st.none(), st.integers(1, 50)),
)
def test_chunks_cover_every_trial_once_below_the_index_cap_and_inside_their_group(
    groups: list[int], cap: int, parallel: int | None
) -> None:
    chunks = sweep.plan_chunks(groups, cap, parallel)
    covered = [c.offset + i for c in chunks for i in range(c.count)]
    assert covered == list(range(sum(groups)))
    assert all(1 <= c.count <= cap for c in chunks)  # the highest index, count - 1, stays below the cap
    starts = list(itertools.accumulate(groups, initial=0))
    group_of = [g for g, size in enumerate(groups) for _ in range(size)]
    for chunk in chunks:  # an array holds trials of one group only
        assert group_of[chunk.offset] == group_of[chunk.offset + chunk.count - 1]
    assert {c.offset for c in chunks} >= set(starts[:-1])
    if parallel is None:
        assert all(c.throttle is None and c.after is None for c in chunks)
        return
    lanes = [c for c in chunks if c.after is None]
    assert sum(c.throttle or 0 for c in lanes) == parallel or len(lanes) == len(chunks) == sum(
        c.throttle or 0 for c in lanes
    )
    for position, chunk in enumerate(chunks):
        if chunk.after is not None:  # a chained chunk starts after the one before it in its lane
            assert chunk.after < position and chunks[chunk.after].throttle == chunk.throttle


def test_twelve_trials_at_max_array_size_five() -> None:
    chunks = sweep.plan_chunks([12], 5, 4)
    assert [(c.offset, c.array) for c in chunks] == [(0, "0-4%2"), (5, "0-4%1"), (10, "0-1%1")]


def make_record(trials: int, chunks: list[sweep.ArrayChunk], metric: str = "eval_loss") -> sweep.SweepRecord:
    return sweep.SweepRecord(
        sweep_id="s",
        name="n",
        site="local",
        backend="slurm",
        submitted_at=0.0,
        metric=metric,
        mode="min",
        params=["train.lr"],
        trials=[sweep.Trial(i, {"train.lr": 0.1 * (i + 1)}) for i in range(trials)],
        arrays=chunks,
    )


def test_squeue_rows_map_to_trials_through_offsets_and_ranges() -> None:
    record = make_record(
        12,
        [
            sweep.ArrayChunk(offset=0, count=5, job_id="10"),
            sweep.ArrayChunk(offset=5, count=5, job_id="11"),
            sweep.ArrayChunk(offset=10, count=2, job_id="12"),
        ],
    )
    squeue = (
        "10_0|RUNNING|None||\n10_[1-4%2]|PENDING|JobArrayTaskLimit||\n"
        "11_3|COMPLETED|None||\n12_1|FAILED|x||\n99_1|RUNNING|None||\n"
    )
    found = parse_squeue(squeue, {"10", "11", "12"})
    accounting = parse_sacct("11_3|FAILED|0:0||\n12_0|COMPLETED|0:0||\n", {"11", "12"})
    for job_id in incomplete_arrays(found, {"10": 5, "11": 5, "12": 2}):
        found[job_id] = merge_accounting(found[job_id], accounting[job_id])
    states = element_states(record, found)
    assert states[0] == Polled("RUNNING", "", True)
    assert states[4] == Polled("PENDING", "JobArrayTaskLimit", False)
    assert states[8].state == "COMPLETED"  # squeue wins over sacct
    assert states[10].state == "COMPLETED" and states[11].state == "FAILED"
    assert set(states) == {0, 1, 2, 3, 4, 8, 10, 11}


def test_a_hostile_range_is_bounded_by_the_array_size() -> None:
    record = make_record(3, [sweep.ArrayChunk(offset=0, count=3, job_id="7")])
    start = time.perf_counter()
    found = parse_squeue("7_[0-99999999999%4]|PENDING|None||\n7_[2-1-3]|PENDING|None||\n", {"7"})
    states = element_states(record, found)
    assert set(states) == {0, 1, 2} and time.perf_counter() - start < 0.5


def test_status_ranks_trials_by_result_then_by_metrics_so_far(tmp_path: Path) -> None:
    record = make_record(4, [sweep.ArrayChunk(offset=0, count=4, job_id="7")])
    run = rundir.RunDir(tmp_path)
    for index, loss in [(0, 0.5), (2, 0.2)]:
        element = run.element(index)
        element.root.mkdir(parents=True)
        element.write_result(rundir.Result(step=10, steps=10, eval_loss=loss))
    running = run.element(1)
    running.root.mkdir()
    running.append_metric(rundir.metric_line("train", step=4, steps=10, loss=0.9))
    running.append_metric(rundir.metric_line("eval", step=4, loss=0.3))
    (run.element(3).root).mkdir()
    (run.element(3).result).write_text("[1]")
    polled = {0: Polled("COMPLETED"), 1: Polled("RUNNING"), 2: Polled("COMPLETED")}
    summary = summarize(tmp_path, record, polled)
    assert [t.index for t in rank(summary.trials, "min")] == [2, 1, 0, 3]
    assert summary.best is not None and summary.best.index == 2 and summary.best.metric == 0.2
    assert summary.counts == {"COMPLETED": 2, "RUNNING": 1, "UNKNOWN": 1}
    assert summary.trials[1].step == 4 and "unreadable" in summary.trials[3].problem
    assert [t.index for t in rank(summary.trials, "max")][:3] == [0, 1, 2]
    # Finished trials are cached: the next poll does not need their run directories.
    finished = msgspec.json.decode((tmp_path / "trials-final.json").read_bytes())
    assert sorted(finished["trials"]) == ["0", "2"]


def test_report_plots_the_metric_against_each_parameter(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="the report verb needs matplotlib")
    from hpctrain.report.trials import parameters_figure as plot

    record = make_record(3, [sweep.ArrayChunk(offset=0, count=3, job_id="7")])
    for index in range(3):
        element = rundir.RunDir(tmp_path).element(index)
        element.root.mkdir(parents=True)
        element.write_result(rundir.Result(step=1, steps=1, eval_loss=1.0 / (index + 1)))
    summary = summarize(tmp_path, record, {i: Polled("COMPLETED") for i in range(3)})
    out = plot(summary, tmp_path / "report.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 5000


@pytest.mark.parametrize("keys", [[], ["123"], ["20"], ["no-such-run"]])
def test_status_hook_leaves_other_keys_to_status(hpctrain_home: Path, keys: list[str]) -> None:
    import argparse

    from hpctrain.cli.sweep_cmd import status_hook

    assert status_hook(argparse.Namespace(jobs=keys, json=False, trials=False)) is None


def test_early_stop_rungs_and_the_worse_half() -> None:
    from hpctrain.supervisor.prune import judge, rungs

    assert rungs(20, 100) == [20, 40, 80] and rungs(50, 50) == []
    assert judge(2.0, [1.0, 1.5], "min", 3) == 1.5
    assert judge(1.0, [1.5, 2.0], "min", 3) is None
    assert judge(0.5, [0.9, 0.8], "max", 3) == 0.8
    assert judge(9.0, [1.0], "min", 3) is None  # too few peers to judge


def test_early_stop_record_names_the_step_the_value_and_the_median(tmp_path: Path) -> None:
    from hpctrain.supervisor.prune import check

    root = rundir.RunDir(tmp_path)
    for index, loss in enumerate([0.4, 0.5, 2.3]):
        element = root.element(index)
        element.root.mkdir()
        element.append_metric(rundir.metric_line("eval", step=20, loss=loss))
    settings = spec.Sweep(early_stop=spec.EarlyStop(after_steps=20, min_trials=3))
    stopped = check(root.element(2), settings, 20)
    assert stopped is not None and (stopped.value, stopped.median, stopped.peers) == (2.3, 0.5, 2)
    assert "eval_loss 2.3 at step 20 is in the worse half of the 3 trials there (median 0.5" in stopped.reason
    assert check(root.element(0), settings, 20) is None
    assert check(root.element(2), settings, 40) is None  # no evaluation at that step yet


def test_early_stop_needs_evaluations_at_its_steps() -> None:
    with pytest.raises(spec.SpecError, match=r"multiple of train\.eval_every"):
        sweep.resolve_trials(
            JOBS / "digits-sweep.yaml",
            str(SITES / "local.yaml"),
            ["sweep.early_stop.after_steps=25"],
            ["train.seed=1,2"],
        )


def test_max_submit_jobs_refuses_a_sweep_that_would_go_over() -> None:
    sweep.check_size(10, 10_000, Limits(max_array_size=1001))  # no accounting limit: anything goes
    sweep.check_size(10, 10_000, Limits(max_array_size=1001, max_submit_jobs=12, queued=2))
    with pytest.raises(spec.SpecError, match=r"11 trials would exceed this user's MaxSubmitJobs=12 \(2 jobs"):
        sweep.check_size(11, 10_000, Limits(max_array_size=1001, max_submit_jobs=12, queued=2))
    with pytest.raises(spec.SpecError, match="MaxArraySize=0"):
        sweep.check_size(3, 10_000, Limits(max_array_size=0))
    with pytest.raises(spec.SpecError, match="MaxArraySize=0"):
        sweep.plan_chunks([3], 0)
