"""hpctrain: submit distributed PyTorch training to Slurm and run it inside the allocation."""

__version__ = "0.1.0"
