"""The common base of every spec struct, and the value types that the job and site structs share."""

from typing import Annotated

import msgspec
from msgspec import Meta

# The vocabulary of both halves of the spec (job.py and site.py), named in one place.
from hpctrain.spec.slurm_values import EnvValue, Line, NodeName, ShellLine, SlurmMemory, SlurmTime, SlurmWord

Count = Annotated[int, Meta(ge=1)]
"""A number of things, at least one (nodes, trials)."""
Whole = Annotated[int, Meta(ge=0)]
"""A number of things that may be none (restarts, warm-up steps)."""
Positive = Annotated[float, Meta(gt=0)]
"""A quantity above zero (learning rate, clip norm)."""
NonNegative = Annotated[float, Meta(ge=0)]
"""A quantity that may be zero (weight decay, a delay)."""
Seconds = Positive
"""A duration in seconds, > 0 (timeouts)."""


class Base(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """Common options: unknown keys are errors, fields are keyword-only and immutable."""


__all__ = [
    "Base",
    "Count",
    "EnvValue",
    "Line",
    "NodeName",
    "NonNegative",
    "Positive",
    "Seconds",
    "ShellLine",
    "SlurmMemory",
    "SlurmTime",
    "SlurmWord",
    "Whole",
]
