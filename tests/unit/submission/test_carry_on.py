"""`submit --from RUN`'s checks, read off the specs and the checkpoint folder alone (the run itself is
tests/integration/test_carry_on.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpctrain import spec
from hpctrain.errors import SpecError
from hpctrain.rundir import RunDir
from hpctrain.submission.carry_on import incompatible, last_checkpoint
from tests.conftest import JOBS, SITES


def resolved(job: str, *overrides: str) -> spec.Resolved:
    return spec.resolve(spec.load_job(JOBS / job, list(overrides)), spec.load_site(SITES / "local.yaml"))


def test_the_same_model_under_other_settings_may_carry_on() -> None:
    saved = resolved("digits-ddp.yaml")
    assert incompatible(saved, resolved("digits-ddp.yaml", "train.lr=0.5", "train.steps=900")) is None
    assert incompatible(saved, resolved("digits-ddp.yaml", "resources.nodes=1")) is None


@pytest.mark.parametrize(
    ("job", "overrides", "says"),
    [
        ("digits-ddp.yaml", ["train.entrypoint=hpctrain.examples.gpt:build"], "train.entrypoint"),
        ("digits-ddp.yaml", ["train.options.hidden=7"], "train.options.hidden differ"),
        ("digits-ps-async.yaml", [], ""),
    ],
)
def test_another_model_or_layout_is_refused_naming_what_differs(
    job: str, overrides: list[str], says: str
) -> None:
    why = incompatible(resolved("digits-ddp.yaml"), resolved(job, *overrides))
    assert why is not None and says in why


def test_only_a_complete_checkpoint_whose_files_are_all_there_is_taken(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    with pytest.raises(SpecError, match="no complete checkpoint"):
        last_checkpoint(run)
    good, newer = run.checkpoints / "step-00000010", run.checkpoints / "step-00000020"
    for folder, size in ((good, 7), (newer, 9)):
        folder.mkdir(parents=True)
        (folder / "__0_0.distcp").write_bytes(b"x" * 7)
        files = f'{{"__0_0.distcp": {{"size": {size}, "crc32": "00000000"}}}}'
        (folder / "manifest.json").write_text(f'{{"step": {folder.name[-2:]}, "files": {files}}}')
    (run.checkpoints / "step-00000030.tmp").mkdir()  # a save cut off
    assert last_checkpoint(run) == (good, 10)  # the newer one's file is short: not taken
