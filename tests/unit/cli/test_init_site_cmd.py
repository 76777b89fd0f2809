"""`init-site`: an existing profile is refused before the cluster is read; the doctor command it
prints finds the file it wrote. On the live cluster: tests/integration/test_doctor.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpctrain.api import site_reference as site_argument
from tests.unit.tracked_runs import cli


def test_an_existing_profile_is_refused_before_the_cluster_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hpctrain.scheduler.slurm.facts import ClusterFacts

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("read the cluster although the profile would be refused")

    monkeypatch.setattr(ClusterFacts, "read", never)
    target = tmp_path / "mycluster.yaml"
    target.write_text("# edited\n")
    outcome = cli("init-site", "mycluster", "-o", str(target))
    assert outcome.code == 2 and f"not overwriting {target}: exists; pass --force" in outcome.stderr
    assert target.read_text() == "# edited\n"


def test_the_printed_doctor_command_names_the_file_unless_the_name_finds_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.chdir(tmp_path)
    in_user_folder = tmp_path / "config" / "hpctrain" / "sites" / "mycluster.yaml"
    in_user_folder.parent.mkdir(parents=True)
    in_user_folder.write_text("name: mycluster\n")
    assert site_argument("mycluster", in_user_folder) == "mycluster"
    elsewhere = tmp_path / "my cluster" / "mycluster.yaml"
    assert site_argument("mycluster", elsewhere) == f"'{elsewhere}'"
    assert site_argument("local2", Path("local2.yaml")) == "local2.yaml"
