"""The run id a job carries in its --comment, so that a job whose submit was cut short finds its run."""

# A job carries the id of its run in its comment, so that the run of a job whose submit was killed
# before hpctrain learnt its job id can still find it (`hpctrain index check`).
RUN_COMMENT = "hpctrain-run="


def carrying_comment(run_id: str, comment: str | None) -> str:
    """The job's --comment: the run id, then the user's own comment."""
    return f"{RUN_COMMENT}{run_id}" + (f" {comment}" if comment else "")


def carried_run_id(comment: str) -> str | None:
    """The run id a job's comment carries, if any."""
    first = comment.strip().split(" ", 1)[0]
    return (first[len(RUN_COMMENT) :] or None) if first.startswith(RUN_COMMENT) else None
