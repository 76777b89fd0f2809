"""Submitting: the dry run (load, check, render) and scheduling it (login side)."""
