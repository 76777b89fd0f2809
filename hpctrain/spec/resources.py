"""Where hpctrain's data folders are: inside the installed package (wheel) or the checkout (editable)."""

from __future__ import annotations

from pathlib import Path

from hpctrain.errors import SpecError

PACKAGE = Path(__file__).resolve().parents[1]  # hpctrain/spec/resources.py -> the hpctrain package
CHECKOUT = PACKAGE.parent
# Package name of each data folder -> its folder at the top of the repository (see setup.py).
FOLDERS = {"templates": "templates", "site_configs": "site-configs", "example_jobs": "jobs"}


def data_folder(name: str) -> Path:
    """A wheel installs hpctrain/<name>; an editable install or a PYTHONPATH checkout has the top folder."""
    # The package's own folder, not importlib.resources: importing that (with zipfile and more) is a
    # start-up cost of every verb, and a zipped install has no real folder to hand out either way.
    packaged = PACKAGE / name
    if packaged.is_dir():
        return packaged
    return CHECKOUT / FOLDERS[name]


def example_jobs() -> dict[str, Path]:
    """The example job specs shipped with hpctrain, by name (digits-ddp, ...)."""
    return {path.stem: path for path in sorted(data_folder("example_jobs").glob("*.yaml"))}


def job_file(name_or_path: str | Path) -> Path:
    """A job spec path as given, or the shipped example of that name when no such file exists."""
    path = Path(name_or_path)
    if path.exists() or path.suffix or len(path.parts) != 1:
        return path
    examples = example_jobs()
    if str(name_or_path) in examples:
        return examples[str(name_or_path)]
    raise SpecError(
        f"{name_or_path}: no such file, and no example job of that name ({', '.join(examples)}); "
        "see `hpctrain examples`"
    )
