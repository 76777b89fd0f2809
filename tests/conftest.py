"""Shared fixtures: an isolated HPCTRAIN_HOME per test, and the repo's paths."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
JOBS = REPO / "jobs"
SITES = REPO / "site-configs"


@pytest.fixture
def hpctrain_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "hpctrain-home"
    monkeypatch.setenv("HPCTRAIN_HOME", str(home))
    return home


def run_cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 120, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the real `hpctrain` console entry point in a fresh process."""
    return subprocess.run(
        [sys.executable, "-m", "hpctrain.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd or REPO,
        env={**os.environ, **(env or {})},
    )


# Hypothesis: property tests of hostile input (tests/unit/spec/test_properties.py, ...) draw their examples
# from the profile that HYPOTHESIS_PROFILE names: "ci" (the default, what scripts/test.sh runs) 200 per
# property, "long" 2,000 (on demand, e.g. before a release), "dev" 100 for a quick local loop. A property
# whose own @settings names max_examples keeps that number in every profile. With no fixed seed each run
# draws new examples, so successive CI runs keep widening what was tried.
# No deadline: examples render templates and the shared 2-core machine makes timings noisy. No example
# database: a failure prints its falsifying example, and the checkout stays clean.
try:
    from hypothesis import HealthCheck, settings
except ImportError:  # hypothesis is a test dependency; tests that need it import it themselves
    pass
else:
    _QUIET = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]
    _COMMON = {"deadline": None, "database": None, "suppress_health_check": _QUIET}
    settings.register_profile("ci", max_examples=200, **_COMMON)
    settings.register_profile("long", max_examples=2000, **_COMMON)
    settings.register_profile("dev", max_examples=100, **_COMMON)
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# A shell without job control starts its background commands with SIGINT ignored, and a process keeps
# an ignored signal across exec: Python then installs no KeyboardInterrupt handler, in pytest or in
# the `hpctrain` processes it starts. The tests that press Ctrl-C (held_signals, an interrupted sweep
# loop) need Ctrl-C live however the suite was started; a handler set here is the default in children.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
