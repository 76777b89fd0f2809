"""Command jobs inside the allocation: the per-rank wrapper of a user's own program (torch-free)."""
