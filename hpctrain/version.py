"""hpctrain's version: one assignment that setup.cfg reads statically and every module imports from here."""

__version__ = "0.1.0"
