"""What a submit writes is private to the user (0700/0600, sbatch and the job under umask 077), or
readable by the site's share_with_group (2750/0640, umask 027)."""

from __future__ import annotations

import grp
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from hpctrain.errors import SpecError
from hpctrain.submission import submit_path as submission
from hpctrain.tracking.index import Index
from tests.conftest import JOBS, REPO

JOB = JOBS / "digits-ddp.yaml"


@pytest.fixture
def stand_in_sbatch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An sbatch that takes every job (id 4242) and records the umask it ran under, as Slurm's
    SLURM_UMASK would hand it to the job (and to the batch log that slurmd creates)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    sbatch = bin_dir / "sbatch"
    sbatch.write_text(f'#!/bin/sh\numask > "{tmp_path}/sbatch-umask"\necho 4242\n')
    sbatch.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return tmp_path / "sbatch-umask"


@pytest.fixture
def usual_umask() -> Iterator[None]:
    """The usual login umask (022), under which every file used to be world-readable."""
    previous = os.umask(0o022)
    yield
    os.umask(previous)


def modes(root: Path) -> dict[str, int]:
    """The permission bits of every file and folder under `root`, by path (links not followed)."""
    found = {".": stat.S_IMODE(root.lstat().st_mode)}
    for path in root.rglob("*"):
        found[str(path.relative_to(root))] = stat.S_IMODE(path.lstat().st_mode)
    return found


def test_everything_a_submit_writes_is_private(
    hpctrain_home: Path, stand_in_sbatch: Path, usual_umask: None
) -> None:
    done = submission.submit(JOB, "local", backend_name="slurm")
    assert done.error is None and done.run.job_id == "4242"
    Index(hpctrain_home).update_states([(done.run, "RUNNING", "")])  # a later verb rewrites record.json
    written = modes(hpctrain_home)
    run = str(done.run.run_dir.relative_to(hpctrain_home))
    for name in ("job.sbatch", "spec.json", "submit.json", "record.json"):
        assert f"{run}/{name}" in written, name
    for name in ("index.jsonl", "index.lock"):
        assert name in written, name
    loose = {path: oct(mode) for path, mode in written.items() if mode & 0o077}
    assert loose == {}, f"readable by others: {loose}"
    assert all(mode == 0o700 for path, mode in written.items() if (hpctrain_home / path).is_dir())
    assert stand_in_sbatch.read_text().strip() == "0077"
    assert os.umask(0o022) == 0o022  # the submitting process's umask is given back


def test_an_older_home_that_others_could_read_is_closed(hpctrain_home: Path) -> None:
    (hpctrain_home / "runs").mkdir(parents=True, mode=0o755)
    hpctrain_home.chmod(0o755)
    Index(hpctrain_home)
    assert stat.S_IMODE(hpctrain_home.stat().st_mode) == 0o750 & 0o755
    assert stat.S_IMODE((hpctrain_home / "runs").stat().st_mode) & 0o007 == 0


def a_group_to_share_with() -> grp.struct_group:
    if os.geteuid() != 0:
        mine = [g for g in grp.getgrall() if g.gr_gid in os.getgroups()]
        if not mine:
            pytest.skip("this user is in no group to share with")
        return mine[0]
    for name in ("users", "daemon", "root"):
        try:
            return grp.getgrnam(name)
        except KeyError:
            continue
    pytest.skip("no group to share with on this machine")


def test_a_site_that_shares_with_a_group_gives_it_read_access(
    hpctrain_home: Path, stand_in_sbatch: Path, usual_umask: None, tmp_path: Path
) -> None:
    group = a_group_to_share_with()
    site = tmp_path / "shared.yaml"
    site.write_text(
        (REPO / "site-configs" / "local.yaml").read_text() + f"share_with_group: {group.gr_name}\n"
    )
    done = submission.submit(JOB, str(site), backend_name="slurm")
    assert done.error is None
    root = done.run.run_dir
    for path in (root, root / "logs"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o2750 and path.stat().st_gid == group.gr_gid
    for path in (root / "job.sbatch", root / "spec.json", root / "record.json"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o640 and path.stat().st_gid == group.gr_gid
    assert stand_in_sbatch.read_text().strip() == "0027"
    # The group passes through home and runs/ to the run (enter, not list); the index stays private.
    for folder in (hpctrain_home, hpctrain_home / "runs"):
        assert stat.S_IMODE(folder.stat().st_mode) & 0o007 == 0o001
    assert stat.S_IMODE((hpctrain_home / "index.jsonl").stat().st_mode) == 0o600


def test_an_unknown_group_is_a_one_line_error_and_leaves_nothing(
    hpctrain_home: Path, stand_in_sbatch: Path, tmp_path: Path
) -> None:
    site = tmp_path / "shared.yaml"
    site.write_text((REPO / "site-configs" / "local.yaml").read_text() + "share_with_group: no-such-group\n")
    with pytest.raises(SpecError, match="no group 'no-such-group'"):
        submission.submit(JOB, str(site), backend_name="slurm")
    assert not stand_in_sbatch.exists()
    assert Index(hpctrain_home).check().unindexed_dirs == []
