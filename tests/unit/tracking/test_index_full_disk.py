"""A full disk: an index append is all or nothing, and `status` still shows what it knows.

The disk is made full for real: a file size limit (RLIMIT_FSIZE, which gives a short write and then
EFBIG) in a subprocess, and, as root, a tiny tmpfs (ENOSPC)."""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from hpctrain.scheduler.base import JobState
from hpctrain.tracking.index import Index, RunRecord
from hpctrain.tracking.index_lines import added, encode_lines

REPO = Path(__file__).resolve().parents[3]


def tracked_run(index: Index, pad_to: int = 0) -> RunRecord:
    """A local run the index believes is running; its job is unknown, so a poll changes its state.
    With `pad_to`, its reason is long enough for the journal to end a few bytes short of that size."""
    run_id, run_dir = index.new_run_dir("full")
    now = time.time()
    run = RunRecord(
        run_id=run_id,
        job_id="999999",
        name="full",
        site="local",
        backend="local",
        run_dir=run_dir,
        submitted_at=now,
        state=JobState.RUNNING,
        state_at=now,
    )
    if pad_to:
        run.reason = "x"
        run.reason = "x" * (pad_to - 7 - len(encode_lines([added(run)])))
    index.add(run)
    return run


def limited(size: int) -> Callable[[], None]:
    def apply() -> None:
        # Ignored dispositions survive exec: the write fails with EFBIG instead of killing Python.
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))

    return apply


def status(
    home: Path, run: RunRecord, preexec: Callable[[], None] | None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hpctrain.cli.main", "status", run.run_id],
        capture_output=True,
        text=True,
        env={**os.environ, "HPCTRAIN_HOME": str(home), "PYTHONPATH": str(REPO)},
        preexec_fn=preexec,
        timeout=120,
        check=False,
    )


@contextlib.contextmanager
def tiny_filesystem(where: Path) -> Iterator[Path]:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a small tmpfs needs root and mount(8)")
    where.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(where)], capture_output=True, check=False
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=False)


def check_status_on_full_disk(
    home: Path, fill: Callable[[Path], Callable[[], None] | None], pad_to: int = 0
) -> None:
    index = Index(home)
    run = tracked_run(index, pad_to)
    before = index.path.read_bytes()
    done = status(home, run, fill(index.path))
    # What the poll found is shown, with one warning that it could not be recorded.
    assert done.returncode == 0, done.stderr
    assert run.name in done.stdout and "UNKNOWN" in done.stdout
    warnings = [line for line in done.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "could not record" in warnings[0], done.stderr
    # Nothing torn: the journal is as it was, and the next reader has nothing to warn about.
    assert index.path.read_bytes() == before
    later = status(home, run, None)
    assert "unreadable" not in later.stderr and later.returncode == 0


def test_status_with_a_file_size_limit_records_nothing_torn(tmp_path: Path) -> None:
    # Room for a few bytes more than the journal: the append starts, writes part, then fails.
    check_status_on_full_disk(tmp_path, lambda journal: limited(journal.stat().st_size + 7))


def test_status_on_a_full_tmpfs_records_nothing_torn(tmp_path: Path) -> None:
    with tiny_filesystem(tmp_path / "small") as home:

        def fill(journal: Path) -> None:
            fd = os.open(home / "filler", os.O_WRONLY | os.O_CREAT)
            try:
                with contextlib.suppress(OSError):
                    while os.write(fd, b"\0" * 512):
                        pass
            finally:
                os.close(fd)

        # tmpfs gives out whole pages: the journal ends just short of one, so the append needs another.
        check_status_on_full_disk(home, fill, pad_to=os.sysconf("SC_PAGE_SIZE"))


def test_an_append_cut_short_is_truncated_back(tmp_path: Path) -> None:
    index = Index(tmp_path)
    run = tracked_run(index)
    before = index.path.stat().st_size
    script = (
        "import sys; from hpctrain.tracking.index import Index;"
        "index = Index(__import__('pathlib').Path(sys.argv[1]));"
        "run = index.find([sys.argv[2]])[0][0];"
        "index._append([__import__('hpctrain.tracking.index_lines', fromlist=['x']).added(run)] * 50)"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path), run.run_id],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        preexec_fn=limited(before + 100),
        timeout=60,
        check=False,
    )
    assert done.returncode != 0 and "File too large" in done.stderr
    assert index.path.stat().st_size == before
