"""The errors a user can cause or meet; each carries a one-line message and maps to an exit code."""

from __future__ import annotations

import re

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def one_line(text: str) -> str:
    """`text` with control characters escaped (a newline shows as \\n): input quoted in a message
    cannot split it into lines or drive the terminal."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


def printable(text: str) -> str:
    """Text read from a run directory, shown escaped on one line when it holds anything unprintable
    (terminal escapes, newlines, C1 controls): a file cannot drive the terminal of whoever reads it."""
    return text if text.isprintable() else text.encode("unicode_escape").decode("ascii")


class HpctrainError(Exception):
    """Base of every error the CLI reports as one line instead of a traceback."""

    exit_code = 1


class InputError(HpctrainError, ValueError):
    """Bad input: the message, which quotes the input, is always one line."""

    exit_code = 2

    def __str__(self) -> str:
        return one_line(super().__str__())


class SpecError(InputError):
    """A job spec or site profile that cannot be used; the message names field and file."""


class RenderError(InputError):
    """The job cannot be rendered (an unsafe path, a missing template)."""


class BackendError(HpctrainError, RuntimeError):
    """The scheduler could not be asked or refused; the message names the cause."""

    exit_code = 1


class FunctionFailed(HpctrainError):
    """A function job's function raised (hpctrain.submit_function); the message is the exception in one
    line, then the traceback it had in the job."""

    exit_code = 1

    def __init__(self, summary: str, remote_traceback: str = "") -> None:
        self.summary = summary
        self.remote_traceback = remote_traceback
        tail = remote_traceback.rstrip()
        super().__init__(f"{summary}\n\nRemote traceback:\n{tail}" if tail else summary)
