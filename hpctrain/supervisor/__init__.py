"""The batch script's torch-free processes: supervise, watchdog, hang rule, stacks, early stop."""
