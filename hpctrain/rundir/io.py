"""Atomic writers and total, bounded readers of run-directory files: never an exception, never a hang."""

from __future__ import annotations

import errno
import os
import stat
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path, PurePath
from typing import Any, TypeVar

import msgspec

from hpctrain.errors import SpecError
from hpctrain.rundir.lines import METRIC_KINDS, EventLine, MetricLine
from hpctrain.rundir.names import Numbered
from hpctrain.rundir.structs import Unreadable

# Bounds of every read: a hostile or runaway file costs no more than this.
MAX_JSON_BYTES = 1 << 20
MAX_LINE_BYTES = 64 << 10
TAIL_BYTES = 256 << 10
HEAD_BYTES = 64 << 10
MAX_LISTED = 4096

T = TypeVar("T")


def encode_hook(value: object) -> object:
    if isinstance(value, PurePath):
        return str(value)
    raise NotImplementedError(f"cannot encode {type(value).__name__}")


def decode_hook(shape: type, value: object) -> object:
    if shape is Path and isinstance(value, str):
        return Path(value)
    raise NotImplementedError(f"cannot decode {shape.__name__}")


# Paths in structs (a run's directory) are JSON strings.
_encoder = msgspec.json.Encoder(enc_hook=encode_hook)
_line_decoder = msgspec.json.Decoder(MetricLine)
_DECODE_ERRORS = (msgspec.DecodeError, msgspec.ValidationError, RecursionError, ValueError, TypeError)


# What hpctrain writes is private to its user: a spec's env can hold an API key (docs/security.md).
# A site's `share_with_group` lets one group read run directories (never write them).
PRIVATE_UMASK = 0o077
GROUP_UMASK = 0o027


def umask_for(group: str | None) -> int:
    return PRIVATE_UMASK if group is None else GROUP_UMASK


@contextmanager
def private_files(group: str | None = None) -> Iterator[None]:
    """Files and folders made in the block (and by the processes started in it: sbatch hands its
    umask to the job) are private to the user, or readable by `group`; the umask is restored after."""
    previous = os.umask(umask_for(group))
    try:
        yield
    finally:
        os.umask(previous)


@contextmanager
def private_like(run_dir: Path | None) -> Iterator[None]:
    """`private_files` for what is written about a run after its submit (a report): readable by the
    run directory's group where its site shared it (share_run_dir), else private to the user."""
    try:
        shared = run_dir is not None and bool(os.stat(run_dir).st_mode & stat.S_IRGRP)
    except OSError:
        shared = False
    previous = os.umask(GROUP_UMASK if shared else PRIVATE_UMASK)
    try:
        yield
    finally:
        os.umask(previous)


def keep_private(folder: Path) -> None:
    """`folder` (hpctrain's home, runs/) made with mode 0700; one that others may enter or read loses
    that (its group's bits are left as the user or a shared site set them)."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    mode = stat.S_IMODE(folder.stat().st_mode)
    if mode & 0o007 and mode & 0o007 != 0o001:  # traverse-only for a group share (share_run_dir)
        with suppress(PermissionError):  # a folder of someone else's: theirs to close
            os.chmod(folder, mode & ~0o007)


def share_run_dir(home: Path, run_dir: Path, group: str) -> None:
    """Give `run_dir` to `group` (2750: what the job makes inside inherits the group) and let the
    group pass through `home` and runs/ on the way (o+x: enter, not list)."""
    import grp

    try:
        gid = grp.getgrnam(group).gr_gid
    except KeyError:
        raise SpecError(f"share_with_group: there is no group {group!r} on this machine") from None
    for folder in (home, run_dir.parent):
        os.chmod(folder, stat.S_IMODE(folder.stat().st_mode) | 0o001)
    for folder in (run_dir, *(p for p in run_dir.iterdir() if p.is_dir() and not p.is_symlink())):
        try:
            os.chown(folder, -1, gid)
        except PermissionError:
            raise SpecError(f"share_with_group: you are not in group {group!r}") from None
        os.chmod(folder, 0o2750)


def _create_mode(path: Path) -> int:
    """A new file takes its folder's read and write bits: 0600 in a private folder, 0640 in a shared one."""
    try:
        return stat.S_IMODE(os.stat(path.parent).st_mode) & 0o660 | 0o600
    except OSError:
        return 0o600


@contextmanager
def replacing(path: Path) -> Iterator[Path]:
    """A temporary name beside `path`, unique to this writer, renamed onto `path` when the block ends
    without an error (and removed when it raises): readers and concurrent writers never see half a file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL


def replace_bytes(path: Path, data: bytes, durable: bool = False) -> Path:
    """Write `path` whole and atomically; `durable` also puts the bytes on disk before the rename."""
    with replacing(path) as tmp, open(os.open(tmp, _NEW, _create_mode(path)), "wb") as handle:
        handle.write(data)
        if durable:
            handle.flush()
            os.fsync(handle.fileno())
    return path


def write_json(path: Path, value: msgspec.Struct, durable: bool = False) -> Path:
    """A struct as indented JSON, atomically (see `replace_bytes`)."""
    return replace_bytes(path, msgspec.json.format(_encoder.encode(value)) + b"\n", durable)


def append_line(path: Path, value: msgspec.Struct) -> None:
    """One write of one whole line: a reader tailing the file sees whole lines or a partial last one."""
    data = _encoder.encode(value) + b"\n"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW)
    except FileNotFoundError:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, _create_mode(Path(path)))
    try:
        while data:
            data = data[os.write(fd, data) :]
    finally:
        os.close(fd)


def metric_line(kind: str, **fields: Any) -> MetricLine:
    """Build a metrics line from keywords; an event's unnamed keywords go to its ``detail``."""
    cls = METRIC_KINDS.get(kind)
    if cls is None:
        raise ValueError(f"unknown metrics kind {kind!r} (one of {', '.join(METRIC_KINDS)})")
    known = set(cls.__struct_fields__)
    extra = {k: v for k, v in fields.items() if k not in known}
    if extra and cls is not EventLine:
        raise TypeError(f"{kind} lines have no field {', '.join(sorted(extra))}")
    fields = {k: v for k, v in fields.items() if k in known}
    if extra:
        fields["detail"] = {**(fields.get("detail") or {}), **extra}
    fields.setdefault("time", round(time.time(), 3))
    return msgspec.convert(fields, cls, strict=False)  # type: ignore[return-value]


# A run directory is written by jobs and read by the login-side verbs: a link planted in it
# (`logs/batch.log -> /etc/shadow`, or a folder `logs -> /etc`) must not make hpctrain print what it
# points to. Readers given the run directory (`below`) open a file component by component from it and
# follow no link on the way; the run directory itself may lie behind links (a home on another disk).
NOT_FOLLOWED = "a symbolic link, not followed"
_FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
_FILE = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW


def _link_reason(name: str, folder_fd: int | None, err: OSError) -> str:
    """Why opening `name` failed: a link (named, when it is a folder on the way), or the error."""
    try:
        is_link = stat.S_ISLNK(os.stat(name, dir_fd=folder_fd, follow_symlinks=False).st_mode)
    except OSError:
        is_link = err.errno == errno.ELOOP
    if is_link:
        return NOT_FOLLOWED
    return err.strerror or type(err).__name__


def _open_below(below: str, parts: tuple[str, ...], flags: int) -> int | str | None:
    """`below`/`parts` opened with `flags`, each folder on the way opened without following a link."""
    try:
        folder = os.open(below, os.O_RDONLY | os.O_DIRECTORY)
    except FileNotFoundError:
        return None
    except OSError as err:
        return err.strerror or type(err).__name__
    try:
        for depth, name in enumerate(parts):
            last = depth == len(parts) - 1
            try:
                opened = os.open(name, flags if last else _FOLDER, dir_fd=folder)
            except FileNotFoundError:
                return None
            except OSError as err:
                why = _link_reason(name, folder, err)
                if why == NOT_FOLLOWED and not last:
                    return f"{'/'.join(parts[: depth + 1])}/ is {NOT_FOLLOWED}"
                return why
            os.close(folder)
            folder = opened
        opened, folder = folder, -1
        return opened
    finally:
        if folder >= 0:
            os.close(folder)


def _open(path: Path | str, flags: int, below: Path | str | None) -> int | str | None:
    """fd of `path`, None if absent, else why not. Below the run directory `below` no link is followed:
    not the file (O_NOFOLLOW), nor any folder between it and `below`."""
    if below is not None:
        where = os.path.normpath(os.fspath(path))
        top = os.path.normpath(os.fspath(below))
        if os.path.dirname(where) != top and where.startswith(top + os.sep):
            return _open_below(top, tuple(where[len(top) + 1 :].split(os.sep)), flags)
    try:
        return os.open(path, flags)
    except FileNotFoundError:
        return None
    except OSError as err:
        return _link_reason(os.fspath(path), None, err)


def _open_regular(path: Path | str, below: Path | str | None = None) -> tuple[int, int] | str | None:
    """(fd, size) of a regular file, None if absent, else why it cannot be read (never blocks on a FIFO,
    never follows a symbolic link: see `_open`)."""
    fd = _open(path, _FILE, below)
    if fd is None or isinstance(fd, str):
        return fd
    try:
        info = os.fstat(fd)
    except OSError as err:
        os.close(fd)
        return err.strerror or type(err).__name__
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        return "a directory, not a file" if stat.S_ISDIR(info.st_mode) else "not a regular file"
    return fd, info.st_size


def read_json(
    path: Path | str, shape: type[T], max_bytes: int = MAX_JSON_BYTES, below: Path | str | None = None
) -> T | Unreadable | None:
    """The file decoded as `shape`; None if absent; Unreadable if it is anything but that (`below`: the
    run directory, see `_open`)."""
    opened = _open_regular(path, below)
    if opened is None:
        return None
    if isinstance(opened, str):
        return Unreadable(str(path), opened)
    fd, size = opened
    try:
        if size > max_bytes:
            return Unreadable(str(path), f"{size} bytes, more than {max_bytes}")
        data = os.read(fd, size + 1)  # one byte more than fstat says: a file still growing
    except OSError as err:
        return Unreadable(str(path), err.strerror or type(err).__name__)
    finally:
        os.close(fd)
    return decode(data, shape, str(path))


def decode(data: bytes, shape: type[T], where: str) -> T | Unreadable:
    try:
        return msgspec.json.decode(data, type=shape, dec_hook=decode_hook)
    except _DECODE_ERRORS as err:
        return Unreadable(where, _one_line(err))


def _one_line(err: BaseException) -> str:
    if isinstance(err, RecursionError):
        return "nested too deeply"
    text = str(err).splitlines()[0] if str(err) else type(err).__name__
    return text[:200]


FIRST_WINDOW = 8 << 10


def _tail_window(fd: int, size: int, count: int, limit: int) -> tuple[list[bytes], int]:
    """The last `count` pieces between newlines (the last may lack its newline) and the offset where
    they start. The window starts at 8 KiB and grows 4x until it holds them or reaches `limit`."""
    window = min(FIRST_WINDOW, size)
    while True:
        start = size - window
        data = os.pread(fd, window, start)
        if data.count(b"\n") > count or window >= min(limit, size):
            break
        window = min(window * 4, limit, size)
    pieces = data.split(b"\n")
    if start > 0 and len(pieces) > 1:
        start += len(pieces[0]) + 1
        pieces = pieces[1:]  # the window starts inside a line
    if len(pieces) > count + 1:
        start += sum(len(p) + 1 for p in pieces[: -count - 1])
        pieces = pieces[-count - 1 :]
    return pieces, start


def _head_window(fd: int, size: int, count: int, limit: int) -> list[bytes]:
    """The first `count` whole lines, from a window that grows like _tail_window's."""
    window = min(FIRST_WINDOW, size)
    while True:
        data = os.pread(fd, window, 0)
        # A NUL byte is no JSON line: past it (a hole, a torn write) there are no lines to find.
        if data.count(b"\n") >= count or window >= min(limit, size) or b"\0" in data:
            break
        window = min(window * 4, limit, size)
    return data.split(b"\n")[:-1][:count]  # the last piece is cut (or empty)


def _with_file(path: Path, read: Callable[[int, int], T], empty: T, below: Path | str | None) -> T:
    opened = _open_regular(path, below)
    if opened is None or isinstance(opened, str):
        return empty
    fd, size = opened
    try:
        return read(fd, size) if size else empty
    except OSError:
        return empty
    finally:
        os.close(fd)


def read_at(path: Path | str, offset: int, limit: int, below: Path | str | None = None) -> bytes | None:
    """Up to `limit` bytes of a regular file from `offset` (no link followed); None when it is absent
    or cannot be read."""
    opened = _open_regular(path, below)
    if opened is None or isinstance(opened, str):
        return None
    fd, _ = opened
    try:
        return os.pread(fd, limit, offset)
    except OSError:
        return None
    finally:
        os.close(fd)


def leaves(root: Path | str, path: Path | str) -> str | None:
    """Why reading `path` would not read a file of the run directory `root`: it is a symbolic link, or
    a folder between it and `root` is one, or it lies outside `root`; None when none of these holds."""
    top = os.path.normpath(os.fspath(root))
    if not os.path.normpath(os.fspath(path)).startswith(top + os.sep):
        return f"lies outside the run directory {top}"
    opened = _open(path, _FILE, root)
    if isinstance(opened, int):
        os.close(opened)
        return None
    return opened if opened is not None and NOT_FOLLOWED in opened else None


def tail_bytes(
    path: Path, count: int, limit: int = TAIL_BYTES, whole_only: bool = False, below: Path | str | None = None
) -> list[bytes]:
    """The last `count` lines within the last `limit` bytes, undecoded: bounded reads, whatever the
    file holds. With `whole_only`, a last line without its newline (a writer mid-append) is left out."""
    if count <= 0:
        return []
    pieces = _with_file(path, lambda fd, size: _tail_window(fd, size, count, limit)[0], [], below)
    if pieces and (pieces[-1] == b"" or whole_only):
        pieces = pieces[:-1]
    return pieces[-count:]


def tail_lines(
    path: Path, count: int, limit: int = TAIL_BYTES, whole_only: bool = False, below: Path | str | None = None
) -> list[str]:
    """`tail_bytes` as text (bytes that are not UTF-8 replaced)."""
    return [p.decode("utf-8", "replace") for p in tail_bytes(path, count, limit, whole_only, below)]


def head_and_tail(
    path: Path,
    head: int,
    tail: int,
    limit: int = TAIL_BYTES,
    head_limit: int = HEAD_BYTES,
    below: Path | str | None = None,
) -> tuple[list[bytes], list[bytes]]:
    """The first `head` and the last `tail` whole lines of a file, none in both, from one open."""

    def read(fd: int, size: int) -> tuple[list[bytes], list[bytes]]:
        last, start = _tail_window(fd, size, tail, limit)
        last = last[:-1]  # empty after the final newline, or a line still being written
        first = _head_window(fd, size, head, head_limit)
        covered = sum(len(line) + 1 for line in first)
        for line in list(last):  # lines the head already holds
            if start >= covered:
                break
            start += len(line) + 1
            last.pop(0)
        return first, last

    return _with_file(path, read, ([], []), below)


def decode_line(line: bytes, where: str) -> MetricLine | Unreadable:
    if len(line) > MAX_LINE_BYTES:
        return Unreadable(where, f"a line of {len(line)} bytes")
    try:
        return _line_decoder.decode(line)
    except _DECODE_ERRORS as err:
        return Unreadable(where, _one_line(err))


def list_names(folder: Path | str, below: Path | str | None = None) -> list[str]:
    """Up to MAX_LISTED names in `folder`, sorted; none when it cannot be listed, or (given the run
    directory `below`) when it or a folder on its way is a symbolic link."""
    fd = _open(folder, os.O_RDONLY | os.O_DIRECTORY | (os.O_NOFOLLOW if below is not None else 0), below)
    if not isinstance(fd, int):
        return []
    try:
        with os.scandir(fd) as entries:
            names = []
            for entry in entries:
                names.append(entry.name)
                if len(names) >= MAX_LISTED:
                    break
            return sorted(names)
    except OSError:
        return []
    finally:
        os.close(fd)


def numbered(names: list[str], family: Numbered) -> Iterator[tuple[int, str]]:
    """(number, name) of each name of `family` in `names` (others are skipped)."""
    for name in names:
        number = family.number(name)
        if number is not None:
            yield number, name


READ_ALL_BYTES = 256 << 20
READ_CHUNK = 4 << 20


def whole_lines(
    path: Path | str, max_bytes: int = READ_ALL_BYTES, below: Path | str | None = None
) -> Iterator[bytes]:
    """Every whole line of a file, read in bounded chunks; of a file over `max_bytes`, the lines of
    its last `max_bytes`, as the file was when opened (a snapshot: what is appended meanwhile is not
    read). A last line without its newline (a writer mid-append) is left out. Like the other readers
    it never raises: a file that cannot be opened or read yields nothing (more)."""
    opened = _open_regular(path, below)
    if opened is None or isinstance(opened, str):
        return
    fd, size = opened
    try:
        offset = max(0, size - max_bytes)
        carry = b""
        skip_first = offset > 0  # the window starts inside a line
        while offset < size:
            try:
                chunk = os.pread(fd, min(READ_CHUNK, size - offset), offset)
            except OSError:
                return
            if not chunk:
                return
            offset += len(chunk)
            pieces = (carry + chunk).split(b"\n")
            carry = pieces.pop()[: MAX_LINE_BYTES + 1]  # a runaway line is unreadable anyway: keep its head
            if skip_first and pieces:
                pieces, skip_first = pieces[1:], False
            yield from pieces
    finally:
        os.close(fd)
