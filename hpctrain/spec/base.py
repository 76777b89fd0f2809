"""The common base of every spec struct: unknown keys are errors, fields keyword-only and immutable."""

import msgspec


class Base(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """Common options: unknown keys are errors, fields are keyword-only and immutable."""
