"""Sweeps without a cluster: grid and --random expansion, trial validation, chunk plans, status parsing."""

from __future__ import annotations

import itertools
import math
import subprocess
from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpctrain import rundir, spec
from hpctrain.scheduler.base import Backend, JobInfo, Limits, incomplete_arrays, merge_accounting
from hpctrain.scheduler.slurm.parse import parse_sacct, parse_squeue
from hpctrain.sweep import plan as sweep
from hpctrain.sweep import samplers
from hpctrain.sweep.status import Polled, element_states, rank, summarize
from tests.conftest import JOBS, SITES, run_cli
from tests.unit.scheduler.test_render import shellcheck


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
    # A range of 10**18 elements: walking it would never end (the suite's timeout fails it).
    found = parse_squeue("7_[0-999999999999999999%4]|PENDING|None||\n7_[2-1-3]|PENDING|None||\n", {"7"})
    states = element_states(record, found)
    assert set(states) == {0, 1, 2}


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


class RecordingBackend(Backend):
    """The Slurm backend's rendering, with sbatch replaced by a list of the scripts it was given."""

    name = "recording"

    def __init__(self, limits: Limits | None = None) -> None:
        self.scripts: list[Path] = []
        self._limits = limits or Limits(max_array_size=1001)

    def limits(self) -> Limits:
        return self._limits

    def submit(self, script: Path, run_dir: Path, batch: object = None) -> str:
        self.scripts.append(script)
        return str(100 + len(self.scripts))

    def poll(self, job_ids: object, array_sizes: object = None) -> dict[str, JobInfo]:
        return {}

    def cancel(self, job_ids: object) -> None:
        raise AssertionError("nothing to cancel")


@pytest.fixture
def recording(monkeypatch: pytest.MonkeyPatch, hpctrain_home: Path) -> RecordingBackend:
    backend = RecordingBackend()
    monkeypatch.setattr("hpctrain.scheduler.select_backend", lambda name=None: backend)
    return backend


def submit_grid(*grid: str, overrides: tuple[str, ...] = ("sweep.grid={}",)) -> sweep.SweepRecord:
    return sweep.submit(JOBS / "digits-sweep.yaml", str(SITES / "local.yaml"), list(overrides), list(grid))


def directives(script: Path) -> list[str]:
    return [line for line in script.read_text().splitlines() if line.startswith("#SBATCH")]


def test_env_and_memory_sweep_is_one_array_per_memory_with_each_trials_own_env(
    recording: RecordingBackend, tmp_path: Path
) -> None:
    record = submit_grid("env.FOO=alpha,beta", "resources.mem=1G,2G")
    # Numbered group by group: the 1G trials first, in grid order within.
    assert [t.params for t in record.trials] == [
        {"env.FOO": "alpha", "resources.mem": "1G"},
        {"env.FOO": "beta", "resources.mem": "1G"},
        {"env.FOO": "alpha", "resources.mem": "2G"},
        {"env.FOO": "beta", "resources.mem": "2G"},
    ]
    assert [(c.offset, c.count, c.job_id) for c in record.arrays] == [(0, 2, "101"), (2, 2, "102")]
    first, second = recording.scripts
    assert first.name == "job.sbatch" and second.name == "job+2.sbatch"
    assert "#SBATCH --mem=1024M" in directives(first) and "#SBATCH --mem=2048M" in directives(second)
    root = first.parent
    for trial in record.trials:
        element = rundir.RunDir(root).element(trial.index)
        exported = subprocess.run(
            ["bash", "-c", f'. "{element.trial_env}"; printf %s "$FOO"'], capture_output=True, text=True
        )
        assert exported.stdout == trial.params["env.FOO"]
        assert spec.loads(element.spec.read_bytes()).job.resources.mem == trial.params["resources.mem"]
    for script in recording.scripts:  # the swept variable is the element's own, never the script's
        assert "FOO=" not in script.read_text() and "trial-env.sh" in script.read_text()
        shellcheck(script.read_text(), tmp_path)


def test_a_swept_value_is_exported_literally(recording: RecordingBackend) -> None:
    record = submit_grid("env.FOO=it's $(touch pwned) `x`,true")
    root = recording.scripts[0].parent
    values = []
    for trial in record.trials:
        path = rundir.RunDir(root).element(trial.index).trial_env
        shown = subprocess.run(
            ["bash", "-c", f'. "{path}"; printf %s "$FOO"'], capture_output=True, text=True
        )
        values.append(shown.stdout)
    assert values == ["it's $(touch pwned) `x`", "1"]  # a boolean is 1 or 0, as in the script
    assert not (root / "pwned").exists() and not Path("pwned").exists()


def test_node_counts_go_out_as_one_array_each(recording: RecordingBackend) -> None:
    record = submit_grid("resources.nodes=1,2", "train.lr=0.1,0.2")
    assert [(c.offset, c.count) for c in record.arrays] == [(0, 2), (2, 2)]
    assert [next(d for d in directives(s) if "--nodes" in d) for s in recording.scripts] == [
        "#SBATCH --nodes=1",
        "#SBATCH --nodes=2",
    ]
    assert not (recording.scripts[0].parent / "array-0" / "trial-env.sh").exists()  # no env.* swept


def test_trials_that_differ_in_training_only_share_one_array(recording: RecordingBackend) -> None:
    record = submit_grid(
        "train.lr=0.1,0.2", "train.steps=5,7", "train.options.hidden=8,16", "train.parallel=ddp,fsdp"
    )
    assert len(record.trials) == 16 and [(c.offset, c.count) for c in record.arrays] == [(0, 16)]
    assert [t.index for t in record.trials] == list(range(16))
    assert record.trials[1].params["train.parallel"] == "fsdp"  # grid order kept: one group


def test_a_sweep_over_its_own_settings_is_refused() -> None:
    with pytest.raises(spec.SpecError, match=r"sweep\.grid\.sweep\.metric: a sweep's own settings"):
        sweep.resolve_trials(JOBS / "digits-sweep.yaml", str(SITES / "local.yaml"), [], ["sweep.metric=a,b"])


def never_expanded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make any expansion of a grid into its points fail the test: a refusal must come from the
    count alone."""

    def expanded(*args: object, **kwargs: object) -> None:
        raise AssertionError("the grid was expanded before it was refused")

    monkeypatch.setattr(sweep, "points", expanded)
    monkeypatch.setattr(samplers, "expand", expanded)


def test_a_million_point_grid_is_refused_at_once_writing_nothing(
    recording: RecordingBackend, hpctrain_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    grid = [f"train.options.k{i}={','.join(str(v) for v in range(10))}" for i in range(6)]
    never_expanded(monkeypatch)
    with pytest.raises(spec.SpecError, match=r"^sweep: 1000000 trials, more than sweep\.max_trials=10000;"):
        submit_grid(*grid)
    assert not (hpctrain_home / "runs").exists() or not any((hpctrain_home / "runs").iterdir())
    assert recording.scripts == []


def test_the_cluster_limit_is_checked_before_any_trial_is_made(recording: RecordingBackend) -> None:
    recording._limits = Limits(max_array_size=1001, max_submit_jobs=50, queued=45)
    with pytest.raises(spec.SpecError, match="6 trials would exceed this user's MaxSubmitJobs=50"):
        submit_grid("train.lr=1,2,3", "train.seed=1,2")
    recording._limits = Limits(max_array_size=0)
    with pytest.raises(spec.SpecError, match="MaxArraySize=0"):
        submit_grid("train.lr=1,2,3")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 30), min_size=1, max_size=6), st.integers(1, 20_000))
def test_a_grid_is_refused_before_expansion_exactly_when_it_counts_more_than_max_trials(
    lengths: list[int], max_trials: int
) -> None:
    grid = [f"train.options.k{i}={','.join(str(v) for v in range(n))}" for i, n in enumerate(lengths)]
    count = math.prod(lengths)
    if count <= max_trials:
        sweep.check_size(count, max_trials)
        return
    refused = f"^sweep: {count} trials, more than sweep.max_trials={max_trials};"
    with pytest.MonkeyPatch.context() as monkeypatch, pytest.raises(spec.SpecError, match=refused):
        never_expanded(monkeypatch)
        sweep.resolve_trials(
            JOBS / "digits-sweep.yaml",
            str(SITES / "local.yaml"),
            ["sweep.grid={}"],
            grid,
            max_trials=max_trials,
        )


def test_max_trials_is_a_sweep_setting_and_an_option(hpctrain_home: Path) -> None:
    args = ["sweep", str(JOBS / "digits-sweep.yaml"), "--site", "local", "--grid", "train.seed=1,2,3"]
    proc = run_cli(*args, "--max-trials", "20")  # 12 x 3 = 36 trials
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        "hpctrain: error: sweep: 36 trials, more than sweep.max_trials=20; narrow the grid, "
        "draw some with --random N, or raise --max-trials"
    ], proc.stderr
    proc = run_cli(*args, "--set", "sweep.max_trials=30")
    assert proc.returncode == 2 and "more than sweep.max_trials=30" in proc.stderr


def test_a_repeated_grid_key_is_one_line_on_the_command_line(hpctrain_home: Path) -> None:
    proc = run_cli(
        "sweep", str(JOBS / "digits-sweep.yaml"), "--site", "local",
        "--grid", "train.options.x=1", "--grid", "train.options.x=2",
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "hpctrain: error: --grid train.options.x is given twice; "
        "give its values once: --grid train.options.x=1,2"
    ]


def test_no_script_is_made_from_the_training_section() -> None:
    """group_by_script renders once for trials that differ only in train.*: that holds while no
    template reads the job's training section (the runtime reads it from the element's spec.json)."""
    _, _, (one, *_) = sweep.resolve_trials(
        JOBS / "digits-sweep.yaml", str(SITES / "local.yaml"), ["sweep.grid={}"], ["train.lr=0.1"]
    )
    other_train = msgspec.structs.replace(
        one.job.train, lr=0.5, steps=999, batch_size=7, seed=3, options={"x": 1}, eval_every=3, compile=True
    )
    other = msgspec.structs.replace(one, job=msgspec.structs.replace(one.job, train=other_train))
    backend = RecordingBackend()
    scripts = [
        backend.prepare(sweep.array_spec(r, [], "0-1", None), Path("/RUN_DIR")).script for r in (one, other)
    ]
    assert scripts[0] == scripts[1]


def test_an_optuna_round_above_max_array_size_is_refused_when_planned() -> None:
    from hpctrain.errors import SpecError

    job = JOBS / "digits-optuna.yaml"
    with pytest.raises(
        SpecError, match=r"sweep.round_size: a round of 4 trials .* MaxArraySize=3; give --round-size 3"
    ):
        sweep.prepare(job, "local", [], [], Limits(max_array_size=3))
    sweep.prepare(job, "local", [], [], Limits(max_array_size=4))
    sweep.prepare(job, "local", [], [], Limits(max_array_size=3), round_size=3)
