"""Run records and the per-user index of every submission: a journal, a compacted archive, one lock."""

import contextlib
import fcntl
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import msgspec

from hpctrain.errors import HpctrainError, InputError
from hpctrain.rundir import RunDir, RunRecord, home, names, replace_bytes, tail_bytes
from hpctrain.rundir.io import keep_private
from hpctrain.scheduler.base import JobState
from hpctrain.tracking.index_lines import (
    Added,
    Changed,
    Decoded,
    added,
    decode,
    encode_lines,
    record,
    write_all,
)

# States a run cannot leave: such runs are not polled again and may move to the archive.
ENDED_STATES = frozenset(s for s in JobState if s.terminal)
# Runs that ended less than this long ago stay in the journal: `status` shows them without
# reading the archive.
KEEP_RECENT_S = 24 * 3600
# The journal is compacted when it grows past this size and past twice its size after the last
# compaction (so a journal full of active runs is not rewritten on every append).
JOURNAL_LIMIT_BYTES = 1 << 20

# A run recorded before its submission that has no job id this long after is taken to have never
# reached the scheduler (when no job carries its id): sbatch gives up well before (HPCTRAIN_SLURM_TIMEOUT).
SUBMIT_GRACE_S = 300.0
# A run directory the index lacks that changed this long ago is no submit in progress (one records its
# run once its files are written: a second for most, some seconds for the largest sweep).
UNRECORDED_GRACE_S = 60.0

History = list[tuple[JobState, float, str]]


class _Journal(msgspec.Struct):
    """The journal folded: its runs, their histories, and changes to runs that live in the archive."""

    runs: dict[str, RunRecord]
    history: dict[str, History]
    archived_changes: list[Changed]
    bad: list[tuple[int, bytes]]


def _fold(lines: list[Added | Changed]) -> tuple[dict[str, RunRecord], dict[str, History], list[Changed]]:
    runs: dict[str, RunRecord] = {}
    history: dict[str, History] = {}
    elsewhere: list[Changed] = []
    for line in lines:
        if isinstance(line, Added):
            run = runs[line.run_id] = line
            history.setdefault(run.run_id, []).append((run.state, run.state_at, run.reason))
        elif line.run_id in runs:
            run = runs[line.run_id]
            run.state, run.state_at, run.reason = line.state, line.at, line.reason
            run.job_id = line.job_id or run.job_id
            history[run.run_id].append((line.state, line.at, line.reason))
        else:
            elsewhere.append(line)
    return runs, history, elsewhere


def _apply(runs: dict[str, RunRecord] | dict[str, Added], changes: Iterable[Changed]) -> None:
    for change in changes:
        run = runs.get(change.run_id)
        if run is not None:
            run.state, run.state_at, run.reason = change.state, change.at, change.reason
            run.job_id = change.job_id or run.job_id


class Index:
    """Every run of this user, safe under concurrent submits, fast at 100,000 runs.

    `index.jsonl` is the journal: `{"op": "add", ...run}` and `{"op": "state", "run_id", "state",
    "at", "reason"}` lines, appended under an exclusive `flock` of `index.lock`; a run's current state
    is its last line. When the journal grows past JOURNAL_LIMIT_BYTES it is compacted: runs that ended
    more than KEEP_RECENT_S ago move to `index-archive.jsonl` (one line per run, sorted by submission
    time), the others stay. So `status` reads only the journal, `list -n N` the archive's last N lines,
    and a lookup by id decodes only the archive lines that contain the id. A line that does not decode
    (a crash mid-append, a hand edit), or names an unknown backend or a time that is no date, is
    skipped with one warning; compaction sets it aside in
    `index-rejected.jsonl`. (Plain files, not sqlite: importing sqlite3 costs more than a submission.)
    """

    def __init__(self, root: Path | None = None) -> None:
        self.root = root or home()
        keep_private(self.root)
        keep_private(self.root / "runs")
        self.path = self.root / names.INDEX_JOURNAL
        self.archive_path = self.root / names.INDEX_ARCHIVE
        self.rejected_path = self.root / names.INDEX_REJECTED
        self.lock_path = self.root / names.INDEX_LOCK

    # -- locking and raw files ---------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self, exclusive: bool) -> Iterator[int]:
        """Hold index.lock; yields its descriptor (which stores the journal size after compaction)."""
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            yield fd
        finally:
            os.close(fd)  # closing releases the lock

    def _read(self, path: Path) -> Decoded:
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return Decoded([], [])
        return decode(data, path)

    def _journal(self) -> _Journal:
        with self._locked(exclusive=False):
            decoded = self._read(self.path)
        runs, history, elsewhere = _fold(decoded.lines)
        return _Journal(runs, history, elsewhere, decoded.bad)

    def _archived(self, changes: list[Changed], read: Callable[[], Decoded]) -> dict[str, RunRecord]:
        """Archive runs as `read` returns them (under the lock), with the journal's later changes."""
        with self._locked(exclusive=False):
            decoded = read()
        runs: dict[str, RunRecord] = {line.run_id: line for line in decoded.lines if isinstance(line, Added)}
        _apply(runs, changes)
        return runs

    def _archive_tail(self, count: int) -> Decoded:
        # Unbounded: `list --all` asks for every line; the window grows 4x until it holds them.
        lines = tail_bytes(self.archive_path, count, limit=sys.maxsize, whole_only=True)
        return decode(b"\n".join(lines), self.archive_path)

    def _archive_matching(self, keys: Iterable[str]) -> Decoded:
        """Only the archive lines that contain one of `keys`: a lookup decodes a handful of lines."""
        try:
            data = self.archive_path.read_bytes()
        except FileNotFoundError:
            return Decoded([], [])
        found: dict[int, bytes] = {}
        for key in keys:
            needle = key.encode()
            at = data.find(needle) if needle else -1
            while at >= 0:
                start = data.rfind(b"\n", 0, at) + 1
                end = data.find(b"\n", at)
                end = len(data) if end < 0 else end
                found[start] = data[start:end]
                at = data.find(needle, end)
        return decode(b"\n".join(found[k] for k in sorted(found)), self.archive_path)

    def _append(self, lines: list[Added | Changed]) -> None:
        if not lines:
            return
        data = encode_lines(lines)
        with self._locked(exclusive=True) as lock:
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                before = os.fstat(fd).st_size
                # A writer that died mid-line left no newline: start on a line of our own, so the
                # torn line is the only one lost.
                if before and os.pread(fd, 1, before - 1) != b"\n":
                    data = b"\n" + data
                try:
                    write_all(fd, data)
                except BaseException:
                    # All or nothing (a full disk, a file size limit, Ctrl-C mid-write): no torn line
                    # is left for every later reader to warn about.
                    with contextlib.suppress(OSError):
                        os.ftruncate(fd, before)
                    raise
                size = os.fstat(fd).st_size
            finally:
                os.close(fd)
            if size > max(JOURNAL_LIMIT_BYTES, 2 * _compacted_size(lock)):
                # The append is done: a compaction that fails (a full disk) waits for the next one.
                with contextlib.suppress(OSError):
                    self._compact_locked(lock)

    # -- writing --------------------------------------------------------------------------------

    def new_run_dir(self, name: str) -> tuple[str, Path]:
        """A fresh, unique run directory: runs/<date>-<time>-<name>-<random>."""
        stamp = time.strftime("%Y%m%d-%H%M%S")
        for _ in range(10):
            run_id = f"{stamp}-{name}-{os.urandom(3).hex()}"
            run_dir = self.root / "runs" / run_id
            try:
                run_dir.mkdir(mode=0o700)
            except FileExistsError:
                continue
            RunDir(run_dir).logs.mkdir(mode=0o700)
            return run_id, run_dir
        raise HpctrainError(f"could not create a unique run directory under {self.root / 'runs'}")

    def add(self, run: RunRecord) -> None:
        self._append([added(run)])
        write_record(run)

    def record_job(self, run: RunRecord, job_id: str | None, more: Iterable[RunRecord] = ()) -> None:
        """The job id the scheduler gave a run recorded before its submission, and the index entries
        of the submission's further jobs (a sweep's later arrays), in one append."""
        now = time.time()
        run.job_id, run.state_at, run.reason = job_id, now, ""
        more = list(more)
        self._append([Changed(run_id=run.run_id, state=run.state, at=now, job_id=job_id), *map(added, more)])
        for each in (run, *more):
            write_record(each)

    def interrupted(self) -> list[RunRecord]:
        """Runs recorded before their submission that never got a job id: a submit in progress, or
        one that was killed (its job, if the scheduler took it, carries the run id)."""
        return [r for r in self.runs() if r.job_id is None and r.state not in ENDED_STATES]

    def adopt_interrupted(self, grace_s: float = SUBMIT_GRACE_S) -> "list[Adopted]":
        """Settle the runs whose submit was cut short: the job that carries a run's id is recorded as
        its job; a run without one, recorded over `grace_s` ago, never reached the scheduler."""
        from hpctrain.scheduler import select_backend

        by_backend: dict[str, list[RunRecord]] = {}
        for run in self.interrupted():
            by_backend.setdefault(run.backend, []).append(run)
        out: list[Adopted] = []
        for backend_name, group in by_backend.items():
            try:
                found = select_backend(backend_name).jobs_carrying(r.run_id for r in group)
            except HpctrainError as err:
                out += [Adopted(run.run_id, None, f"not looked for: {err}") for run in group]
                continue
            for run in group:
                if run.run_id in found:
                    self.record_job(run, found[run.run_id])
                    out.append(Adopted(run.run_id, run.job_id, "adopted: its submit was cut short"))
                elif run.submitted_at < time.time() - grace_s:
                    why = "its submit was cut short before the scheduler took a job (none carries its id)"
                    self.update_states([(run, JobState.SUBMIT_FAILED, why)])
                    out.append(Adopted(run.run_id, None, why))
                else:
                    out.append(Adopted(run.run_id, None, "being submitted (no job carries its id yet)"))
        return out

    def adopt_unindexed(
        self,
        run_ids: Iterable[str] | None = None,
        recent: bool = False,
        grace_s: float = UNRECORDED_GRACE_S,
    ) -> list[RunRecord]:
        """Record the run directories the index lacks as runs that never submitted: a submit killed
        (SIGKILL) between making the directory and recording the run. The run is recorded before the
        scheduler is asked, so such a directory has no job. Only `run_ids`, else (`recent`) those made
        within half of KEEP_RECENT_S, read against the journal alone (a run that young is never
        archived, whatever a clock change does to the local time in its id), else every one under
        runs/. One changed less than `grace_s` ago may be a submit in progress: left alone."""
        wanted = None if run_ids is None else set(run_ids)
        # Run ids start with their local date and time (new_run_dir): newer ones sort after.
        since = time.localtime(time.time() - KEEP_RECENT_S / 2)
        first = time.strftime("%Y%m%d-%H%M%S", since) if recent else ""
        try:
            with os.scandir(self.root / "runs") as entries:
                found = {
                    entry.name: Path(entry.path)
                    for entry in entries
                    if (entry.name in wanted if wanted is not None else entry.name >= first)
                    and entry.is_dir(follow_symlinks=False)
                }
        except OSError:
            return []
        if not found:
            return []
        journal = self._journal()
        if wanted is None and recent:
            known = set(journal.runs)
        else:
            read = (
                (lambda: self._read(self.archive_path))
                if wanted is None
                else (lambda: self._archive_matching(found))
            )
            known = {*journal.runs, *self._archived(journal.archived_changes, read)}
        now = time.time()
        orphans = []
        for run_id in sorted(found.keys() - known):
            with contextlib.suppress(OSError):
                changed = found[run_id].stat().st_mtime
                if changed < now - grace_s:
                    orphans.append(unsubmitted(run_id, found[run_id], changed, now))
        self._append([added(run) for run in orphans])
        for run in orphans:
            write_record(run)
        return orphans

    def update_states(self, changes: Iterable[tuple[RunRecord, JobState, str]]) -> None:
        """Record new states (run, state, reason) in one append; history keeps every change."""
        now = time.time()
        lines: list[Added | Changed] = []
        changed: list[RunRecord] = []
        for run, state, reason in changes:
            if state == run.state and reason == run.reason:
                continue
            run.state, run.state_at, run.reason = state, now, reason
            lines.append(Changed(run_id=run.run_id, state=state, at=now, reason=reason))
            changed.append(run)
        try:
            self._append(lines)
        except OSError as err:
            # A state change is what the scheduler says now; the next poll records it again. A verb
            # that only reads (status, list, logs) still shows what it knows.
            print(
                f"hpctrain: warning: could not record {len(lines)} state change(s) in {self.path}"
                f" ({err.strerror or err}); showing them unrecorded",
                file=sys.stderr,
            )
            return
        for run in changed:
            write_record(run)

    # -- reading --------------------------------------------------------------------------------

    def runs(self, limit: int | None = None) -> list[RunRecord]:
        """Runs newest first; with `limit`, only the archive's last `limit` lines are read."""
        if limit == 0:
            return []
        journal = self._journal()
        read = (lambda: self._archive_tail(limit)) if limit else (lambda: self._read(self.archive_path))
        merged = self._archived(journal.archived_changes, read)
        merged.update(journal.runs)
        ordered = sorted(merged.values(), key=lambda r: r.submitted_at, reverse=True)
        return ordered if limit is None else ordered[:limit]

    def recent(self, since: float | None = None) -> list[RunRecord]:
        """Runs still active or changed since `since` (default: KEEP_RECENT_S ago), newest first."""
        now = time.time()
        since = now - KEEP_RECENT_S if since is None else since
        if since < now - KEEP_RECENT_S:
            candidates = self.runs()
        else:
            journal = self._journal()
            touched = {c.run_id for c in journal.archived_changes}
            found = (
                self._archived(journal.archived_changes, lambda: self._archive_matching(touched))
                if touched
                else {}
            )
            candidates = [*journal.runs.values(), *(r for r in found.values() if r.run_id in touched)]
            candidates.sort(key=lambda r: r.submitted_at, reverse=True)
        return [r for r in candidates if r.state not in ENDED_STATES or r.state_at >= since]

    def find(self, keys: Iterable[str]) -> tuple[list[RunRecord], list[str]]:
        """Runs by job id or run id (or a run id prefix, see `resolve`); returns (found, unknown keys).

        A key that is empty, too short to be a prefix or ambiguous is an error (IdError), raised
        before anything is returned: a verb acts on every key or on none."""
        keys = [check_key(key) for key in keys]
        journal = self._journal()
        candidates = self._archived(journal.archived_changes, lambda: self._archive_matching(keys))
        candidates.update(journal.runs)
        found, missing = resolve(keys, list(candidates.values()))
        # A run directory named exactly whose submit was killed before it was recorded.
        orphans = {run.run_id: run for run in self.adopt_unindexed(missing)} if missing else {}
        return found + [orphans[key] for key in missing if key in orphans], [
            k for k in missing if k not in orphans
        ]

    def history(self, run_id: str) -> History:
        """Every state of a run in the journal; an archived run keeps only its last."""
        journal = self._journal()
        if run_id in journal.history:
            return journal.history[run_id]
        run = self._archived(journal.archived_changes, lambda: self._archive_matching([run_id])).get(run_id)
        return [(run.state, run.state_at, run.reason)] if run else []

    # -- maintenance ----------------------------------------------------------------------------

    def compact(self) -> "CompactReport":
        """Archive runs that ended over a day ago and set unreadable lines aside (`index compact`)."""
        with self._locked(exclusive=True) as lock:
            return self._compact_locked(lock)

    def _compact_locked(self, lock: int) -> "CompactReport":
        now = time.time()
        journal = self._read(self.path)
        archive = self._read(self.archive_path)
        runs, history, elsewhere = _fold(journal.lines)
        # Archive lines stay lines: no Run (and no Path) is built for the 100,000 that do not change.
        archived = {line.run_id: line for line in archive.lines if isinstance(line, Added)}
        _apply(archived, elsewhere)
        keep: list[Added | Changed] = []
        moved = 0
        for run in runs.values():
            if run.state in ENDED_STATES and run.state_at < now - KEEP_RECENT_S:
                archived[run.run_id] = added(run)
                moved += 1
                continue
            first, *later = history[run.run_id]
            keep.append(
                added(msgspec.structs.replace(run, state=first[0], state_at=first[1], reason=first[2]))
            )
            keep += [Changed(run_id=run.run_id, state=s, at=at, reason=why) for s, at, why in later]
        rejected = [text for _, text in journal.bad + archive.bad]
        if rejected:
            fd = os.open(self.rejected_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                write_all(fd, b"".join(text.rstrip(b"\n") + b"\n" for text in rejected))
            finally:
                os.close(fd)
        ordered: list[Added | Changed] = sorted(archived.values(), key=lambda r: r.submitted_at)
        replace_bytes(self.archive_path, encode_lines(ordered), durable=True)
        journal_data = encode_lines(keep)
        replace_bytes(self.path, journal_data, durable=True)
        os.ftruncate(lock, 0)
        os.pwrite(lock, str(len(journal_data)).encode(), 0)
        return CompactReport(
            archived=len(ordered), active=len(runs) - moved, moved=moved, rejected=len(rejected)
        )

    def check(self) -> "CheckReport":
        """Unreadable lines, and run directories the index does not know (or knows but lack)."""
        with self._locked(exclusive=False):
            journal = self._read(self.path)
            archive = self._read(self.archive_path)
        runs, _, elsewhere = _fold(journal.lines)
        archived: dict[str, RunRecord] = {
            line.run_id: line for line in archive.lines if isinstance(line, Added)
        }
        _apply(archived, elsewhere)
        archived.update(runs)
        runs_dir = self.root / "runs"
        on_disk = {p.name for p in runs_dir.iterdir() if p.is_dir()} if runs_dir.is_dir() else set()
        return CheckReport(
            runs=len(archived),
            journal_bytes=self.path.stat().st_size if self.path.exists() else 0,
            bad_lines=[(str(self.path), n, t[:80]) for n, t in journal.bad]
            + [(str(self.archive_path), n, t[:80]) for n, t in archive.bad],
            unindexed_dirs=sorted(on_disk - archived.keys()),
            missing_dirs=sorted(r.run_id for r in archived.values() if not r.run_dir.is_dir()),
        )


class IdError(InputError):
    """A job id or run id that cannot name a run: empty, a prefix too short, or ambiguous."""


# A run id starts with the date and time of its submission, `YYYYMMDD-HHMMSS`: a prefix names a run only
# when it holds at least that much (`2026` or `20` would match every run of a year or a century).
MIN_PREFIX = len("YYYYMMDD-HHMMSS")


def check_key(key: str) -> str:
    """`key` as given, unless it is blank: an unset shell variable names no run (`cancel "$JOB"`)."""
    if not key.strip():
        raise IdError("an empty job id or run id names no run (an unset shell variable?)")
    return key


def resolve(keys: list[str], runs: Iterable[RunRecord]) -> tuple[list[RunRecord], list[str]]:
    """The one resolver of every verb: each key is a job id or a run id (exact), or a run id prefix
    of at least MIN_PREFIX characters that only one run has; returns (found, unknown keys)."""
    runs = list(runs)
    found: list[RunRecord] = []
    missing: list[str] = []
    for key in map(check_key, keys):
        exact = [r for r in runs if key in (r.job_id, r.run_id)]
        if exact:
            found.append(exact[0])
            continue
        prefixed = sorted(r.run_id for r in runs if r.run_id.startswith(key))
        shown = ", ".join(prefixed[:5]) + (f" and {len(prefixed) - 5} more" if len(prefixed) > 5 else "")
        if len(key) < MIN_PREFIX and prefixed:
            raise IdError(
                f"{key}: no job has this id, and a run id prefix must hold at least the run's date and"
                f" time (YYYYMMDD-HHMMSS); it would match {shown}"
            )
        if len(key) < MIN_PREFIX:
            prefixed = []
        if len(prefixed) > 1:
            raise IdError(f"{key} is ambiguous: {shown}")
        if prefixed:
            found.extend(r for r in runs if r.run_id == prefixed[0])
        else:
            missing.append(key)
    return found, missing


class Adopted(msgspec.Struct):
    """What `adopt_interrupted` made of one run recorded without a job id."""

    run_id: str
    job_id: str | None
    verdict: str


class CompactReport(msgspec.Struct):
    archived: int
    active: int
    moved: int
    rejected: int


class CheckReport(msgspec.Struct):
    runs: int
    journal_bytes: int
    bad_lines: list[tuple[str, int, bytes]]
    unindexed_dirs: list[str]
    missing_dirs: list[str]


def _compacted_size(lock: int) -> int:
    try:
        return int(os.pread(lock, 32, 0) or b"0")
    except ValueError:
        return 0


UNSUBMITTED = "its submit was killed before the run was recorded; nothing was submitted"


def unsubmitted(run_id: str, run_dir: Path, changed: float, now: float) -> RunRecord:
    """The record of a run directory whose submit was killed before recording it (see adopt_unindexed)."""
    from hpctrain.rundir import SubmitInfo, read_json

    asked = read_json(RunDir(run_dir).submit_info, SubmitInfo, below=run_dir)
    # The directory's name is DATE-TIME-NAME-RANDOM (new_run_dir).
    name = run_id[len("YYYYMMDD-HHMMSS-") : -len("-123456")] or run_id
    return RunRecord(
        run_id=run_id,
        job_id=None,
        name=name,
        site=asked.site if isinstance(asked, SubmitInfo) else "?",
        backend=asked.backend if isinstance(asked, SubmitInfo) else "?",
        run_dir=run_dir,
        submitted_at=changed,
        state=JobState.SUBMIT_FAILED,
        state_at=now,
        reason=UNSUBMITTED,
    )


def write_record(run: RunRecord) -> None:
    """record.json in the run directory: the run's own copy of what the index says."""
    folder = RunDir(run.run_dir)
    copy = record(run)
    # The restart history as of this state change (attempts.jsonl; absent at submission and for
    # unsupervised runs, and then its reader is not even imported: submit starts faster).
    if folder.attempts.exists():
        from hpctrain.rundir.attempts import run_summary

        copy.restarts = run_summary(folder)
    try:
        folder.write_record(copy)
    except OSError:
        pass  # the index is the source of truth; a vanished run dir must not break status
