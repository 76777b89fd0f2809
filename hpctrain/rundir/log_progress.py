"""Progress from a log: lines of rank 0's output that match a pattern become metrics lines (torch-free).

A command job's `progress.pattern` (or one of the :data:`PRESETS`, by name) is a regular expression
whose named groups are numbers: ``step`` (required), ``loss``, and any other. Each matching line
becomes the same ``train`` line the runtime writes into metrics.jsonl, so `status` (step, loss,
steps/s, ETA), `report`, TensorBoard and a sweep's objective read it unchanged:

- a group named after a :class:`~hpctrain.rundir.TrainLine` field fills that field (``loss``, ``lr``,
  ``steps`` (the total, for the ETA), ``samples_per_s``, ``tokens_per_s``, ``step_time_s``, ``mfu``...);
  ``learning_rate`` is ``lr``;
- ``eval_loss`` and ``eval_accuracy`` make an ``eval`` line at the same step instead;
- every other group goes to the train line's ``metrics`` (``epoch``, ``grad_norm``);
- ``step_time_s``, unless the line has it, is the time between two matching lines over the steps
  between them: the throughput and the ETA of `status`.

A ``step`` group that matches empty text counts instead: the n-th matching line (that is not an
evaluation's) is step n. The ``hf-trainer`` preset does so, because a Hugging Face Trainer does not print
its step: its steps are logging intervals (``logging_steps`` optimizer steps each), and
``progress.total_steps`` for the ETA is then ``max_steps / logging_steps``. A restarted attempt's count
goes on from where its first line's ``epoch`` group places it: after the train lines of earlier attempts
at an earlier epoch (a script that resumed from its checkpoint continues; one that started over counts
from 1 again). Without an ``epoch`` group every attempt counts from 1.

:class:`LogProgress` never raises on what a script prints. It also keeps log-progress.json (lines
seen, lines matched), from which `status` says that a pattern never matched.
"""

from __future__ import annotations

import math
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path

from hpctrain.errors import SpecError
from hpctrain.rundir.lines import EvalLine, MetricLine, TrainLine
from hpctrain.rundir.run_dir import RunDir
from hpctrain.rundir.structs import LogProgressState

NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
"""A number as scripts print one: 3, -0.5, 3e-4, 1.2E+03."""


def _key_value(key: str, group: str) -> str:
    """An optional look-ahead that captures `key=NUMBER` (or `key: NUMBER`) anywhere in the line."""
    return rf"(?=(?:.*?(?<![\w.])(?:{key})\s*[=:]\s*(?P<{group}>{NUMBER}))?)"


def _dict_entry(key: str, group: str) -> str:
    """An optional look-ahead that captures `'key': NUMBER` (the number maybe quoted) in a printed dict."""
    return rf"(?=(?:[^}}]*'{key}':\s*'?(?P<{group}>{NUMBER}))?)"


PRESETS: dict[str, str] = {
    # {'loss': 0.1234, 'grad_norm': 1.5, 'learning_rate': 4.9e-05, 'epoch': 0.5}, and the eval dicts
    # ({'eval_loss': ..., 'epoch': 1.0}); the step is counted (see the module's docstring).
    "hf-trainer": r"^\s*\{(?P<step>)(?=[^}]*'(?:eval_)?loss':)"
    + "".join(
        _dict_entry(key, group)
        for key, group in [
            ("loss", "loss"),
            ("eval_loss", "eval_loss"),
            ("eval_accuracy", "eval_accuracy"),
            ("learning_rate", "lr"),
            ("grad_norm", "grad_norm"),
            ("epoch", "epoch"),
        ]
    ),
    # step=10 loss=0.53 lr=3e-4 (in any order, `=` or `:`, with any other text between them).
    "key-value": r"^(?=.*?(?<![\w.])step\s*[=:]\s*(?P<step>\d+)\b)"
    + "".join(
        _key_value(key, group)
        for key, group in [
            ("loss", "loss"),
            ("lr|learning_rate", "lr"),
            ("eval_loss|val_loss", "eval_loss"),
            ("eval_accuracy|val_accuracy|accuracy|acc", "eval_accuracy"),
            ("grad_norm", "grad_norm"),
            ("epoch", "epoch"),
            ("tokens_per_s|tok/s", "tokens_per_s"),
            ("samples_per_s", "samples_per_s"),
        ]
    ),
    # nanoGPT's `iter 10: loss 3.2000, time 12.00ms, mfu 4.50%` and `step 2000: train loss 1.1, val loss 1.2`,
    # `Step 10/1000 | loss 2.31 | lr 3e-4`,
    # torchtitan's `step: 10  loss:  7.12` (its colours are stripped before matching).
    "step-loss": rf"(?i)\b(?:step|iter|iteration)\s*[:=#]?\s*(?P<step>\d+)(?:\s*/\s*(?P<steps>\d+))?"
    rf"\b.*?\bloss\s*[:=]?\s*(?P<loss>{NUMBER})"
    rf"(?=(?:.*?\b(?:lr|learning[ _]rate)\s*[:=]?\s*(?P<lr>{NUMBER}))?)"
    rf"(?=(?:.*?\bval(?:idation)?[ _]loss\s*[:=]?\s*(?P<eval_loss>{NUMBER}))?)",
}

FIELD_ALIASES = {"learning_rate": "lr"}
EVAL_GROUPS = {"eval_loss": "loss", "eval_accuracy": "accuracy"}
TRAIN_FIELDS = frozenset(
    {
        "steps",
        "loss",
        "lr",
        "samples_per_s",
        "step_time_s",
        "peak_mem_mb",
        "tokens_per_s",
        "mfu",
        "data_share",
    }
)
"""The TrainLine fields a group fills by its name; other groups go to the line's `metrics`."""
MAX_STEP = 2**62
MAX_MATCHED_CHARS = 4096
"""Only a line's first characters are matched: a runaway line costs no more than this."""
STATE_EVERY_S = 5.0
"""log-progress.json is rewritten at most this often (and at the first line, first match and close)."""
COUNT_LOOKBACK_LINES = 100_000
"""The run's last metrics lines a counting pattern's restarted attempt reads to place its count."""
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")


def compile_progress(pattern: str | None, preset: str | None) -> re.Pattern[str]:
    """The regular expression of `progress.pattern`, or of the preset named `progress.preset`;
    a one-line SpecError for a bad expression, an unknown preset, both or neither given, or no
    `step` group."""
    if (pattern is None) == (preset is None):
        raise SpecError("progress: give either pattern (a regular expression) or preset (a name), not both")
    if preset is not None:
        if preset not in PRESETS:
            raise SpecError(f"progress.preset: unknown preset {preset!r} (one of {', '.join(PRESETS)})")
        return re.compile(PRESETS[preset])
    assert pattern is not None
    try:
        compiled = re.compile(pattern)
    except (re.error, OverflowError, RecursionError) as err:
        raise SpecError(f"progress.pattern: not a regular expression ({err})") from None
    if "step" not in compiled.groupindex:
        raise SpecError(
            "progress.pattern has no group named step: name each number's group after its metric, "
            r"e.g. step=(?P<step>\d+) loss=(?P<loss>[0-9.e+-]+) for key=value lines (or use preset key-value)"
        )
    return compiled


def _number(text: str | None) -> float | None:
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


class LogProgress:
    """Rank 0's output, fed line by line, turned into metrics lines in `run_dir` (see the module's
    docstring). `total_steps` (progress.total_steps) fills the train lines' `steps` for the ETA
    where the line has no `steps` group. `sinks` are given every line written (TensorBoard)."""

    def __init__(self, run_dir: Path, pattern: re.Pattern[str], total_steps: int | None = None) -> None:
        self.run = RunDir(run_dir)
        self.pattern = pattern
        self.total_steps = total_steps
        self.sinks: list[Callable[[MetricLine], None]] = []
        self.state = LogProgressState(pattern=pattern.pattern)
        self._written_at = -math.inf
        self._last: tuple[int, float] | None = None  # step and time of the last train line
        self._counted = 0  # the step of a counting pattern (an empty step group)
        self._count_placed = False  # whether the count went on from the earlier attempts' lines
        self._failed = False  # the run directory could not be written: stop trying

    def feed(self, line: str) -> None:
        """One line of output (its newline or not); never raises."""
        try:
            self._feed(line)
        except OSError as err:  # the run directory cannot be written: say so once, stop writing
            self._give_up(err)
        except Exception:  # nothing a script prints may end the job's output relay: the line is skipped
            pass

    def close(self) -> None:
        """Write the final counts (the object may be fed again; close is idempotent)."""
        try:
            self._write_state(time.time())
        except OSError as err:
            self._give_up(err)

    def _feed(self, line: str) -> None:
        now = time.time()
        self.state.lines += 1
        found = self.pattern.search(_ANSI.sub("", line[:MAX_MATCHED_CHARS]))
        lines = self._lines(found, now) if found is not None else []
        if lines:
            self.state.matched += 1
            for written in lines:
                self._append(written)
        first = self.state.lines == 1 or (lines and self.state.matched == 1)
        if first or now - self._written_at >= STATE_EVERY_S:
            self._write_state(now)

    def _lines(self, found: re.Match[str], now: float) -> list[MetricLine]:
        """The train and eval lines one match makes (none when its step is not a number)."""
        groups = {name: value for name, value in found.groupdict().items() if value is not None}
        train: dict[str, float] = {}
        metrics: dict[str, float] = {}
        evaluation: dict[str, float] = {}
        for name, text in groups.items():
            value = _number(text)
            if name == "step" or value is None:
                continue
            field = FIELD_ALIASES.get(name, name)
            if name in EVAL_GROUPS:
                evaluation[EVAL_GROUPS[name]] = value
            elif field in TRAIN_FIELDS:
                train[field] = value
            else:
                metrics[name] = value
        # A line with eval numbers and none of a train line's fields is an evaluation (its epoch is dropped).
        has_train = bool(train) or not evaluation
        step_text = groups.get("step", "")
        if step_text.strip():
            step_value = _number(step_text)
            if step_value is None or not 0 <= step_value < MAX_STEP or step_value != int(step_value):
                return []
            step = int(step_value)
        else:  # a counting pattern: only lines with training numbers advance it
            if has_train and not self._count_placed:
                self._count_placed = True
                self._counted = self._counted_before(metrics.get("epoch"))
            self._counted += has_train
            step = self._counted
        out: list[MetricLine] = []
        if has_train:
            out.append(self._train_line(step, train, metrics, now))
        if evaluation:
            out.append(EvalLine(step=step, time=round(now, 3), **evaluation))
        return out

    def _counted_before(self, epoch: float | None) -> int:
        """The highest counted step that earlier attempts logged before `epoch` (0: none, or no epoch)."""
        if epoch is None:
            return 0
        earlier = self.run.read_metrics(head=0, tail=COUNT_LOOKBACK_LINES)
        return max(
            (
                line.step
                for line in earlier
                if isinstance(line, TrainLine) and line.metrics.get("epoch", math.inf) < epoch
            ),
            default=0,
        )

    def _train_line(
        self, step: int, fields: dict[str, float], metrics: dict[str, float], now: float
    ) -> TrainLine:
        steps = fields.pop("steps", None)
        total = int(steps) if steps is not None and 1 <= steps < MAX_STEP else self.total_steps
        if "step_time_s" not in fields and self._last is not None:
            last_step, last_time = self._last
            if step > last_step:
                fields["step_time_s"] = round((now - last_time) / (step - last_step), 6)
        if self._last is None or step != self._last[0]:
            self._last = (step, now)  # a step that goes back (a restart) starts the timing anew
        return TrainLine(
            step=step,
            steps=total,
            time=round(now, 3),
            metrics=metrics,
            **fields,
        )

    def _append(self, line: MetricLine) -> None:
        if self._failed:
            return
        self.run.append_metric(line)
        for sink in self.sinks:
            sink(line)
        if isinstance(line, TrainLine):
            self.state.step = line.step

    def _write_state(self, now: float) -> None:
        if self._failed:
            return
        self.state.time = round(now, 3)
        self.run.write_log_progress(self.state)
        self._written_at = now

    def _give_up(self, err: OSError) -> None:
        if not self._failed:
            self._failed = True
            print(f"hpctrain: progress from the log stops: {type(err).__name__}: {err}", file=sys.stderr)
