"""Where site profiles are found by name, in order, and the list of every profile that can be named."""

from __future__ import annotations

import os
from pathlib import Path

import msgspec

from hpctrain.spec.resources import data_folder


class SiteEntry(msgspec.Struct):
    """One profile file; `shadowed` when a folder earlier in the search path has the same name."""

    name: str
    path: str
    source: str
    description: str = ""
    shadowed: bool = False


def _env_folders(variable: str) -> list[Path]:
    return [Path(p) for p in os.environ.get(variable, "").split(os.pathsep) if p]


def user_folder() -> Path:
    config = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(config) / "hpctrain" / "sites"


def search_path() -> list[tuple[str, Path]]:
    """(source, folder) in lookup order: the project, the environment, the user, then hpctrain's own."""
    folders = [("./site-configs", Path.cwd() / "site-configs")]
    folders += [("$HPCTRAIN_SITE_PATH", p) for p in _env_folders("HPCTRAIN_SITE_PATH")]
    # $HPCTRAIN_SITES is the older name of $HPCTRAIN_SITE_PATH; both are read.
    folders += [("$HPCTRAIN_SITES", p) for p in _env_folders("HPCTRAIN_SITES")]
    folders.append(("~/.config/hpctrain/sites", user_folder()))
    folders.append(("hpctrain", data_folder("site_configs")))
    return folders


def locate(name_or_path: str) -> Path:
    """A profile by path, or by name from search_path(); a name found nowhere is a one-line SpecError."""
    from hpctrain.errors import SpecError

    if not str(name_or_path).strip():
        raise SpecError("--site: empty; give a site name (e.g. local) or a path")
    path = Path(name_or_path)
    if path.suffix or path.exists() or len(path.parts) != 1:
        return path
    for _, folder in search_path():
        if (folder / f"{name_or_path}.yaml").is_file():
            return folder / f"{name_or_path}.yaml"
    names = sorted({e.name for e in listing(describe=False)})
    raise SpecError(
        f"--site {name_or_path}: no site profile of that name ({', '.join(names)}; see `hpctrain sites`)"
    )


def listing(describe: bool = True) -> list[SiteEntry]:
    """Every profile that `--site NAME` can reach, first match per name wins."""
    entries: list[SiteEntry] = []
    seen: set[str] = set()
    visited: set[Path] = set()
    for source, folder in search_path():
        if not folder.is_dir() or folder.resolve() in visited:
            continue  # e.g. ./site-configs in the checkout is also hpctrain's own folder
        visited.add(folder.resolve())
        for path in sorted(folder.glob("*.yaml")):
            entries.append(
                SiteEntry(
                    path.stem,
                    str(path),
                    source,
                    _description(path) if describe else "",
                    shadowed=path.stem in seen,
                )
            )
            seen.add(path.stem)
    return entries


def _description(path: Path) -> str:
    from hpctrain.errors import SpecError
    from hpctrain.spec import load_site

    try:
        return load_site(path).description
    except SpecError as err:
        return f"(invalid: {err})"
