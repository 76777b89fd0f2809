"""A rank's start-up parts: each from the mark before, counted from its process start or its take."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from hpctrain.runtime import startup_times


def test_a_new_process_counts_from_its_own_start() -> None:
    before = time.time()
    code = (
        "import json, time; from hpctrain.runtime import startup_times as s;"
        "time.sleep(0.3); s.mark('torch'); s.mark('torch'); time.sleep(0.2); s.mark('rendezvous');"
        "print(json.dumps([s.process_started(), s.parts(s.began())]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    after = time.time()
    started, parts = json.loads(out.stdout)
    # /proc counts in clock ticks (1/100 s) from a boot time in whole seconds.
    assert before - 1.01 <= started <= after
    assert list(parts) == ["torch", "rendezvous"]  # in the order passed; a second mark is ignored
    assert parts["torch"] >= 0.3 and 0.2 <= parts["rendezvous"] < 0.2 + (after - before)


def test_a_warm_rank_counts_from_the_moment_it_took_the_attempt(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(startup_times, "_marks", {})
    now = time.time()
    monkeypatch.setenv(startup_times.TAKEN_AT, f"{now - 2:.3f}")
    monkeypatch.setattr(startup_times.time, "time", lambda: now)
    startup_times.mark("build")
    assert startup_times.began() == pytest.approx(now - 2, abs=0.001)
    assert startup_times.summary() == {
        "began": pytest.approx(now - 2, abs=0.001),
        "warm": True,
        "build": pytest.approx(2.0, abs=0.002),
    }
    monkeypatch.setenv(startup_times.TAKEN_AT, "not a time")
    assert startup_times.began() <= now  # falls back to the process start


def test_the_rank_catches_the_preemption_signal_before_it_imports_torch() -> None:
    """`python -m hpctrain.runtime` installs its handler first thing in main(); everything imported
    before that must be torch-free, or a signal during the 1.5 s torch import kills the rank."""
    code = "import sys, hpctrain.runtime.__main__; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
