"""The in-allocation runtime: bootstrap, parallel layouts, training loop, checkpoints (imports torch)."""
