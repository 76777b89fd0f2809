"""Formats of the values a spec hands to Slurm and bash: anchored patterns, reserved names, time and memory.

A value that reaches the batch script is either single-quoted (env values, python) or must match
one of these patterns, because sbatch, not a shell, reads the `#SBATCH` lines.
"""

import contextvars
import re
from typing import Annotated, Any

import msgspec
from msgspec import Meta

# Every pattern is anchored with \A...\Z: msgspec matches with re.search, and `$` also matches
# before a final newline, which would let "USR1\n" end an #SBATCH block early.
# Values that land in `#SBATCH` lines or in Slurm command arguments. Slurm parses directives itself,
# so shell quoting cannot protect them: they are restricted to characters with no meaning to sbatch.
SLURM_WORD = r"\A[A-Za-z0-9_.,:+@%=/\-\[\]]+\Z"
NAME = r"\A[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}\Z"
NODE_NAME = r"\A[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}\Z"
ENV_NAME = r"\A[A-Za-z_][A-Za-z0-9_]*\Z"
# One line of text: no control character (below 0x20, or DEL); `setup` lines may hold tabs.
LINE = r"\A[^\x00-\x1f\x7f]*\Z"
SHELL_LINE = r"\A[^\x00-\x08\x0a-\x1f\x7f]*\Z"
ENTRYPOINT = r"\A[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_]*\Z"
# A container image: a path, or a registry reference (nvcr.io#nvidia/pytorch:24.05-py3, docker://...,
# name@sha256:...). Not starting with `-` (srun would read an option); no comma (pyxis splits on it).
CONTAINER_IMAGE = r"\A[A-Za-z0-9_./:#@+=~][A-Za-z0-9_./:#@+=~\-]{0,499}\Z"
# An absolute path that srun's container options can carry: pyxis splits mounts on `,` and `:`.
CONTAINER_PATH = r"\A/[A-Za-z0-9_./+@=~\-]{0,499}\Z"

# How refusals describe each pattern, instead of printing the regex.
PATTERN_WORDS = {
    SLURM_WORD: "letters, digits and _.,:+@%=/-[] (no spaces)",
    NAME: "letters, digits and _.- (up to 64, starting with a letter or digit)",
    ENV_NAME: "letters, digits and _, not starting with a digit",
    LINE: "one line of text (no control characters)",
    SHELL_LINE: "one line of text (no control characters but tab)",
    ENTRYPOINT: "MODULE:FUNCTION",
    CONTAINER_IMAGE: "a path or registry reference of letters, digits and _./:#@+=~- (not starting with -)",
    CONTAINER_PATH: "an absolute path of letters, digits and _./+@=~-",
}

SlurmWord = Annotated[str, Meta(pattern=SLURM_WORD)]
Line = Annotated[str, Meta(pattern=LINE)]
ShellLine = Annotated[str, Meta(pattern=SHELL_LINE)]
NodeName = Annotated[str, Meta(pattern=NODE_NAME)]
# sbatch options whose values are checked by shape before they reach the script:
ArrayIndices = Annotated[str, Meta(pattern=r"\A[0-9,\-:%]+\Z")]  # --array (0-7%2)
Dependency = Annotated[str, Meta(pattern=r"\A[a-z]+(:[0-9_+]+)+([,?][a-z]+(:[0-9_+]+)+)*\Z")]  # afterok:123
Comment = Annotated[str, Meta(pattern=r"\A[A-Za-z0-9_.,:+@%=/\-\[\] ]{1,200}\Z")]  # --comment
MailUser = Annotated[str, Meta(pattern=r"\A[A-Za-z0-9._%+\-]+(@[A-Za-z0-9.\-]+)?\Z")]  # --mail-user
# YAML users write `OMP_NUM_THREADS: 1`; env values are read as the text written and rendered quoted.
EnvValue = Line | int | float | bool
# A YAML int is read the way sbatch reads a bare number (minutes, megabytes); the struct's
# __post_init__ replaces what was written by its text for sbatch (`spec_time`, `spec_memory`).
SlurmTime = str | int
SlurmMemory = str | int

# Names a job or site may not set in `env`: the ones Slurm and hpctrain give the script, those bash
# treats specially (read-only, or run code: BASH_ENV, PS4, PROMPT_COMMAND...) and those the template
# assigns itself. A user value there could replace the job id that `$((... SLURM_JOB_ID ...))`
# evaluates, or the Python that runs the job.
RESERVED_ENV_PREFIXES = ("SLURM_", "HPCTRAIN_", "BASH", "SRUN_", "SBATCH_", "PMI_", "PMIX_")
RESERVED_ENV = frozenset(
    {
        # assigned by the templates (tests/unit/scheduler/test_render_injection.py checks the list)
        "RUN_DIR", "PYTHON", "MASTER_ADDR", "MASTER_PORT", "step_pid", "status",
        "bad_nodes", "excluded_nodes",
        # bash's special and read-only variables
        "UID", "EUID", "PPID", "SHELLOPTS", "IFS", "PS1", "PS2", "PS3", "PS4", "PROMPT_COMMAND",
        "ENV", "CDPATH", "GLOBIGNORE", "POSIXLY_CORRECT", "TMOUT", "RANDOM", "SRANDOM", "SECONDS",
        "LINENO", "GROUPS", "FUNCNAME", "PIPESTATUS", "OPTIND", "OPTARG", "OPTERR", "DIRSTACK",
        "HOSTTYPE", "MACHTYPE", "OSTYPE", "PWD", "OLDPWD", "SHLVL", "HISTFILE", "EPOCHSECONDS",
        "EPOCHREALTIME", "COPROC", "REPLY", "MAILPATH", "MAILCHECK", "INPUTRC", "HOME", "PATH",
    }
)  # fmt: skip


# HPCTRAIN_ names that are runtime settings for a job to choose, not values hpctrain hands the job.
JOB_SETTABLE_HPCTRAIN_ENV = frozenset({"HPCTRAIN_LOG_LEVEL"})


def env_name_problem(name: object) -> str | None:
    """Why `name` may not be set in an env mapping, or None when it may."""
    if not isinstance(name, str) or not re.fullmatch(ENV_NAME, name):
        return f"{name!r} is not a valid variable name"
    if name in JOB_SETTABLE_HPCTRAIN_ENV:
        return None
    if name in RESERVED_ENV or name.startswith(RESERVED_ENV_PREFIXES):
        return f"{name!r} is reserved (set by Slurm, bash or hpctrain itself)"
    return None


def check_env(field: str, mapping: dict[str, Any]) -> None:
    for key in mapping:
        problem = env_name_problem(key)
        if problem:
            raise ValueError(f"{field}: {problem}")


_TIME = re.compile(r"(?:([0-9]+)-)?([0-9]+)(?::([0-9]+))?(?::([0-9]+))?")
_MEM = re.compile(r"([0-9]+)([KMGT]?)B?", re.IGNORECASE)


def time_minutes(value: str | int) -> int:
    """Slurm time limit (`MM`, `MM:SS`, `HH:MM:SS`, `D-HH`, `D-HH:MM`, `D-HH:MM:SS`) in whole minutes."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)  # sbatch reads a bare number as minutes
    match = _TIME.fullmatch(value) if isinstance(value, str) else None
    if not match:
        raise ValueError(f"{value!r} is not a Slurm time (e.g. 30, 01:30:00, 1-12:00:00)")
    days, first, second, third = match.groups()
    if days is not None:  # D-HH[:MM[:SS]]
        total_s = int(days) * 86400 + int(first) * 3600 + int(second or 0) * 60 + int(third or 0)
    elif third is not None:  # HH:MM:SS
        total_s = int(first) * 3600 + int(second) * 60 + int(third)
    elif second is not None:  # MM:SS
        total_s = int(first) * 60 + int(second)
    else:  # MM
        total_s = int(first) * 60
    if total_s <= 0:
        # Slurm reads a zero time limit as "no limit", which is never what a spec means.
        raise ValueError(f"{value!r} is no time at all; give a positive limit")
    return -(-total_s // 60)


def memory_mb(value: str | int) -> int:
    """Slurm memory size (`4000`, `4000M`, `16G`, `1T`) in megabytes."""
    match = _MEM.fullmatch(str(value))
    if not match or int(match.group(1)) == 0:
        raise ValueError(f"{value!r} is not a Slurm memory size (e.g. 16G, 4000M)")
    number, unit = int(match.group(1)), match.group(2).upper()
    factor = {"K": 1 / 1024, "": 1, "M": 1, "G": 1024, "T": 1024 * 1024}[unit]
    return max(1, int(number * factor))


def minutes_text(minutes: int) -> str:
    """Whole minutes as the time sbatch reads unambiguously: HH:MM:SS, or D-HH:MM:SS from a day on."""
    days, rest = divmod(minutes, 24 * 60)
    clock = f"{rest // 60:02d}:{rest % 60:02d}:00"
    return f"{days}-{clock}" if days else clock


# True while a recorded spec.json is decoded: what an earlier version accepted and Slurm already took
# (a `1:30` time) is read as it was recorded, so that run directories of earlier versions still load.
RECORDED = contextvars.ContextVar("recorded", default=False)


def spec_time(value: str | int) -> str:
    """A time limit as a spec writes it -> the text sbatch gets. An int is minutes, as sbatch reads
    one; `MM:SS` is refused, because `1:30` meant as 1 h 30 min is 90 seconds to Slurm."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value <= 0:
            raise ValueError(f"{value} is no time at all; give a positive number of minutes")
        return minutes_text(value)
    time_minutes(value)
    ambiguous = re.fullmatch(r"([0-9]+):([0-9]+)", value)
    if ambiguous and not RECORDED.get():
        first, second = (int(part) for part in ambiguous.groups())
        raise ValueError(
            f"{value!r} is ambiguous (Slurm reads MM:SS, {first} min {second} s); write "
            f"00:{first:02d}:{second:02d} for that or {first:02d}:{second:02d}:00 for {first} h {second} min"
        )
    return value


def spec_memory(value: str | int) -> str:
    """A memory size as a spec writes it -> the text sbatch gets; an int is megabytes, as sbatch reads one."""
    memory_mb(value)
    return f"{value}M" if isinstance(value, int) else value


def check(field: str, parse: Any, value: Any) -> None:
    """Run a parser in __post_init__ so that its error names the field."""
    try:
        parse(value)
    except ValueError as err:
        raise ValueError(f"{field}: {err}") from None


def settle(struct: msgspec.Struct, field: str, parse: Any) -> None:
    """In __post_init__: replace a field's value as written by what `parse` makes of it (`time: 30`
    becomes "00:30:00"), so that every reader of the struct sees one form; the error names the field."""
    try:
        msgspec.structs.force_setattr(struct, field, parse(getattr(struct, field)))
    except ValueError as err:
        raise ValueError(f"{field}: {err}") from None


def signal_name(value: str) -> str:
    """`USR1` or `SIGUSR1` -> `USR1`, if it names a signal the batch shell can trap."""
    # `_signal` (built in) has the same SIG<NAME> numbers as `signal.Signals` without the cost of
    # importing `signal` (it builds its enums at import): the login-side CLI starts faster.
    import _signal

    name = value.removeprefix("SIG")
    known = getattr(_signal, f"SIG{name}", None)
    if not re.fullmatch(r"[A-Z][A-Z0-9]*", name) or not isinstance(known, int):
        raise ValueError(f"{value!r} is not a signal name (e.g. USR1, TERM)")
    if name in ("KILL", "STOP"):
        raise ValueError(f"{value!r} cannot be caught, so the job could not checkpoint")
    return name


MAIL_TYPES = ("NONE", "BEGIN", "END", "FAIL", "REQUEUE", "ALL", "INVALID_DEPEND", "STAGE_OUT",
              "TIME_LIMIT", "TIME_LIMIT_90", "TIME_LIMIT_80", "TIME_LIMIT_50", "ARRAY_TASKS")  # fmt: skip

# Options hpctrain sets or models itself, which `sbatch:` may not pass. sbatch takes any unambiguous
# prefix of a long option (`--out` is `--output`), so a key is refused when it begins one of these.
OWN_SBATCH_OPTIONS = (
    "job-name", "output", "error", "input", "open-mode", "time", "time-min", "signal", "requeue",
    "no-requeue", "account", "qos", "array", "dependency", "partition", "nodes", "ntasks",
    "ntasks-per-node", "cpus-per-task", "cpus-per-gpu", "gres", "gpus", "gpus-per-node",
    "gpus-per-task", "gpus-per-socket", "mem", "mem-per-cpu", "mem-per-gpu", "constraint", "exclusive",
    "exclude", "nodelist", "reservation", "licenses", "begin", "comment", "mail-type", "mail-user",
    "chdir", "export", "export-file", "get-user-env", "wrap", "parsable", "test-only", "hetjob",
    "packjob", "uid", "gid", "batch", "wait", "help", "usage", "version", "kill-on-invalid-dep",
    "no-kill",
)  # fmt: skip
SBATCH_KEY = r"\A[a-z][a-z0-9]*(-[a-z0-9]+)*\Z"
SBATCH_VALUE = SLURM_WORD


def standby_go_signal(preemption: str) -> str:
    """The signal that hands a warm standby step its attempt: USR2, or USR1 when the job's preemption
    signal is USR2 (the standby ignores that one: it belongs to the attempt that trains)."""
    return "USR1" if signal_name(preemption) == "USR2" else "USR2"


def sbatch_option_problem(key: str) -> str | None:
    """Why `sbatch: {key: ...}` may not be passed through, or None when it may."""
    if not re.fullmatch(SBATCH_KEY, key):
        return f"{key!r} is not a long sbatch option name (write it without the leading --)"
    clash = [own for own in OWN_SBATCH_OPTIONS if own.startswith(key)]
    if clash:
        return f"--{key} is set by hpctrain itself (--{clash[0]}); use the typed field instead"
    return None
