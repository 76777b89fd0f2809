"""Sweeps that learn (sweep.sampler optuna): an Optuna study, kept in the sweep's run directory, proposes
trials round by round; each round goes out as one job array and its results are told to the study.

The round loop runs on the login side, in the foreground of ``hpctrain sweep`` (and of ``hpctrain sweep
resume SWEEP``). It holds no state of its own: the study's journal (``study.journal``) and
``sweep.json`` say everything, so a loop that is stopped (Ctrl-C, a dropped session, `hpctrain sweep
cancel`) is resumed by running it again. A trial is numbered as the study numbers it, and that number
is its array-N/ folder. A trial that ends cancelled without being pruned (the sweep was cancelled) is
failed in the study and its settings are asked again first, so resuming loses no trial and runs none
twice.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import msgspec

from hpctrain import rundir, spec
from hpctrain.errors import BackendError, HpctrainError, SpecError
from hpctrain.rundir import ArrayChunk, RunRecord, Stopped, SweepRecord, Trial
from hpctrain.rundir import names as file_names
from hpctrain.rundir.states import JobState
from hpctrain.spec.sweep import Range
from hpctrain.submission.submit_path import snapshot_code, submit_more, submit_run
from hpctrain.sweep import plan, policy
from hpctrain.sweep.samplers import is_integer
from hpctrain.sweep.status import FINAL, STOPPED, survey

if TYPE_CHECKING:
    import optuna

    from hpctrain.rundir import SubmitInfo
    from hpctrain.scheduler.base import Backend
    from hpctrain.tracking.index import Index

POLL_S = 3.0
"""Seconds between two polls of a round's array while the loop waits for it."""
TAIL_CHUNK = 64 << 10
"""Bytes read at a time, backwards, to find the journal's last line."""
STUDY_NAME = "sweep"
CANCELLED = "cancelled"
"""The user attribute of a study trial whose job was cancelled: it is asked again, not counted."""

Progress = Callable[[str], None]


class Rounds(NamedTuple):
    """What every round of one sweep is asked, written and sent with."""

    study: optuna.Study
    prepared: plan.Prepared
    run: rundir.RunDir
    backend: Backend
    index: Index

    @property
    def chosen(self) -> spec.Sweep:
        return self.prepared.chosen


class Round(NamedTuple):
    """One round's trials, their resolved specs and the array chunk that runs them."""

    trials: list[Trial]
    resolved: list[spec.Resolved]
    chunk: ArrayChunk


class Settings(msgspec.Struct):
    """study-settings.json: the sweep section as planned, its default pruning made explicit in
    early_stop (the trials' own specs carry it without early_stop, which the study's pruner carries
    out)."""

    sweep: spec.Sweep


def require_optuna() -> Any:
    try:
        import optuna
    except ImportError:
        raise SpecError(
            "sweep.sampler optuna needs Optuna: pip install 'hpctrain[sweep]' (or pip install optuna)"
        ) from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


def open_study(root: Path, chosen: spec.Sweep) -> optuna.Study:
    """The sweep's study, made on first use, with the sampler and pruner of `search_policy`."""
    optuna = require_optuna()
    from optuna.storages import JournalStorage

    storage = JournalStorage(journal(root / file_names.STUDY_JOURNAL))
    sampler, pruner = search_policy(chosen)
    return optuna.create_study(
        study_name=STUDY_NAME,
        storage=storage,
        sampler=sampler,
        pruner=pruner,
        direction="minimize" if chosen.mode == "min" else "maximize",
        load_if_exists=True,
    )


def search_policy(chosen: spec.Sweep) -> tuple[optuna.samplers.BaseSampler, optuna.pruners.BasePruner]:
    """The sampler and pruner of an optuna sweep, from its settings and budget: multivariate TPE,
    seeded, that draws `policy.startup_trials` at random first and proposes the trials of a round
    apart (constant liar: a round is asked whole before any of it is told); the median pruner where
    early_stop asks for one (`policy.settle_pruning` sets it by default when the sweep is planned)."""
    optuna = require_optuna()
    with warnings.catch_warnings():
        # multivariate and constant_liar are marked experimental; the choice is deliberate.
        warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
        sampler = optuna.samplers.TPESampler(
            seed=chosen.seed,
            n_startup_trials=policy.startup_trials(chosen),
            constant_liar=True,
            multivariate=True,
        )
    pruner: optuna.pruners.BasePruner = optuna.pruners.NopPruner()
    if chosen.early_stop is not None:
        pruner = optuna.pruners.MedianPruner(
            n_startup_trials=chosen.early_stop.min_trials,
            n_warmup_steps=chosen.early_stop.after_steps,
            n_min_trials=chosen.early_stop.min_trials,
        )
    return sampler, pruner


def journal(path: Path) -> Any:
    """The study's journal file storage, whose records are whole lines: a record it cannot append (the
    disk is full) is cut back off and stops the sweep with one error that names the file and says how
    to carry on; what was recorded before stays readable."""
    from optuna.storages.journal import JournalFileBackend

    def stopped(error: OSError) -> HpctrainError:
        return HpctrainError(
            f"{path}: the sweep's study cannot record ({error.strerror or error}); nothing it recorded "
            f"is lost: make room, then run `hpctrain sweep resume {path.parent.name}`"
        )

    class Journal(JournalFileBackend):
        def read_logs(self, log_number_from: int) -> Iterator[dict[str, Any]]:
            try:
                yield from super().read_logs(log_number_from)
            except ValueError as error:  # a line that is no record (JSONDecodeError among them)
                raise HpctrainError(
                    f"{path}: a line of the sweep's study journal is not a record ({error}); "
                    "it was changed by hand or damaged: restore it from a backup"
                ) from None

        def append_logs(self, logs: list[dict[str, Any]]) -> None:
            # One loop writes a sweep's journal (_one_loop), so its size before the append is where
            # a record cut off by the full disk starts: a partial line would spoil every later one.
            before = os.path.getsize(path)
            try:
                super().append_logs(logs)
            except OSError as error:
                with contextlib.suppress(OSError):
                    os.truncate(path, before)
                raise stopped(error) from None

    try:
        drop_torn_tail(path)
        return Journal(str(path))
    except OSError as error:  # creating the file
        raise stopped(error) from None


def drop_torn_tail(path: Path) -> None:
    """Cut off the journal's last line if a writer died in it (no newline, or not JSON): Optuna would
    append the next record to it, and that line, then every read of the study, would fail. Only the
    round loop (under its lock) or a new sweep opens the journal, so no writer is cut short."""
    try:
        size = os.path.getsize(path)
    except FileNotFoundError:
        return
    with open(path, "rb") as handle:
        start = size
        while start > 0:  # back to the newline before the last line (records are short)
            chunk_start = max(0, start - TAIL_CHUNK)
            handle.seek(chunk_start)
            chunk = handle.read(start - chunk_start)
            newline = chunk.rfind(b"\n", 0, len(chunk) - (1 if start == size else 0))
            if newline >= 0:
                start = chunk_start + newline + 1
                break
            start = chunk_start
        handle.seek(start)
        last = handle.read()
    if not last:
        return
    try:
        whole = last.endswith(b"\n") and isinstance(json.loads(last), dict)
    except ValueError:
        whole = False
    if not whole:
        os.truncate(path, start)


def distributions(chosen: spec.Sweep) -> dict[str, Any]:
    """The search space as Optuna's distributions: a list is categorical, a Range an int or a float."""
    optuna = require_optuna()
    space: dict[str, Any] = {}
    with warnings.catch_warnings():
        # A range that is no whole number of steps long keeps low + k*step <= high (docs/sweeps.md),
        # as Optuna does too: its warning that it trims high says nothing the spec does not.
        warnings.filterwarnings("ignore", message=".*not divisible by", category=UserWarning)
        for key, dimension in chosen.grid.items():
            space[key] = _distribution(optuna, dimension)
    return space


def _distribution(optuna: Any, dimension: Any) -> Any:
    if isinstance(dimension, list):
        return optuna.distributions.CategoricalDistribution(dimension)
    if is_integer(dimension):
        return optuna.distributions.IntDistribution(
            int(dimension.low), int(dimension.high), log=dimension.log, step=int(dimension.step or 1)
        )
    return optuna.distributions.FloatDistribution(
        float(dimension.low), float(dimension.high), log=dimension.log, step=dimension.step
    )


def representative(chosen: spec.Sweep) -> dict[str, Any]:
    """A point of the space (each list's first value, each range's low end): the sweep root's spec."""
    return {k: d.low if isinstance(d, Range) else d[0] for k, d in chosen.grid.items()}


# ---------------------------------------------------------------------------------------------
# Start and resume
# ---------------------------------------------------------------------------------------------


def start(
    prepared: plan.Prepared,
    backend: Backend,
    index: Index | None,
    asked: SubmitInfo,
    progress: Progress | None = None,
) -> SweepRecord:
    """A new optuna sweep: its run directory and study (launch.submission's one submit path, which
    submits the first round), then its rounds until the budget is spent."""
    from hpctrain.tracking.index import Index

    index = index or Index()
    chosen = prepared.chosen
    _, (root_spec,) = plan.resolve_points(prepared, [representative(chosen)])
    record = plan.new_record(chosen, root_spec, backend.name, [], [])
    first: list[tuple[Rounds, Round]] = []

    def write(run: rundir.RunDir) -> rundir.RunDir:
        snapshot_code(root_spec, run)  # every trial runs this copy (code.snapshot)
        rundir.write_json(run.root / file_names.STUDY_SETTINGS, Settings(chosen))
        record.sweep_id = run.root.name
        rounds = Rounds(open_study(run.root, chosen), prepared, run, backend, index)
        first.append((rounds, _ask_round(rounds, record, chosen.budget or 0)))
        return run

    def schedule(run: rundir.RunDir) -> dict[str, str]:
        rounds, written = first[0]
        chunk = _send(rounds, record, written)
        return {"": chunk.job_id or ""}

    done = submit_run(index, backend, root_spec, asked, write, schedule)
    if done.error is not None:
        raise BackendError(f"{done.error} (nothing of the sweep stays queued; see {done.run.run_dir})")
    _say(progress, f"Sweep {record.sweep_id}: study in {done.run.run_dir}")
    _say(progress, _round_line(record))
    return drive(done.run.run_dir, prepared, backend, index, progress)


def resume(root: Path, progress: Progress | None = None, index: Index | None = None) -> SweepRecord:
    """Carry on an optuna sweep from its run directory: wait for the trials in flight, ask again the
    ones that were cancelled, and run rounds until the budget is spent."""
    from hpctrain.scheduler import select_backend
    from hpctrain.tracking.index import Index

    prepared = prepared_from(root)
    record = _load_record(root)
    return drive(root, prepared, select_backend(record.backend), index or Index(), progress)


def prepared_from(root: Path) -> plan.Prepared:
    """What the sweep's trials are made from, read back from its run directory: its settings, and the
    root's resolved spec (every swept key is set anew by each trial)."""
    run = rundir.RunDir(root)
    settings = rundir.read_json(root / file_names.STUDY_SETTINGS, Settings)
    if not isinstance(settings, Settings):
        why = "missing" if settings is None else str(settings)
        raise SpecError(f"{root}: not an optuna sweep ({file_names.STUDY_SETTINGS}: {why})")
    asked = rundir.read_json(run.submit_info, rundir.SubmitInfo)
    if not isinstance(asked, rundir.SubmitInfo):
        raise SpecError(f"{run.submit_info}: {asked or 'missing'}")
    resolved = spec.loads(run.spec.read_bytes())
    base = msgspec.json.encode(msgspec.to_builtins(resolved.job))
    return plan.Prepared(settings.sweep, base, resolved.site, asked.job, asked.site)


def _load_record(root: Path) -> SweepRecord:
    record = plan.load(root)
    if not isinstance(record, SweepRecord):
        raise SpecError(f"{rundir.RunDir(root).sweep}: {record or 'missing'}")
    return record


# ---------------------------------------------------------------------------------------------
# The round loop
# ---------------------------------------------------------------------------------------------


def drive(
    root: Path, prepared: plan.Prepared, backend: Backend, index: Index, progress: Progress | None
) -> SweepRecord:
    """Rounds until the budget is spent: submit what the study asked, wait for it (one poll of the
    sweep's arrays per POLL_S) reporting eval lines to the pruner, tell the results, ask more.
    Returns when the budget is spent, or when a trial was cancelled from outside (the sweep was
    cancelled: `hpctrain sweep resume` carries on)."""
    from hpctrain.rundir.io import private_files

    # Every later round's folders, specs and swept env, the lock and the journal: as private as the
    # first round, which the submit path wrote (docs/security.md).
    with private_files(prepared.site.share_with_group), _one_loop(root):
        return _drive_locked(root, prepared, backend, index, progress)


@contextlib.contextmanager
def _one_loop(root: Path) -> Iterator[None]:
    """One round loop per sweep: a second would submit the same asked trials again."""
    with open(root / file_names.STUDY_LOCK, "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise HpctrainError(
                f"sweep {root.name}: its rounds already run in another `hpctrain sweep` (or `resume`); "
                "stop that one first"
            ) from None
        yield


def _drive_locked(
    root: Path, prepared: plan.Prepared, backend: Backend, index: Index, progress: Progress | None
) -> SweepRecord:
    chosen = prepared.chosen
    study = open_study(root, chosen)
    record = _load_record(root)
    largest = backend.limits().max_array_size
    _send_unsent(Rounds(study, prepared, rundir.RunDir(root), backend, index), record, largest, progress)
    # Trials that ended while no loop ran (a cancelled sweep's among them) are told first: their
    # cancellation was what stopped the last loop, not a reason to stop this one.
    submitted = [t for t in _in_flight(study) if t.number < len(record.trials)]
    _wait_round(root, record, study, chosen, backend, submitted, progress, once=True)
    try:
        return _rounds(root, prepared, study, backend, index, progress, largest)
    except BackendError as error:  # a round's array refused: its trials are written and the study's
        raise BackendError(
            f"{error}; the round's trials are kept: carry on with {resume_command(record)}"
        ) from None
    except KeyboardInterrupt:
        _say(progress, f"Stopped waiting; the trials in flight go on. Carry on: {resume_command(record)}")
        raise


def _rounds(
    root: Path,
    prepared: plan.Prepared,
    study: optuna.Study,
    backend: Backend,
    index: Index,
    progress: Progress | None,
    largest: int,
) -> SweepRecord:
    """Rounds until the budget is spent, each at most `largest` trials (MaxArraySize: a sweep planned
    for a cluster that allowed more carries on in smaller rounds)."""
    chosen = prepared.chosen
    rounds = Rounds(study, prepared, rundir.RunDir(root), backend, index)
    budget = chosen.budget or 0
    while True:
        record = _load_record(root)
        in_flight = _in_flight(study)
        unsubmitted = [t for t in in_flight if t.number >= len(record.trials)]
        if unsubmitted:  # asked, then the loop was stopped before their array went out
            _schedule_round(rounds, record, _write_round(rounds, record, unsubmitted))
            _say(progress, _round_line(record))
            continue
        if in_flight:
            if not _wait_round(root, record, study, chosen, backend, in_flight, progress):
                _say(progress, f"Sweep {record.sweep_id} cancelled; carry on: {resume_command(record)}")
                return record
            continue
        done = counted(study)
        if done >= budget:
            break
        _schedule_round(rounds, record, _ask_round(rounds, record, min(budget - done, largest)))
        _say(progress, _round_line(record))
    _say(progress, _best_line(study, record, chosen))
    return record


def resume_command(record: SweepRecord) -> str:
    return f"hpctrain sweep resume {record.sweep_id}"


def counted(study: optuna.Study) -> int:
    """Trials that spend the budget: finished, pruned or failed, but not cancelled (asked again)."""
    from optuna.trial import TrialState

    ended = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
    return sum(1 for t in study.get_trials(deepcopy=False, states=ended) if not t.user_attrs.get(CANCELLED))


def _in_flight(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    from optuna.trial import TrialState

    return study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))


def _ask_round(rounds: Rounds, record: SweepRecord, room: int) -> Round:
    """Ask the study for a round of trials, resolve them and write their folders (not submitted yet)."""
    size = min(rounds.chosen.round_size, room)
    space = distributions(rounds.chosen)
    return _write_round(rounds, record, [rounds.study.ask(space) for _ in range(size)])


def _write_round(rounds: Rounds, record: SweepRecord, asked: list[Any]) -> Round:
    run, chosen = rounds.run, rounds.chosen
    first = len(record.trials)
    numbers = [t.number for t in asked]
    if numbers != list(range(first, first + len(asked))):
        raise HpctrainError(
            f"{run.sweep}: the study's trials {numbers} do not follow the sweep's {first} trials; "
            "was the study changed by hand?"
        )
    trials, resolved = plan.resolve_points(rounds.prepared, [dict(t.params) for t in asked], first)
    env = _env(chosen)
    if len(plan.group_by_script(resolved, env, rounds.backend)) > 1:
        raise SpecError("sweep.grid: with sampler optuna, the swept keys must not change the batch script")
    plan.write_trials(run, trials, resolved, env)
    chunk = ArrayChunk(offset=first, count=len(trials), throttle=chosen.max_parallel)
    record.trials += trials
    record.arrays.append(chunk)
    rundir.write_json(run.sweep, record)  # before sbatch: no queued array without its record
    return Round(trials, resolved, chunk)


def _schedule_round(rounds: Rounds, record: SweepRecord, written: Round) -> None:
    """A later round's array, through the one submit path: recorded in the index (as the sweep's
    `+OFFSET` entry, as a grid sweep's later arrays are) before it is sent, its job id after."""
    now = time.time()
    entry = RunRecord(
        run_id=f"{record.sweep_id}+{written.chunk.offset}",
        job_id=None,
        name=record.name,
        site=record.site,
        backend=rounds.backend.name,
        run_dir=rounds.run.root,
        submitted_at=now,
        state=JobState.PENDING,
        state_at=now,
    )
    group = written.resolved[0].site.share_with_group
    submit_more(rounds.index, entry, group, lambda: _send(rounds, record, written).job_id or "")


def _send_unsent(rounds: Rounds, record: SweepRecord, largest: int, progress: Progress | None) -> None:
    """A round written but never queued (sbatch refused it: above MaxArraySize, a full queue), sent
    again from its folders as arrays of at most `largest` trials; the trials are the study's already."""
    unsent = [chunk for chunk in record.arrays if chunk.job_id is None]
    if not unsent:
        return
    sent = record.arrays[: len(record.arrays) - len(unsent)]
    if any(chunk.job_id is None for chunk in sent):
        raise HpctrainError(f"{rounds.run.sweep}: an array in the middle of the sweep was never queued")
    record.arrays = sent
    for chunk in unsent:
        pieces = plan.plan_chunks([chunk.count], largest, chunk.throttle)
        base = len(record.arrays)  # a piece's `after` is its lane's previous piece, by position
        for piece in pieces:
            piece.offset += chunk.offset
            piece.after = None if piece.after is None else base + piece.after
        record.arrays += pieces
        for piece in pieces:
            trials = record.trials[piece.offset : piece.offset + piece.count]
            resolved = [spec.loads(rounds.run.element(t.index).spec.read_bytes()) for t in trials]
            _schedule_round(rounds, record, Round(trials, resolved, piece))
            _say(progress, _round_line(record, piece))


def _send(rounds: Rounds, record: SweepRecord, written: Round) -> ArrayChunk:
    """A round's array to the scheduler, and its job id into sweep.json."""
    by_number = dict(zip((t.index for t in written.trials), written.resolved, strict=True))
    plan.submit_chunks(record, [written.chunk], by_number, _env(rounds.chosen), rounds.run, rounds.backend)
    rundir.write_json(rounds.run.sweep, record)
    return written.chunk


def _wait_round(
    root: Path,
    record: SweepRecord,
    study: optuna.Study,
    chosen: spec.Sweep,
    backend: Backend,
    in_flight: list[optuna.trial.FrozenTrial],
    progress: Progress | None,
    once: bool = False,
) -> bool:
    """Until every trial in flight is told (`once`: one look); False when one of them was cancelled
    from outside."""
    waiting = {t.number: t for t in in_flight}
    intact = True
    while waiting:
        (summary,) = survey([(root, record)])
        for number in list(waiting):
            status = summary.trials[number]
            if status.state in FINAL:
                intact &= _tell(study, waiting.pop(number), status, progress)
            elif status.state == "RUNNING" and _prune_if_behind(
                root, record, study, chosen, backend, waiting[number], status
            ):
                waiting.pop(number)
                _say(progress, f"  trial {number} pruned at step {status.step}")
        if once:
            break
        if waiting:
            time.sleep(POLL_S)
    return intact


def _tell(
    study: optuna.Study, trial: optuna.trial.FrozenTrial, status: Any, progress: Progress | None
) -> bool:
    """Tell the study how a finished trial ended; False if it was cancelled (then asked again)."""
    from optuna.trial import TrialState

    if status.state == "COMPLETED" and status.metric is not None:
        study.tell(trial.number, status.metric)
        _say(progress, f"  trial {trial.number}: {status.metric:.4g} ({plan.describe(trial.params)})")
        return True
    if status.state == STOPPED:  # pruned, but the loop stopped before it told the study
        study.tell(trial.number, state=TrialState.PRUNED)
        return True
    cancelled = status.state == "CANCELLED"
    why = "cancelled" if cancelled else f"{status.state}: {status.problem or status.reason or 'no metric'}"
    live = _reopened(study, trial)
    live.set_user_attr("ended", why)
    if cancelled:
        live.set_user_attr(CANCELLED, True)
    study.tell(live, state=TrialState.FAIL)
    if cancelled:
        study.enqueue_trial(dict(trial.params), user_attrs={"asked_again_for": trial.number})
    _say(progress, f"  trial {trial.number} {why}" + (": asked again on resume" if cancelled else ""))
    return not cancelled


def _prune_if_behind(
    root: Path,
    record: SweepRecord,
    study: optuna.Study,
    chosen: spec.Sweep,
    backend: Backend,
    frozen: optuna.trial.FrozenTrial,
    status: Any,
) -> bool:
    """Report the trial's new eval lines to the study; if the pruner ends it, cancel its array task
    (through the backend), record why in its stopped.json, and tell the study."""
    from optuna.trial import TrialState

    if chosen.early_stop is None:
        return False
    element = rundir.RunDir(root).element(frozen.number)
    field = {"eval_loss": "loss", "eval_accuracy": "accuracy"}.get(chosen.metric)
    if field is None:
        return False
    trial = _reopened(study, frozen)
    # The values reported at earlier polls: the study's own trial (get_trials is in number order),
    # not `frozen`, which is as the round started.
    reported = dict(study.get_trials(deepcopy=False)[frozen.number].intermediate_values)
    for line in element.read_metrics(head=0, tail=200):
        value = getattr(line, field, None) if isinstance(line, rundir.EvalLine) else None
        if value is not None and line.step not in reported:
            trial.report(value, line.step)
            reported[line.step] = value
    if not reported or not trial.should_prune():
        return False
    step = max(reported)
    peers = [
        t.intermediate_values[step]
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if step in t.intermediate_values
    ]
    median = statistics.median(peers) if peers else float("nan")
    chunk = record.chunk_of(frozen.number)
    backend.cancel([f"{chunk.job_id}_{frozen.number - chunk.offset}"])
    rundir.write_json(
        element.stopped,
        Stopped(
            step=step,
            metric=chosen.metric,
            value=reported[step],
            median=median,
            peers=len(peers),
            reason=f"pruned by the study: {chosen.metric} {reported[step]:.4g} at step {step}, "
            f"worse than the median {median:.4g} of {len(peers)} finished trials",
        ),
    )
    study.tell(frozen.number, state=TrialState.PRUNED)
    return True


def _reopened(study: optuna.Study, frozen: optuna.trial.FrozenTrial) -> optuna.Trial:
    """A trial in flight, as ask() gave it: a loop that resumes has only the stored (frozen) trial,
    and Optuna reopens one by its storage id."""
    optuna = require_optuna()
    return optuna.Trial(study, frozen._trial_id)


def _env(chosen: spec.Sweep) -> list[str]:
    return plan.swept_env(chosen)


def _round_line(record: SweepRecord, chunk: ArrayChunk | None = None) -> str:
    chunk = chunk or record.arrays[-1]
    return f"  round: trials {chunk.offset}-{chunk.offset + chunk.count - 1} as job {chunk.job_id}"


def _best_line(study: optuna.Study, record: SweepRecord, chosen: spec.Sweep) -> str:
    try:
        best = study.best_trial
    except ValueError:
        return f"Sweep {record.sweep_id} done: no trial finished with a {chosen.metric}"
    return (
        f"Sweep {record.sweep_id} done: best {chosen.metric} {best.value:.4g} "
        f"(trial {best.number}: {plan.describe(best.params)})"
    )


def _say(progress: Progress | None, line: str) -> None:
    if progress is not None:
        progress(line)
        sys.stdout.flush()
