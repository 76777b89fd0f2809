"""Schedulers behind one interface: the Slurm command line (default), pyslurm, and a local runner."""
