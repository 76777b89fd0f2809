"""Slurm: the command-line and pyslurm backends, their parsers and node queries."""

# SIGKILL to every task of one step (`JOB.STEP` follows): the supervisor's watchdog and the warm
# standby's fallback in the batch script (rendered there as `kill_step`) both end a step this way.
KILL_STEP = ("scancel", "--signal=KILL")
