"""The one id resolver of every verb: empty ids, short prefixes and ambiguous prefixes are errors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpctrain.scheduler.base import JobState
from hpctrain.tracking.index import MIN_PREFIX, IdError, RunRecord, resolve
from tests.unit.tracked_runs import track

STAMPS = st.builds(
    lambda day, second: f"2026{day:04d}-{second:06d}", st.integers(101, 131), st.integers(0, 2)
)
RUN_IDS = st.builds(
    lambda stamp, name, tail: f"{stamp}-{name}-{tail}",
    STAMPS,
    st.sampled_from(["a", "ab", "gpt"]),
    st.sampled_from(["0a0b0c", "0a0b0d", "ffffff"]),
)


def run_of(run_id: str, job_id: str | None) -> RunRecord:
    return RunRecord(
        run_id=run_id,
        job_id=job_id,
        name="x",
        site="local",
        backend="slurm",
        run_dir=Path("/nowhere") / run_id,
        submitted_at=0.0,
        state=JobState.PENDING,
        state_at=0.0,
    )


@settings(max_examples=300, deadline=None)
@given(
    ids=st.lists(RUN_IDS, min_size=1, max_size=8, unique=True),
    pick=st.integers(0, 7),
    cut=st.integers(0, 40),
    job_base=st.integers(1, 10**6),
)
def test_a_prefix_names_one_run_or_is_an_error(ids: list[str], pick: int, cut: int, job_base: int) -> None:
    runs = [run_of(run_id, str(job_base + i)) for i, run_id in enumerate(ids)]
    key = ids[pick % len(ids)][:cut]
    matching = sorted(r.run_id for r in runs if r.run_id.startswith(key))
    exact = [r for r in runs if key in (r.run_id, r.job_id)]
    if not key.strip():
        with pytest.raises(IdError, match="empty"):
            resolve([key], runs)
    elif exact:
        assert resolve([key], runs) == ([exact[0]], [])
    elif len(key) < MIN_PREFIX and matching:
        with pytest.raises(IdError, match="date and time"):
            resolve([key], runs)
    elif len(key) < MIN_PREFIX:
        assert resolve([key], runs) == ([], [key])  # not tracked, like any unknown id
    elif len(matching) > 1:
        with pytest.raises(IdError, match="ambiguous") as raised:
            resolve([key], runs)
        assert all(run_id in str(raised.value) for run_id in matching[:5])
        assert "\n" not in str(raised.value)
    else:
        found, missing = resolve([key], runs)
        assert [r.run_id for r in found] == matching and missing == []


@given(blank=st.text(alphabet=" \t\n", max_size=3))
def test_a_blank_key_is_an_error_even_beside_good_ones(blank: str) -> None:
    runs = [run_of("20260101-000000-a-0a0b0c", "5")]
    with pytest.raises(IdError):
        resolve(["5", blank], runs)


def test_a_job_id_matches_exactly_and_an_unknown_full_id_is_missing() -> None:
    runs = [run_of("20260101-000000-a-0a0b0c", "20")]
    assert resolve(["20"], runs) == (runs, [])
    assert resolve(["20260101-000000-b"], runs) == ([], ["20260101-000000-b"])
    with pytest.raises(IdError, match="would match 20260101-000000-a-0a0b0c"):
        resolve(["2026"], runs)
    assert resolve(["424242"], runs) == ([], ["424242"])


@pytest.mark.parametrize("verb", ["cancel", "logs", "report", "status"])
def test_every_verb_refuses_an_empty_id(verb: str, tmp_path: Path) -> None:
    # The only tracked run, on a backend whose cancel would fail loudly: an empty id must not reach it.
    track(tmp_path, "4242", JobState.COMPLETED, name="only")
    env = {**os.environ, "HPCTRAIN_HOME": str(tmp_path), "PYTHONPATH": str(Path(__file__).parents[3])}
    for key in ("", "20"):
        done = subprocess.run(
            [sys.executable, "-m", "hpctrain.cli.main", verb, key],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
            timeout=120,
            check=False,
        )
        assert done.returncode == 2, (verb, key, done.stdout, done.stderr)
        assert done.stderr.count("\n") == 1 and ("empty" in done.stderr or "date and time" in done.stderr)
        assert "Cancelled" not in done.stdout
