"""Hyper-parameter sweeps as Slurm job arrays: expand the grid, validate every trial, submit in chunks.

A sweep is one run directory (the sweep's root) whose array elements are its trials: trial `i` runs
in ``array-i/`` with its own resolved ``spec.json`` (written here, before anything is submitted),
metrics, checkpoints and result, and (for a grid over env.* keys) the ``trial-env.sh`` its script
sources. Trials that need different batch scripts (resources.*, anything the script is made of) go
out as separate arrays. Above the cluster's MaxArraySize the trials go out as several arrays, each
adding its index offset (the cap is on the index itself, so a later chunk cannot just use indices
1001-2000). ``sweep.json`` in the root records the trials and the arrays.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import msgspec

from hpctrain import rundir, spec
from hpctrain.errors import BackendError, SpecError
from hpctrain.rundir import ArrayChunk, SweepRecord, Trial
from hpctrain.rundir.structs import SweepValue as Value
from hpctrain.sweep.grid import describe, parse_grid_options
from hpctrain.sweep.policy import settle_pruning
from hpctrain.sweep.samplers import check_space, points, trial_count
from hpctrain.tracking.index import MIN_PREFIX, Index, check_key

if TYPE_CHECKING:
    from hpctrain.scheduler.base import Backend, Limits


# ---------------------------------------------------------------------------------------------
# Trials (the grid's expansion is in grid.py)
# ---------------------------------------------------------------------------------------------


def settings(job: spec.JobSpec, grid: list[str], **given: Any) -> spec.Sweep:
    """The job's `sweep:` section with the command line's --grid entries and options on top (a
    command-line key replaces the same key of the spec's grid)."""
    data = msgspec.to_builtins(job.sweep or spec.Sweep())
    data["grid"] = {**data["grid"], **parse_grid_options(grid)}
    data.update({key: value for key, value in given.items() if value is not None})
    return spec.decode(spec.Sweep, data, "sweep")


class Prepared(NamedTuple):
    """What every trial of a sweep is made from: its settings, the job with a section for every swept
    key, and the site."""

    chosen: spec.Sweep
    base: bytes
    """The job's data, JSON: a trial stores its values at the ends of the swept keys' sections."""
    site: spec.Site
    origin: str
    site_name: str


def prepare(
    job_path: str | Path,
    site: str,
    overrides: list[str],
    cli_grid: list[str],
    limits: Limits | None = None,
    **options: Any,
) -> Prepared:
    """The sweep's settings checked, and counted against sweep.max_trials and `limits`, before any
    trial is made."""
    from hpctrain.site import lookup as sites
    from hpctrain.spec.resources import job_file

    job = spec.load_job(job_file(job_path), overrides)
    site_profile = spec.load_site(sites.locate(site))
    chosen = settings(job, cli_grid, **options)
    if job.array:
        raise SpecError(f"{job_path}: array: a sweep makes its own job array; remove `array`")
    check_space(chosen)
    for key in chosen.grid:
        if key.startswith("sweep."):
            raise SpecError(f"sweep.grid.{key}: a sweep's own settings cannot be swept")
    chosen = settle_pruning(chosen, job)
    _check_early_stop(chosen, job, str(job_path))
    check_size(trial_count(chosen), chosen.max_trials, limits)
    check_round_size(chosen, limits)
    base = msgspec.to_builtins(job)
    # A trial's watcher reads early_stop from its own spec; with optuna the study prunes instead.
    trial_sweep = chosen if chosen.sampler != "optuna" else msgspec.structs.replace(chosen, early_stop=None)
    base["sweep"] = msgspec.to_builtins(trial_sweep)
    # Once per key, the `--set` machinery makes the key's path a chain of sections (a `parallel`
    # shorthand becomes its dims); then each trial only stores its typed values at the ends.
    _check_placeholders(chosen, job, str(job_path))
    try:
        spec.apply_overrides(
            base, [f"{key}=0" for key in chosen.grid if not key.startswith(PARAMS)], str(job_path)
        )
    except SpecError as err:
        raise SpecError(f"sweep.grid: {err}".replace("--set ", "")) from None
    return Prepared(chosen, msgspec.json.encode(base), site_profile, str(job_path), site)


def resolve_points(
    prepared: Prepared, points: list[dict[str, Value]], first: int = 0
) -> tuple[list[Trial], list[spec.Resolved]]:
    """Trials `first`, `first`+1... with these settings, each resolved; the first that the site
    refuses stops everything, named."""
    trials: list[Trial] = []
    resolved: list[spec.Resolved] = []
    for number, params in enumerate(points, start=first):
        data = msgspec.json.decode(prepared.base)
        fill_placeholders(
            data, {k.removeprefix(PARAMS): v for k, v in params.items() if k.startswith(PARAMS)}
        )
        for key, value in params.items():
            if key.startswith(PARAMS):
                continue
            *sections, last = key.split(".")
            node = data
            for section in sections:
                node = node[section]
            node[last] = value
        try:
            trial_job = spec.decode(spec.JobSpec, data, prepared.origin)
            resolved.append(spec.resolve(trial_job, prepared.site, prepared.origin, prepared.site_name))
        except SpecError as err:
            raise SpecError(f"trial {number} ({describe(params)}): {err}") from None
        trials.append(Trial(number, params))
    return trials, resolved


PARAMS = "params."
"""Grid keys of a command job's own parameters: `params.lr` fills `{lr}` in its command and env values."""


def fill_placeholders(data: dict[str, Any], values: Mapping[str, Value]) -> None:
    """A trial's `{name}` placeholders in the job data's command words and env values."""
    if not values:
        return

    def fill(text: str) -> str:
        for name, value in values.items():
            text = text.replace("{" + name + "}", str(value))
        return text

    command = data.get("command")
    if isinstance(command, str):
        data["command"] = fill(command)
    elif isinstance(command, list):
        data["command"] = [fill(word) if isinstance(word, str) else word for word in command]
    env = data.get("env") or {}
    data["env"] = {key: fill(value) if isinstance(value, str) else value for key, value in env.items()}


def _check_placeholders(chosen: spec.Sweep, job: spec.JobSpec, origin: str) -> None:
    """Every params.NAME of the grid fills a `{NAME}` of the command job's command or env."""
    texts = [*job.command_words, *(str(value) for value in job.env.values())]
    for key in chosen.grid:
        if not key.startswith(PARAMS):
            continue
        if job.command is None:
            raise SpecError(
                f"{origin}: sweep.grid.{key}: params.* fill a command's placeholders; this job has none"
            )
        name = key.removeprefix(PARAMS)
        if not any("{" + name + "}" in text for text in texts):
            raise SpecError(f"{origin}: sweep.grid.{key}: no {{{name}}} in the job's command or env to fill")


def resolve_trials(
    job_path: str | Path,
    site: str,
    overrides: list[str],
    cli_grid: list[str],
    limits: Limits | None = None,
    **options: Any,
) -> tuple[spec.Sweep, list[Trial], list[spec.Resolved]]:
    """Every trial's resolved spec (grid or random sampler), in the sampler's order."""
    prepared = prepare(job_path, site, overrides, cli_grid, limits, **options)
    trials, resolved = resolve_points(prepared, points(prepared.chosen))
    return prepared.chosen, trials, resolved


def check_size(count: int, max_trials: int, limits: Limits | None = None) -> None:
    """Refuse a sweep too large for sweep.max_trials or for the cluster, from its count alone."""
    if count > max_trials:
        raise SpecError(
            f"sweep: {count} trials, more than sweep.max_trials={max_trials}; narrow the grid, "
            "draw some with --random N, or raise --max-trials"
        )
    if limits is None:
        return
    if limits.max_array_size < 1:
        raise SpecError("this cluster has job arrays switched off (MaxArraySize=0); a sweep needs them")
    if limits.max_submit_jobs is not None and limits.queued + count > limits.max_submit_jobs:
        raise SpecError(
            f"sweep: {count} trials would exceed this user's MaxSubmitJobs={limits.max_submit_jobs} "
            f"({limits.queued} jobs already queued); sweep fewer (--random N) or wait"
        )


def check_round_size(chosen: spec.Sweep, limits: Limits | None) -> None:
    """Refuse an optuna round that one array cannot hold (above the cluster's MaxArraySize), before
    any trial folder is written: sbatch would refuse it only after the whole round was written."""
    if chosen.sampler != "optuna" or limits is None:
        return
    size = min(chosen.round_size, chosen.budget or 0)
    if size > limits.max_array_size:
        raise SpecError(
            f"sweep.round_size: a round of {size} trials is one job array, above this cluster's "
            f"MaxArraySize={limits.max_array_size}; give --round-size {limits.max_array_size} or fewer"
        )


def swept_env(chosen: spec.Sweep) -> list[str]:
    """The environment variables the grid sets per trial (its env.* keys)."""
    return [key.split(".", 1)[1] for key in chosen.grid if key.startswith("env.")]


def array_spec(
    one: spec.Resolved, env_per_trial: list[str], array: str, dependency: str | None
) -> spec.Resolved:
    """The spec an array's script is rendered from: one of its trials', as an array, without the
    environment that each element exports for itself (trial-env.sh)."""
    env = {key: value for key, value in one.job.env.items() if key not in env_per_trial}
    job = msgspec.structs.replace(one.job, env=env, array=array, dependency=dependency)
    return msgspec.structs.replace(one, job=job)


def group_by_script(
    resolved: list[spec.Resolved], env_per_trial: list[str], backend: Backend
) -> list[list[int]]:
    """Trial numbers grouped by the batch script they need: trials that differ in resources.* (or
    anything else the script is made of) cannot share an array. The training section and the swept
    environment never split a group: each element reads those from its own folder."""
    if not resolved:
        return []
    train, command = resolved[0].job.train, resolved[0].job.command
    script_of: dict[bytes, str] = {}
    groups: dict[str, list[int]] = {}
    for number, one in enumerate(resolved):
        shaped = array_spec(one, env_per_trial, "0-1", one.job.dependency)
        # The render is the slow part: trials that differ only in their training section (the usual
        # sweep) share one, since the script is not made from it.
        key = msgspec.json.encode(
            msgspec.structs.replace(
                shaped, job=msgspec.structs.replace(shaped.job, train=train, command=command)
            )
        )
        if key not in script_of:
            script_of[key] = backend.prepare(shaped, Path("/RUN_DIR")).script
        groups.setdefault(script_of[key], []).append(number)
    return list(groups.values())


def _check_early_stop(chosen: spec.Sweep, job: spec.JobSpec, origin: str) -> None:
    from hpctrain.rundir.lines import EVAL_FIELDS

    if chosen.early_stop is None:
        return
    if job.train is None:
        raise SpecError(f"{origin}: sweep.early_stop: compares eval lines, which only train jobs write")
    every, first = job.train.eval_every, chosen.early_stop.after_steps
    if chosen.metric not in EVAL_FIELDS:
        raise SpecError(
            f"{origin}: sweep.metric: early stopping compares eval lines: use {' or '.join(EVAL_FIELDS)}"
        )
    if every == 0 or first % every:
        raise SpecError(
            f"{origin}: sweep.early_stop.after_steps: {first} must be a multiple of train.eval_every "
            f"({every}): trials are compared on their evaluations"
        )


# ---------------------------------------------------------------------------------------------
# Chunks within the cluster's limits (Backend.limits)
# ---------------------------------------------------------------------------------------------


def plan_chunks(groups: list[int], max_array_size: int, max_parallel: int | None = None) -> list[ArrayChunk]:
    """Arrays of at most MaxArraySize indices, none spanning two groups (trials that need different
    scripts, numbered one group after the other); --max-parallel K is split into lanes of chained chunks."""
    if max_array_size < 1:
        raise SpecError("this cluster has job arrays switched off (MaxArraySize=0); a sweep needs them")
    chunks: list[ArrayChunk] = []
    first = 0
    for size in groups:
        chunks += [
            ArrayChunk(offset=first + start, count=min(max_array_size, size - start))
            for start in range(0, size, max_array_size)
        ]
        first += size
    if max_parallel:
        lanes = min(max_parallel, len(chunks))
        for position, chunk in enumerate(chunks):
            lane = position % lanes
            chunk.throttle = max_parallel // lanes + (1 if lane < max_parallel % lanes else 0)
            chunk.after = position - lanes if position >= lanes else None
    return chunks


# ---------------------------------------------------------------------------------------------
# Submission
# ---------------------------------------------------------------------------------------------


def submit(
    job_path: str | Path,
    site: str,
    overrides: list[str] | None = None,
    grid: list[str] | None = None,
    backend_name: str | None = None,
    index: Index | None = None,
    progress: Callable[[str], None] | None = None,
    **options: Any,
) -> SweepRecord:
    """Validate every trial, then (launch.submission's one submit path) write each one's spec and
    one script per chunk, and submit the chunks: all or nothing. A sweep with sampler optuna runs
    its rounds here (sweep/study.py), telling `progress` what each round did, until its budget is
    spent or it is stopped."""
    from hpctrain.scheduler import select_backend
    from hpctrain.submission.submit_path import origin, snapshot_code, submit_run

    backend = select_backend(backend_name)
    limits = backend.limits()  # first: a backend without job arrays refuses before any work
    prepared = prepare(job_path, site, overrides or [], grid or [], limits, **options)
    asked = origin(job_path, site, overrides, backend)
    if prepared.chosen.sampler == "optuna":
        from hpctrain.sweep.study import start

        return start(prepared, backend, index, asked, progress)
    chosen = prepared.chosen
    trials, resolved = resolve_points(prepared, points(chosen))
    env_per_trial = swept_env(chosen)
    groups = group_by_script(resolved, env_per_trial, backend)
    # Each array holds consecutive trials: the trials are numbered group by group (grid order within).
    order = [number for group in groups for number in group]
    trials = [Trial(new, trials[old].params) for new, old in enumerate(order)]
    resolved = [resolved[old] for old in order]
    chunks = plan_chunks([len(group) for group in groups], limits.max_array_size, chosen.max_parallel)
    record = new_record(chosen, resolved[0], backend.name, trials, chunks)

    def write(run: rundir.RunDir) -> rundir.RunDir:
        snapshot_code(resolved[0], run)  # every trial runs this copy (code.snapshot)
        write_trials(run, trials, resolved, env_per_trial)
        record.sweep_id = run.root.name
        rundir.write_json(run.sweep, record)  # before sbatch: no queued array without its record
        return run

    def schedule(run: rundir.RunDir) -> dict[str, str]:
        submit_chunks(record, chunks, resolved, env_per_trial, run, backend)
        rundir.write_json(run.sweep, record)
        return {("" if c.offset == 0 else f"+{c.offset}"): c.job_id or "" for c in chunks}

    done = submit_run(index, backend, resolved[0], asked, write, schedule)
    if done.error is not None:
        raise BackendError(
            f"{done.error} (nothing of the sweep stays queued; its specs are in {done.run.run_dir})"
        )
    return record


def new_record(
    chosen: spec.Sweep, first: spec.Resolved, backend: str, trials: list[Trial], chunks: list[ArrayChunk]
) -> SweepRecord:
    """sweep.json before its submission: no sweep id (its run directory's name) and no job ids yet."""
    return SweepRecord(
        sweep_id="",
        name=first.job.name,
        site=first.site.name,
        backend=backend,
        submitted_at=time.time(),
        metric=chosen.metric,
        mode=chosen.mode,
        max_parallel=chosen.max_parallel,
        params=list(chosen.grid),
        trials=trials,
        arrays=chunks,
    )


def write_trials(
    run: rundir.RunDir, trials: list[Trial], resolved: list[spec.Resolved], env_per_trial: list[str]
) -> None:
    """Each trial's folder with its resolved spec (and the swept environment its script sources)."""
    for trial, trial_spec in zip(trials, resolved, strict=True):
        element = run.element(trial.index)
        os.mkdir(element.root)  # the batch script makes the element's logs/ itself
        _write_new(element.spec, spec.dumps(trial_spec))
        if env_per_trial:
            _write_new(element.trial_env, _exports(trial_spec.job.env, env_per_trial))


def _write_new(path: Path, data: bytes) -> None:
    """A new file, with bare system calls: a sweep pays this once or twice per trial."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def _exports(env: dict[str, Any], keys: list[str]) -> bytes:
    """trial-env.sh: the trial's values of the swept variables, quoted as the batch script quotes its own."""
    from hpctrain.scheduler.render import env_items, shell_quote

    items = env_items({key: env[key] for key in keys})
    return "".join(f"export {key}={shell_quote(value)}\n" for key, value in items).encode()


def submit_chunks(
    record: SweepRecord,
    chunks: list[ArrayChunk],
    resolved: Sequence[spec.Resolved] | Mapping[int, spec.Resolved],
    env_per_trial: list[str],
    run: rundir.RunDir,
    backend: Backend,
) -> None:
    """One sbatch per chunk (of `record.arrays`), each rendered from the spec of its first trial
    (`resolved` by trial number); if one is refused, the chunks already queued are cancelled."""
    try:
        for chunk in chunks:
            first = resolved[chunk.offset]
            dependency = first.job.dependency
            if chunk.after is not None:
                wait = f"afterany:{record.arrays[chunk.after].job_id}"
                dependency = f"{wait},{dependency}" if dependency else wait
            chunk_spec = array_spec(first, env_per_trial, chunk.array, dependency)
            request = backend.prepare(chunk_spec, run.root, run.chunk_script(chunk.offset), chunk.offset)
            request.path.write_text(request.script)
            chunk.job_id = backend.schedule(request)
    except BackendError:
        queued = [c.job_id for c in chunks if c.job_id]
        if queued:
            backend.cancel(queued)
        raise


def trial_dir(root: Path, trial: int) -> rundir.RunDir:
    return rundir.RunDir(root).element(trial)


def trial_batch_log(root: Path, record: SweepRecord, trial: int) -> Path:
    """Slurm names an element's batch log by its index within its own array, plus that array's offset."""
    from hpctrain.scheduler.render import batch_log_name

    chunk = record.chunk_of(trial)
    pattern = batch_log_name(True, chunk.offset)
    return rundir.RunDir(root).logs / pattern.replace("%a", str(trial - chunk.offset))


def load(root: Path) -> SweepRecord | rundir.Unreadable | None:
    return rundir.read_json(rundir.RunDir(root).sweep, SweepRecord, max_bytes=64 << 20)


def find(index: Index, key: str) -> tuple[Path, SweepRecord | rundir.Unreadable] | None:
    """The sweep that `key` names: its id, a prefix of it, or the job id of one of its arrays."""
    check_key(key)
    runs = index.runs()
    roots = {r.run_dir for r in runs if key in (r.job_id, r.run_id)}
    if len(key) >= MIN_PREFIX:  # the resolver's rule (runs/index.py): a short prefix names no run
        roots = roots or {r.run_dir for r in runs if r.run_id.startswith(key)}
    found = [(root, load(root)) for root in sorted(roots)]
    sweeps = [(root, record) for root, record in found if record is not None]
    return sweeps[0] if len(sweeps) == 1 else None
