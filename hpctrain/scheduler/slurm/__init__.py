"""Slurm: the command-line and pyslurm backends, their parsers and node queries."""
