"""The collective timeout behind the watchdog, and NCCL's own timeout settings."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpctrain.rundir import RunDir
from hpctrain.runtime import collective_timeout
from hpctrain.spec.job import ENDING_MARGIN_S, Watchdog


@given(
    hang=st.floats(1, 1e5),
    startup=st.floats(1, 1e5),
    slow=st.floats(1, 1e5),
    interval=st.floats(0.5, 600),
    train_timeout=st.integers(10, 10**6),
    enabled=st.booleans(),
)
def test_the_collective_timeout_outlasts_every_fixed_allowance_and_bounds_the_job(
    hang: float, startup: float, slow: float, interval: float, train_timeout: int, enabled: bool
) -> None:
    settings = Watchdog(
        enabled=enabled,
        hang_timeout=hang,
        startup_timeout=startup,
        slow_phase_timeout=slow,
        heartbeat_interval=interval,
    )
    timeout = collective_timeout.collective_timeout_s(settings, train_timeout)
    assert isinstance(timeout, int) and timeout >= train_timeout
    if not enabled:
        assert timeout == train_timeout
        return
    # The watchdog declares a hang (and has time to end the step) before a collective times out...
    assert timeout >= max(hang, startup, slow) + settings.node_silent_after + ENDING_MARGIN_S
    # ...and, unless the user asked for longer, a job whose watchdog is gone ends soon after.
    bound = max(hang, startup, slow) + settings.node_silent_after + ENDING_MARGIN_S + 1
    assert timeout <= max(train_timeout, bound)


def test_default_collective_timeout_and_nccl_settings(tmp_path: Path) -> None:
    assert collective_timeout.collective_timeout_s(Watchdog(), 120) == 600 + 15 + 60
    for new_names, buffer, dump_file in (
        (True, "TORCH_FR_BUFFER_SIZE", "TORCH_FR_DUMP_TEMP_FILE"),
        (False, "TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"),
    ):
        env = collective_timeout.nccl_env(RunDir(tmp_path), 675, flight_recorder_names=new_names)
        assert env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1"
        assert env["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1"
        assert int(env[buffer]) > 0
        assert env[dump_file].startswith(str(tmp_path / "failures") + "/")
        assert int(env["TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC"]) > 675


NCCL_KEYS = (
    "TORCH_NCCL_DUMP_ON_TIMEOUT",
    "TORCH_FR_BUFFER_SIZE",
    "TORCH_FR_DUMP_TEMP_FILE",
    "TORCH_NCCL_TRACE_BUFFER_SIZE",
    "TORCH_NCCL_DEBUG_INFO_TEMP_FILE",
    "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC",
)


def test_apply_nccl_env_keeps_what_the_user_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key in NCCL_KEYS:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("TORCH_FR_BUFFER_SIZE", "7")
    collective_timeout.apply_nccl_env(tmp_path, 100, "gloo", "2.13.0+cpu")
    assert os.environ["TORCH_FR_BUFFER_SIZE"] == "7"
    assert os.environ["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1"
    assert "TORCH_NCCL_TRACE_BUFFER_SIZE" not in os.environ  # the old name warns on new torch
    assert not (tmp_path / "failures").exists()  # only NCCL dumps there
    collective_timeout.apply_nccl_env(tmp_path, 100, "nccl", "2.4.1")
    assert os.environ["TORCH_NCCL_TRACE_BUFFER_SIZE"] == "2000"
    assert (tmp_path / "failures").is_dir()
