"""`submit --from RUN`: a new run that starts from an earlier run's last checkpoint.

Checked at submit, before anything is written: the earlier run has a complete checkpoint whose files
are all there at their recorded sizes (the job verifies their checksums as every resume does), the
model is built the same way (the same `train.entrypoint` and `train.options`), the layouts can load
each other's checkpoints, and the new run has steps left to train. The new run's `checkpoints/`
then holds a link to that checkpoint folder: its first attempt loads model, optimizer, LR schedule,
data position and step from it as a resume would, and carries on to its own `train.steps`. Its
metrics record a `resumed` event naming the earlier run's folder; the earlier run is never written to.
"""

from __future__ import annotations

import os
from pathlib import Path

import msgspec

from hpctrain import spec
from hpctrain.errors import InputError, SpecError
from hpctrain.rundir import CheckpointManifest, RunDir, read_json
from hpctrain.rundir.names import CHECKPOINT, CHECKPOINT_MANIFEST


class Origin(msgspec.Struct, frozen=True):
    """The checkpoint a run starts from."""

    run_id: str
    checkpoint: Path
    """The earlier run's checkpoint folder (checkpoints/step-N)."""
    step: int


def find_origin(key: str, resolved: spec.Resolved, origin: str) -> Origin:
    """The last complete checkpoint of the run `key` names (job id, run id or prefix), checked
    against the job `resolved` will run; a one-line error names what does not fit."""
    from hpctrain.tracking.index import Index

    found, _ = Index().find([key])
    if not found:
        raise InputError(f"--from {key}: no run tracked by hpctrain has that job id or run id")
    earlier = found[0]
    run = RunDir(earlier.run_dir)
    try:
        saved = spec.loads(run.spec.read_bytes())
    except (OSError, SpecError) as err:
        raise InputError(f"--from {key}: cannot read {run.spec}: {err}") from None
    why = incompatible(saved, resolved)
    if why:
        raise SpecError(f"{origin}: --from {earlier.run_id}: {why}")
    checkpoint, step = last_checkpoint(run)
    if resolved.job.train.steps <= step:
        raise SpecError(
            f"{origin}: train.steps: {resolved.job.train.steps} is not above step {step} of run "
            f"{earlier.run_id}'s checkpoint; raise train.steps to train further"
        )
    return Origin(earlier.run_id, checkpoint, step)


def incompatible(saved_run: spec.Resolved, new_run: spec.Resolved) -> str | None:
    """Why a checkpoint of `saved` cannot start `new`, or None. The model must be built the same way;
    data, tensor and fully sharded parallelism may change (a checkpoint reshards on load), the
    pipeline stages and a parameter server may not (they save other pieces of the model)."""
    saved, new = saved_run.job, new_run.job
    if saved.train.entrypoint != new.train.entrypoint:
        return (
            f"train.entrypoint {new.train.entrypoint} is not the earlier run's {saved.train.entrypoint}: "
            "its checkpoint holds another model"
        )
    changed = sorted(
        key
        for key in saved.train.options.keys() | new.train.options.keys()
        if saved.train.options.get(key) != new.train.options.get(key)
    )
    if changed:
        return (
            f"train.options.{', train.options.'.join(changed)} differ from the earlier run's: the model "
            "it builds may not take its checkpoint"
        )
    old, now = saved_run.parallel, new_run.parallel
    if old.pp != now.pp:
        return (
            f"train.parallel.pp {now.pp} is not the earlier run's {old.pp}: pipeline stages save their "
            "own layers"
        )
    if (old.ps is None) != (now.ps is None):
        return "one of the two runs uses a parameter server: its checkpoints are the servers' own"
    return None


def last_checkpoint(run: RunDir) -> tuple[Path, int]:
    """The newest checkpoint folder with a manifest whose files are all there at their sizes."""
    root = run.checkpoints
    try:
        names = sorted((n for n in os.listdir(root) if CHECKPOINT.number(n) is not None), reverse=True)
    except OSError:
        names = []
    for name in names:
        if CHECKPOINT.name(CHECKPOINT.number(name) or 0) != name:
            continue  # step-N.tmp, .discarded
        folder = root / name
        manifest = read_json(folder / CHECKPOINT_MANIFEST, CheckpointManifest)
        if isinstance(manifest, CheckpointManifest) and _sizes_match(folder, manifest):
            return folder, manifest.step
    raise SpecError(
        f"--from {run.root.name}: the run has no complete checkpoint in {root} (set train.checkpoint_every)"
    )


def _sizes_match(folder: Path, manifest: CheckpointManifest) -> bool:
    try:
        return all(
            (folder / name).stat().st_size == expected.size for name, expected in manifest.files.items()
        )
    except OSError:
        return False


def link(new_run: RunDir, start: Origin) -> None:
    """The new run's checkpoints/ with a link to the earlier run's checkpoint: found and loaded by the
    runtime as its own last checkpoint (pruning later drops the link, never the folder it names)."""
    checkpoints = new_run.checkpoints
    checkpoints.mkdir(exist_ok=True)
    os.symlink(start.checkpoint, checkpoints / start.checkpoint.name, target_is_directory=True)


def linked(run_dir: Path) -> str | None:
    """What a run made with --from starts from, in words (the checkpoint its checkpoints/ links to);
    None for a run that starts afresh."""
    try:
        entries = sorted(RunDir(run_dir).checkpoints.iterdir())
    except OSError:
        return None
    for entry in entries:
        if entry.is_symlink() and CHECKPOINT.number(entry.name) is not None:
            target = Path(os.readlink(entry))
            return f"{target} (step {CHECKPOINT.number(target.name)} of run {target.parent.parent.name})"
    return None
