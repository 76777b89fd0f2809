"""One rule for files a verb writes for the user to edit: an edited file is named and kept unless --force."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpctrain.cli.view.user_files import refuse_overwrite, write_user_files
from hpctrain.errors import InputError
from tests.unit.tracked_runs import cli


def test_examples_copy_keeps_an_edited_file_and_names_it(tmp_path: Path) -> None:
    first = cli("examples", "--copy", str(tmp_path))
    assert first.code == 0, first.stderr
    copy = tmp_path / "digits-ddp.yaml"
    shipped = copy.read_text()
    again = cli("examples", "--copy", str(tmp_path))  # nothing edited: fine, and says so
    assert again.code == 0 and f"{copy} (unchanged)" in again.stdout
    copy.write_text(shipped + "# my edit\n")
    refused = cli("examples", "--copy", str(tmp_path))
    assert refused.code == 2 and str(copy) in refused.stderr and "--force" in refused.stderr
    assert refused.stderr.count("\n") == 1
    assert copy.read_text().endswith("# my edit\n")  # nothing was written, not even the unedited ones
    forced = cli("examples", "digits-ddp", "--copy", str(tmp_path), "--force")
    assert forced.code == 0 and copy.read_text() == shipped


def test_refusal_comes_before_any_file_is_written(tmp_path: Path) -> None:
    edited, fresh = tmp_path / "a.yaml", tmp_path / "b.yaml"
    edited.write_text("mine")
    with pytest.raises(InputError, match=r"not overwriting .*a\.yaml: differs"):
        write_user_files({fresh: b"new", edited: b"new"}, force=False)
    assert not fresh.exists() and edited.read_text() == "mine"
    assert write_user_files({fresh: b"new", edited: b"new"}, force=True) == {fresh: True, edited: True}
    assert write_user_files({fresh: b"new"}, force=False) == {fresh: False}


def test_a_file_whose_new_content_is_not_known_yet_is_refused_if_it_exists(tmp_path: Path) -> None:
    profile = tmp_path / "mycluster.yaml"
    refuse_overwrite({profile: None}, force=False)  # absent: fine
    profile.write_text("x")
    with pytest.raises(InputError, match=r"mycluster\.yaml: exists; pass --force"):
        refuse_overwrite({profile: None}, force=False)
    refuse_overwrite({profile: None}, force=True)
