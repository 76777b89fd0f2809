"""Progress from a log: lines of rank 0's output that match a pattern become metrics lines (torch-free).

A minimal version of the parser: `compile_progress` checks a job's `progress` section, `LogProgress`
turns matching lines into the same train lines the runtime writes, so that status, report and sweeps
read a command job's progress as they read a Task job's.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

from hpctrain.errors import SpecError
from hpctrain.rundir.io import append_line
from hpctrain.rundir.lines import TrainLine
from hpctrain.rundir.run_dir import RunDir

_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
PRESETS: dict[str, str] = {
    # `step 10 ... loss 2.31` / `step: 10, loss: 2.31` / `iter 10: loss 2.31`
    "step-loss": rf"(?:step|iter)\s*[:=]?\s*(?P<step>\d+)\b.*?\bloss\s*[:=]?\s*(?P<loss>{_NUMBER})",
    # `step=10 loss=2.31 lr=0.001`
    "key-value": rf"\bstep=(?P<step>\d+)\b.*?\bloss=(?P<loss>{_NUMBER})",
    # a Hugging Face Trainer's log dict: {'loss': 2.31, 'learning_rate': 5e-05, 'epoch': 0.1, 'step': 10}
    "hf-trainer": rf"'loss': (?P<loss>{_NUMBER}).*?'step': (?P<step>\d+)",
}
# Named groups that fill the train line's fields of the same meaning.
FIELDS = {"loss": "loss", "lr": "lr", "learning_rate": "lr", "samples_per_s": "samples_per_s"}


def compile_progress(pattern: str | None, preset: str | None) -> re.Pattern[str]:
    """The pattern of a `progress` section; SpecError (one line) for a bad one."""
    if (pattern is None) == (preset is None):
        raise SpecError("progress: give either pattern or preset")
    if preset is not None:
        if preset not in PRESETS:
            raise SpecError(f"progress.preset: {preset!r} is not one of {', '.join(PRESETS)}")
        pattern = PRESETS[preset]
    assert pattern is not None
    try:
        compiled = re.compile(pattern)
    except re.error as err:
        raise SpecError(f"progress.pattern: not a regular expression: {err}") from None
    if "step" not in compiled.groupindex:
        raise SpecError("progress.pattern: has no (?P<step>...) group")
    return compiled


class LogProgress:
    """Appends a train line to metrics.jsonl for each matching line fed to it."""

    def __init__(self, run_dir: Path, pattern: re.Pattern[str], total_steps: int | None = None) -> None:
        self.path = RunDir(run_dir).metrics
        self.pattern = pattern
        self.total_steps = total_steps
        self._last: tuple[int, float] | None = None

    def feed(self, line: str) -> None:
        found = self.pattern.search(line)
        if found is None:
            return
        try:
            step = int(found.group("step"))
        except (TypeError, ValueError):
            return
        values: dict[str, float] = {}
        for group, field in FIELDS.items():
            text = found.groupdict().get(group)
            if text is not None:
                try:
                    values[field] = float(text)
                except ValueError:
                    pass
        now = time.time()
        if self._last is not None and step > self._last[0]:
            values["step_time_s"] = round((now - self._last[1]) / (step - self._last[0]), 6)
        self._last = (step, now)
        append_line(self.path, TrainLine(step=step, steps=self.total_steps, time=round(now, 3), **values))

    def close(self) -> None:
        """Nothing is held open: each line is one append."""
