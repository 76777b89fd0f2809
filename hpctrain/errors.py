"""The errors a user can cause or meet; each carries a one-line message and maps to an exit code."""

from __future__ import annotations


class HpctrainError(Exception):
    """Base of every error the CLI reports as one line instead of a traceback."""

    exit_code = 1


class SpecError(HpctrainError, ValueError):
    """A job spec or site profile that cannot be used; the message names field and file."""

    exit_code = 2


class RenderError(HpctrainError, ValueError):
    """The job cannot be rendered (an unsafe path, a missing template)."""

    exit_code = 2


class BackendError(HpctrainError, RuntimeError):
    """The scheduler could not be asked or refused; the message names the cause."""

    exit_code = 1
