"""Files hpctrain writes for the user to edit (examples, site profiles): one rule against losing edits.

A file that already exists with other content is never overwritten unless the verb got `--force`;
the refusal names every such file and comes before anything is written. A file that already holds
exactly the new content is left as it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from hpctrain.errors import InputError


def differing(files: Mapping[Path, bytes | None]) -> list[Path]:
    """The files that exist with other content than they would get (None: content not known yet,
    so any existing file differs)."""
    found = []
    for path, data in files.items():
        if not path.exists() and not path.is_symlink():
            continue
        try:
            same = data is not None and path.is_file() and path.read_bytes() == data
        except OSError:
            same = False
        if not same:
            found.append(path)
    return found


def refuse_overwrite(files: Mapping[Path, bytes | None], force: bool) -> None:
    """One line naming the files that `--force` would overwrite; nothing when `force` or none differs."""
    if force:
        return
    changed = differing(files)
    if changed:
        names = ", ".join(str(p) for p in changed)
        known = all(files[p] is not None for p in changed)
        why = "differs from the file hpctrain would write" if known else "exists"
        if len(changed) > 1:
            why = "differ from the files hpctrain would write" if known else "exist"
        raise InputError(f"not overwriting {names}: {why}; pass --force to overwrite")


def write_user_files(files: Mapping[Path, bytes], force: bool) -> dict[Path, bool]:
    """Write each file atomically after `refuse_overwrite`; {path: whether it was written} (a file
    that already holds the content is not)."""
    from hpctrain.rundir import replace_bytes

    refuse_overwrite(files, force)
    unchanged = set(files) - set(differing(files))
    written = {}
    for path, data in files.items():
        if path in unchanged and path.exists():
            written[path] = False
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        replace_bytes(path, data)
        written[path] = True
    return written
