"""site.lookup: where `--site NAME` looks, in order; what `hpctrain sites` lists; one-line errors."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hpctrain.errors import SpecError
from hpctrain.site.lookup import listing, locate, search_path, user_folder
from hpctrain.spec.resources import data_folder

PROFILE = "name: {name}\ndescription: {description}\npartitions:\n  p:\n    nodes: 1\n"


@pytest.fixture
def places(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """Empty folders: the project, two on $HPCTRAIN_SITE_PATH, one on $HPCTRAIN_SITES, the user's."""
    folders = {name: tmp_path / name for name in ("project", "env1", "env2", "old", "config")}
    for folder in folders.values():
        folder.mkdir()
    (folders["project"] / "site-configs").mkdir()
    monkeypatch.chdir(folders["project"])
    monkeypatch.setenv(
        "HPCTRAIN_SITE_PATH", os.pathsep.join([str(folders["env1"]), "", str(folders["env2"])])
    )
    monkeypatch.setenv("HPCTRAIN_SITES", str(folders["old"]))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(folders["config"]))
    return folders


def profile(folder: Path, name: str, description: str = "d") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.yaml"
    path.write_text(PROFILE.format(name=name, description=description))
    return path


def test_the_search_path_is_project_environment_older_variable_user_then_hpctrain(
    places: dict[str, Path],
) -> None:
    assert search_path() == [
        ("./site-configs", places["project"] / "site-configs"),
        ("$HPCTRAIN_SITE_PATH", places["env1"]),
        ("$HPCTRAIN_SITE_PATH", places["env2"]),
        ("$HPCTRAIN_SITES", places["old"]),
        ("~/.config/hpctrain/sites", places["config"] / "hpctrain" / "sites"),
        ("hpctrain", data_folder("site_configs")),
    ]
    assert user_folder() == places["config"] / "hpctrain" / "sites"


def test_the_first_folder_that_has_the_name_wins(places: dict[str, Path]) -> None:
    later = profile(places["env2"], "mine")
    assert locate("mine") == later
    earlier = profile(places["env1"], "mine")
    assert locate("mine") == earlier
    project = profile(places["project"] / "site-configs", "mine")
    assert locate("mine") == project
    assert locate("local") == data_folder("site_configs") / "local.yaml"


def test_a_path_is_taken_as_it_is(places: dict[str, Path], tmp_path: Path) -> None:
    assert locate("sub/x") == Path("sub/x")
    assert locate("x.yaml") == Path("x.yaml")
    assert locate(str(tmp_path / "y.yml")) == tmp_path / "y.yml"


@pytest.mark.parametrize("empty", ["", "  "])
def test_an_empty_name_is_a_one_line_error(places: dict[str, Path], empty: str) -> None:
    with pytest.raises(SpecError, match=r"^--site: empty; give a site name"):
        locate(empty)


def test_an_unknown_name_lists_the_names_there_are(places: dict[str, Path]) -> None:
    profile(places["old"], "zeta")
    with pytest.raises(SpecError) as raised:
        locate("nope")
    message = str(raised.value)
    assert "\n" not in message and message.startswith("--site nope: no site profile of that name (")
    assert "zeta" in message and "local" in message


def test_the_listing_marks_shadowed_profiles_and_reads_descriptions(places: dict[str, Path]) -> None:
    profile(places["env1"], "local", "my local")
    (places["env2"] / "broken.yaml").write_text("name: broken\npartitions: 3\n")
    entries = {(e.name, e.source): e for e in listing()}
    mine = entries[("local", "$HPCTRAIN_SITE_PATH")]
    builtin = entries[("local", "hpctrain")]
    assert (mine.shadowed, mine.description) == (False, "my local")
    assert builtin.shadowed and builtin.path == str(data_folder("site_configs") / "local.yaml")
    assert entries[("broken", "$HPCTRAIN_SITE_PATH")].description.startswith("(invalid: ")
    assert all(e.description == "" for e in listing(describe=False))


def test_a_folder_on_the_path_twice_is_listed_once(
    places: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    profile(places["env1"], "once")
    monkeypatch.setenv("HPCTRAIN_SITES", str(places["env1"]))
    assert [e.source for e in listing(describe=False) if e.name == "once"] == ["$HPCTRAIN_SITE_PATH"]
