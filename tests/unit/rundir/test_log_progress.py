"""Progress from a log: presets on real-looking lines, custom patterns, garbage, what status reads back."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpctrain.cli.view.progress import job_progress
from hpctrain.errors import SpecError
from hpctrain.rundir import EvalLine, LogProgressState, RunDir, TrainLine
from hpctrain.rundir import log_progress as log_progress_module
from hpctrain.rundir.log_progress import PRESETS, LogProgress, compile_progress
from hpctrain.runtime.tensorboard_log import scalars
from hpctrain.tracking.poll import read_progress


def lines_of(run_dir: Path) -> list[TrainLine | EvalLine]:
    found = RunDir(run_dir).read_metrics(head=0, tail=1000)
    assert all(isinstance(line, TrainLine | EvalLine) for line in found), found
    return found  # type: ignore[return-value]


def feed_all(
    run_dir: Path, preset: str | None, text: str, pattern: str | None = None, **kw: int
) -> LogProgress:
    progress = LogProgress(run_dir, compile_progress(pattern, preset), **kw)
    for line in text.splitlines(keepends=True):
        progress.feed(line)
    progress.close()
    return progress


HF_TRAINER_LOG = """\
***** Running training *****
  Num examples = 1,000
  Total optimization steps = 60
{'loss': 2.3026, 'grad_norm': 1.8342, 'learning_rate': 4.9e-05, 'epoch': 0.33}
  5%|▌         | 3/60 [00:01<00:20,  2.81it/s]
{'loss': 1.9012, 'grad_norm': 1.5011, 'learning_rate': 4.1e-05, 'epoch': 0.67}
{'eval_loss': 1.7734, 'eval_accuracy': 0.61, 'eval_runtime': 0.5, 'eval_steps_per_second': 9, 'epoch': 1.0}
{'loss': '1.6543', 'grad_norm': '1.2', 'learning_rate': '3.3e-05', 'epoch': '1.33'}
{'train_runtime': 21.3, 'train_samples_per_second': 140.8, 'train_loss': 1.95, 'epoch': 3.0}
"""


def test_hf_trainer_preset_counts_log_lines_and_splits_eval(tmp_path: Path) -> None:
    feed_all(tmp_path, "hf-trainer", HF_TRAINER_LOG)
    train = [line for line in lines_of(tmp_path) if isinstance(line, TrainLine)]
    evals = [line for line in lines_of(tmp_path) if isinstance(line, EvalLine)]
    assert [(t.step, t.loss, t.lr) for t in train] == [
        (1, 2.3026, 4.9e-05),
        (2, 1.9012, 4.1e-05),
        (3, 1.6543, 3.3e-05),
    ]
    assert train[0].metrics == {"grad_norm": 1.8342, "epoch": 0.33}
    # The eval dict belongs to the last counted step, and makes no train line (the summary line neither).
    assert [(e.step, e.loss, e.accuracy) for e in evals] == [(2, 1.7734, 0.61)]


def test_a_restarted_hf_trainer_counts_on_from_its_checkpoints_epoch_and_anew_when_it_started_over(
    tmp_path: Path,
) -> None:
    def attempt(epochs: list[float]) -> list[int]:
        before = len(lines_of(tmp_path))
        log = "".join(f"{{'loss': {1 / e:.4f}, 'learning_rate': 1e-05, 'epoch': {e}}}\n" for e in epochs)
        feed_all(tmp_path, "hf-trainer", "***** Running training *****\n" + log)
        return [line.step for line in lines_of(tmp_path)[before:]]

    assert attempt([0.25, 0.5, 0.75, 1.0]) == [1, 2, 3, 4]
    # Killed after epoch 1.0, its checkpoint at 0.5: the resumed Trainer logs 0.75 and 1.0 again.
    assert attempt([0.75, 1.0, 1.25]) == [3, 4, 5]
    # Started over (no checkpoint found): the count starts over, as the training did.
    assert attempt([0.25, 0.5]) == [1, 2]
    # Log dicts without an epoch count from 1 in every attempt.
    (tmp_path / "plain").mkdir()
    for _ in range(2):
        assert feed_all(tmp_path / "plain", "hf-trainer", "{'loss': 1.0}\n{'loss': 0.9}\n").state.step == 2


def test_key_value_preset_any_order_and_other_text(tmp_path: Path) -> None:
    log = (
        "starting up, loss=nothing yet\n"
        "step=10 loss=0.53 lr=3e-4\n"
        "[rank0]: epoch=1 step=20, loss: 0.41 grad_norm=2.5 tokens_per_s=1200 val_loss=0.9\n"
        "substep=30 loss=0.3\n"
    )
    feed_all(tmp_path, "key-value", log)
    found = lines_of(tmp_path)
    assert [(x.kind if False else type(x).__name__, x.step, x.loss) for x in found] == [
        ("TrainLine", 10, 0.53),
        ("TrainLine", 20, 0.41),
        ("EvalLine", 20, 0.9),
    ]
    second = found[1]
    assert isinstance(second, TrainLine)
    assert second.tokens_per_s == 1200.0
    assert second.metrics == {"epoch": 1.0, "grad_norm": 2.5}
    assert found[0].lr == 3e-4  # type: ignore[union-attr]


NANOGPT_LOG = """\
tokens per iteration will be: 491,520
step 0: train loss 10.9915, val loss 10.9920
iter 0: loss 10.9882, time 9033.25ms, mfu -100.00%
iter 10: loss 9.5021, time 301.32ms, mfu 24.10%
iter 20: loss 8.8774, time 299.86ms, mfu 24.12%
"""


def test_step_loss_preset_on_nanogpt_and_others(tmp_path: Path) -> None:
    feed_all(tmp_path, "step-loss", NANOGPT_LOG)
    found = [(type(x).__name__, x.step, x.loss) for x in lines_of(tmp_path)]
    assert found == [
        ("TrainLine", 0, 10.9915),
        ("EvalLine", 0, 10.992),
        ("TrainLine", 0, 10.9882),
        ("TrainLine", 10, 9.5021),
        ("TrainLine", 20, 8.8774),
    ]


def test_step_loss_preset_total_steps_and_colours(tmp_path: Path) -> None:
    feed_all(
        tmp_path,
        "step-loss",
        "Step 10/1000 | loss 2.31 | lr 3e-4\n\x1b[31mstep: \x1b[0m 20  \x1b[32mloss: 7.12\n",
    )
    first, second = lines_of(tmp_path)
    assert (first.step, first.steps, first.loss, first.lr) == (10, 1000, 2.31, 3e-4)  # type: ignore[union-attr]
    assert (second.step, second.loss) == (20, 7.12)


def test_custom_pattern_groups_and_throughput(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = iter([100.0, 104.0, 105.0, 106.0])
    monkeypatch.setattr(log_progress_module.time, "time", lambda: next(clock))
    pattern = r"it (?P<step>\d+) loss (?P<loss>\S+) acc (?P<top1>\S+)"
    feed_all(
        tmp_path,
        None,
        "it 0 loss 2 acc 0.1\nit 100 loss 1 acc 0.5\nit 300 loss 0.5 acc 0.7\n",
        pattern,
        total_steps=1100,
    )
    first, second, third = lines_of(tmp_path)
    assert isinstance(first, TrainLine) and isinstance(third, TrainLine)
    assert first.step_time_s is None  # one line tells no rate
    assert second.step_time_s == pytest.approx(0.04)  # 4 s for 100 steps
    assert third.step_time_s == pytest.approx(0.005)  # 1 s for 200 steps
    assert third.metrics == {"top1": 0.7}
    assert third.steps == 1100
    # status's progress view reads the rate and the ETA from them: 200 steps/s, 800 steps left.
    view = job_progress("1", "RUNNING", read_progress(RunDir(tmp_path)))
    assert (view.step, view.steps) == (300, 1100)
    assert view.rate == pytest.approx(200.0)
    assert view.eta_s == pytest.approx(4.0)
    # TensorBoard gets the pattern's own groups as curves too.
    assert scalars(third)[1]["train/top1"] == 0.7


def test_a_step_that_goes_back_restarts_the_timing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = iter([0.0, 10.0, 20.0, 21.0, 22.0])
    monkeypatch.setattr(log_progress_module.time, "time", lambda: next(clock))
    feed_all(tmp_path, "key-value", "step=100 loss=1\nstep=200 loss=1\nstep=50 loss=2\nstep=60 loss=2\n")
    times = [line.step_time_s for line in lines_of(tmp_path) if isinstance(line, TrainLine)]
    assert times == [None, pytest.approx(0.1), None, pytest.approx(0.1)]


@pytest.mark.parametrize(
    ("pattern", "preset", "words"),
    [
        (r"loss (?P<loss>\d+", None, "not a regular expression"),
        (r"loss (?P<loss>\S+)", None, "no group named step"),
        (r"loss=(\S+)", None, "key=value"),
        (None, "nanogpt-ish", "unknown preset"),
        (None, None, "either pattern"),
        (r"(?P<step>\d+)", "key-value", "either pattern"),
    ],
)
def test_compile_errors_are_one_line(pattern: str | None, preset: str | None, words: str) -> None:
    with pytest.raises(SpecError) as caught:
        compile_progress(pattern, preset)
    message = str(caught.value)
    assert words in message
    assert "\n" not in message


def test_every_preset_compiles_with_a_step_group() -> None:
    for name in PRESETS:
        assert "step" in compile_progress(None, name).groupindex


def test_never_matched_is_one_line_in_status(tmp_path: Path) -> None:
    feed_all(tmp_path, "step-loss", "hello\nepoch 1 done\n")
    state = RunDir(tmp_path).read_log_progress()
    assert isinstance(state, LogProgressState)
    assert (state.lines, state.matched, state.never_matched) == (2, 0, True)
    assert read_progress(RunDir(tmp_path)).unmatched.startswith("progress pattern never matched")


def test_matched_run_says_nothing_and_counts(tmp_path: Path) -> None:
    feed_all(tmp_path, "key-value", "hello\nstep=3 loss=1\n")
    state = RunDir(tmp_path).read_log_progress()
    assert isinstance(state, LogProgressState)
    assert (state.lines, state.matched, state.step) == (2, 1, 3)
    assert read_progress(RunDir(tmp_path)).unmatched == ""


def test_an_unwritable_run_directory_never_raises(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    progress = LogProgress(tmp_path / "gone", compile_progress(None, "key-value"))
    progress.feed("step=1 loss=2\n")
    progress.feed("step=2 loss=2\n")
    progress.close()
    assert capsys.readouterr().err.count("progress from the log stops") == 1


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(st.text(max_size=300), max_size=20), preset=st.sampled_from(sorted(PRESETS)))
def test_arbitrary_lines_never_raise_and_write_decodable_lines(
    tmp_path_factory: pytest.TempPathFactory, lines: list[str], preset: str
) -> None:
    run_dir = tmp_path_factory.mktemp("run")
    progress = LogProgress(run_dir, compile_progress(None, preset))
    for line in lines:
        progress.feed(line)
    progress.close()
    lines_of(run_dir)  # every line written decodes as a train or eval line


NUMBERS = st.one_of(
    st.integers(-(10**30), 10**30).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.text(alphabet="0123456789.eE+-", max_size=12),
)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(step=NUMBERS, loss=NUMBERS, extra=NUMBERS)
def test_hostile_numbers_in_matching_lines(
    tmp_path_factory: pytest.TempPathFactory, step: str, loss: str, extra: str
) -> None:
    run_dir = tmp_path_factory.mktemp("run")
    pattern = re.compile(r"s=(?P<step>\S*) l=(?P<loss>\S*) x=(?P<x>\S*)")
    progress = LogProgress(run_dir, pattern)
    progress.feed(f"s={step} l={loss} x={extra}")
    progress.close()
    for line in lines_of(run_dir):
        assert line.step >= 0


def test_status_shows_a_pattern_that_never_matched_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from hpctrain.cli.view.status import show
    from tests.unit.tracked_runs import assembled

    feed_all(tmp_path, "step-loss", "loading data\nepoch 1 done\nepoch 2 done\n")
    show([assembled(tmp_path, "RUNNING")])
    lines = [line for line in capsys.readouterr().out.splitlines() if "never matched" in line]
    assert lines == ["  job 42: progress pattern never matched: none of the 3 lines rank 0 printed so far"]
    feed_all(tmp_path, "step-loss", "step 1 loss 2.0\n")  # a later attempt that matches
    show([assembled(tmp_path, "RUNNING")])
    assert "never matched" not in capsys.readouterr().out
