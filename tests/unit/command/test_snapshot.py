"""The code snapshot's rule: source is copied; data, environments, caches and large files are not."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpctrain.errors import SpecError
from hpctrain.submission import code_snapshot


def tree(root: Path, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def test_source_is_copied_and_data_environments_and_large_files_are_not(tmp_path: Path) -> None:
    source = tmp_path / "src"
    tree(
        source,
        {
            "train.py": b"print(1)\n",
            "config/small.yaml": b"lr: 1\n",
            "pkg/model.py": b"x = 1\n",
            ".git/HEAD": b"ref\n",
            "pkg/__pycache__/model.cpython-311.pyc": b"\0",
            "data/train.bin": b"\0" * 10,
            "myenv/pyvenv.cfg": b"home = /usr\n",
            "myenv/lib/x.py": b"",
            "weights.pt": b"\0",
            "big.txt": b"x" * (code_snapshot.MAX_FILE_BYTES + 1),
            "mypkg.egg-info/PKG-INFO": b"",
        },
    )
    taken = code_snapshot.take(source, tmp_path / "run" / "code")
    copied = sorted(
        str(p.relative_to(tmp_path / "run" / "code"))
        for p in (tmp_path / "run" / "code").rglob("*")
        if p.is_file()
    )
    assert copied == ["config/small.yaml", "pkg/model.py", "train.py"]
    assert taken.files == 3 and taken.size == len(b"print(1)\n") + len(b"lr: 1\n") + len(b"x = 1\n")
    assert "3 files" in taken.line() and str(source) in taken.line()


def test_a_workdir_with_too_much_source_is_refused_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(code_snapshot, "MAX_FILES", 3)
    tree(tmp_path / "src", {f"m{i}.py": b"" for i in range(5)})
    with pytest.raises(SpecError, match=r"code\.snapshot: .* set code\.snapshot: false"):
        code_snapshot.take(tmp_path / "src", tmp_path / "code")
