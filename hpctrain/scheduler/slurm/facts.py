"""What the live cluster says about itself: parsers of scontrol/srun/sacctmgr output, and the calls.

The parsers are pure functions of text (tested with hypothesis: any text gives a value or a
SlurmParseError, never another exception); `ClusterFacts.read()` runs the commands once each.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass, field

import msgspec

from hpctrain.errors import BackendError, HpctrainError

_KEY = re.compile(r"(?:^|(?<=\s))([A-Za-z][A-Za-z0-9_:/.\-]*)=")
_RANGE = re.compile(r"\[([^\[\]]*)\]")
_SRUN_ERROR = re.compile(r"srun: error: (\S+): tasks? ([0-9,\-]+): (.+)$")
# srun's line names tasks by ranges (`tasks 0-3,7`); one larger than this is shown as written.
MAX_RANGE = 1024


def is_number(text: str) -> bool:
    """ASCII digits only: str.isdigit() also accepts '¹', which int() refuses."""
    return re.fullmatch(r"[0-9]+", text) is not None


class SlurmParseError(HpctrainError):
    """Output from a Slurm command that does not read as expected."""

    exit_code = 1


def parse_record(line: str) -> dict[str, str]:
    """One `scontrol show ... -o` line: `Key=value Key=value with spaces ...` -> dict."""
    matches = list(_KEY.finditer(line))
    record: dict[str, str] = {}
    for index, match in enumerate(matches):
        end = matches[index + 1].start() if index + 1 < len(matches) else len(line)
        record[match.group(1)] = line[match.end() : end].strip()
    return record


def parse_records(text: str, key: str) -> dict[str, dict[str, str]]:
    """Every `-o` line that has `key` (NodeName, PartitionName), by that key's value."""
    records = {}
    for line in text.splitlines():
        record = parse_record(line)
        if record.get(key):
            records[record[key]] = record
    return records


def expand_hostlist(text: str, limit: int = 100000) -> list[str]:
    """`node[1-3,7],gpu01` -> node1 node2 node3 node7 gpu01 (the subset of Slurm's syntax clusters use)."""
    names: list[str] = []
    depth, start = 0, 0
    pieces = []
    for index, char in enumerate(text):
        depth += {"[": 1, "]": -1}.get(char, 0)
        if depth < 0 or depth > 1:
            raise SlurmParseError(f"unbalanced brackets in host list {text!r}")
        if char == "," and depth == 0:
            pieces.append(text[start:index])
            start = index + 1
    if depth:
        raise SlurmParseError(f"unbalanced brackets in host list {text!r}")
    pieces.append(text[start:])
    for piece in (p.strip() for p in pieces):
        if not piece or piece == "(null)":
            continue
        match = _RANGE.search(piece)
        if not match:
            names.append(piece)
            continue
        head, tail = piece[: match.start()], piece[match.end() :]
        for part in match.group(1).split(","):
            low, _, high = part.partition("-")
            if not is_number(low) or (high and not is_number(high)):
                raise SlurmParseError(f"bad range {part!r} in host list {text!r}")
            last = int(high) if high else int(low)
            if last - int(low) > limit - len(names):
                raise SlurmParseError(f"host list {text!r} is too long")
            for number in range(int(low), last + 1):
                names += expand_hostlist(f"{head}{str(number).zfill(len(low))}{tail}", limit - len(names))
    return names


def parse_gres(text: str, name: str = "gpu") -> tuple[int, str | None]:
    """(count, type) of `name` in a node's Gres= (`gpu:h100:8(S:0-1),nvme:1`); (0, None) if absent."""
    count, kind = 0, None
    for item in re.split(r",(?![^()]*\))", text or ""):
        fields = re.sub(r"\(.*?\)", "", item).strip().split(":")
        if fields[0] != name or len(fields) < 2:
            continue
        number = re.match(r"^[0-9]+", fields[-1])
        if not number:
            raise SlurmParseError(f"gres {item!r} has no count")
        count += int(number.group())
        if len(fields) >= 3:
            kind = fields[1]
    return count, kind


def parse_mpi_list(text: str) -> list[str]:
    """Plugin names from `srun --mpi=list`: indented (or bare) lowercase words after a header line."""
    plugins = []
    for line in text.splitlines():
        word = line.strip().split(" ")[0]
        indented = line.startswith(("\t", " ")) or re.fullmatch(r"[a-z0-9_]+", line.strip())
        if indented and word and re.fullmatch(r"[a-z0-9_]+", word):
            plugins.append(word)
    return plugins


# The Slurm releases hpctrain is tested against (scripts/slurm-matrix.sh runs its tests on each), with
# the date of the last passing run; docs/compatibility.md has the matrix of features by release.
TESTED_SLURM: dict[str, str] = {
    "22.05": "2026-12-05",
    "24.11": "2026-12-05",
    "25.11": "2026-12-05",
    "26.05": "2026-12-05",
}


def major_minor(text: str) -> tuple[int, int] | None:
    """`slurm 22.05.8` -> (22, 5); `25.11.2` -> (25, 11); pyslurm spells 18.08 as `18.8`."""
    match = re.search(r"(\d+)\.(\d+)", text)
    return (int(match.group(1)), int(match.group(2))) if match else None


def slurm_release(version: tuple[int, int]) -> str:
    """Slurm's own spelling of a release: (22, 5) -> `22.05`."""
    return f"{version[0]}.{version[1]:02d}"


def tested_release(version_text: str) -> tuple[str | None, str | None]:
    """(the release of a Slurm version such as `25.11.7`, the date hpctrain last passed its tests on
    it, or None when it never ran there)."""
    version = major_minor(version_text)
    if version is None:
        return None, None
    release = slurm_release(version)
    return release, TESTED_SLURM.get(release)


EXPEDITED_REQUEUE_SINCE = (25, 5)
"""The first Slurm release with `sbatch --requeue=expedite`."""


def expedited_requeue(config: dict[str, str]) -> bool:
    """Whether jobs may ask for `--requeue=expedite` on this cluster (`scontrol show config`).

    After a node failure such a job is eligible at once and first in the queue (state EXPEDITING
    until it runs), without the requeue delay or a `hpctrain status` poll to release it. slurmctld
    refuses the submission unless SlurmctldParameters has enable_expedited_requeue, so the release
    alone does not decide. Two more effects: a batch script that exits non-zero is requeued and held
    (REQUEUE_HOLD, seen on 25.11) unless it set `Requeue=0` first, and slurmctld refuses a user's
    `scontrol update` of an expediting job, so a --nodelist pin to the lost node stays.
    """
    version = major_minor(config.get("SLURM_VERSION", ""))
    parameters = config.get("SlurmctldParameters", "").split(",")
    return (
        version is not None
        and version >= EXPEDITED_REQUEUE_SINCE
        and "enable_expedited_requeue" in parameters
    )


def parse_config(text: str) -> dict[str, str]:
    """`scontrol show config`: `Key = value` lines."""
    config = {}
    for line in text.splitlines():
        key, sep, value = line.partition(" = ")
        if sep and key.strip() and " " not in key.strip():
            config[key.strip()] = value.strip()
    return config


def memory_text_mb(text: str) -> int:
    """RealMemory (MB, an integer) -> int; anything else is a parse error."""
    if not is_number(text.strip()):
        raise SlurmParseError(f"memory {text!r} is not a number of megabytes")
    return int(text.strip())


def slurm_time(text: str) -> str | None:
    """A partition MaxTime as the site profile writes it; None for UNLIMITED/INFINITE."""
    value = text.strip()
    if value.upper() in ("UNLIMITED", "INFINITE", "NONE", ""):
        return None
    # Imported here, not above: the spec is no part of a poll, which reads this module
    # (test_architecture.py: test_polling_runs_loads_neither_the_spec_nor_the_templates).
    from hpctrain.spec import time_minutes

    try:
        time_minutes(value)
    except ValueError:
        raise SlurmParseError(f"time limit {text!r} is not a Slurm time") from None
    return value


@dataclass
class ClusterFacts:
    """Everything the login node can read about the cluster, from one call of each command."""

    partitions: dict[str, dict[str, str]]
    nodes: dict[str, dict[str, str]]
    config: dict[str, str]
    mpi_plugins: list[str] = field(default_factory=list)
    accounts: list[str] = field(default_factory=list)
    qos: list[str] = field(default_factory=list)
    accounting: bool = False

    @classmethod
    def read(cls, timeout: float = 30) -> ClusterFacts:
        partitions = parse_records(command(["scontrol", "show", "partition", "-o"], timeout), "PartitionName")
        nodes = parse_records(command(["scontrol", "show", "node", "-o"], timeout), "NodeName")
        config = parse_config(command(["scontrol", "show", "config"], timeout))
        try:
            mpi = parse_mpi_list(command(["srun", "--mpi=list"], timeout, merge=True))
        except HpctrainError:
            mpi = []
        facts = cls(partitions, nodes, config, mpi)
        if "slurmdbd" in config.get("AccountingStorageType", ""):
            try:
                rows = [
                    row for row in user_associations(["account", "user", "qos"], timeout) if len(row) >= 3
                ]
                user = user_name()
                facts.accounts = sorted({r[0] for r in rows if r[1] == user})
                facts.qos = sorted({q for r in rows if r[1] == user for q in r[2].split(",") if q})
                facts.accounting = True
            except HpctrainError:
                facts.accounting = False
        return facts

    def partition_nodes(self, name: str) -> list[str]:
        return expand_hostlist(self.partitions[name].get("Nodes", ""))

    def default_partition(self) -> str | None:
        return next((n for n, p in self.partitions.items() if p.get("Default") == "YES"), None)


def user_name() -> str:
    """This user's login name, as accounting knows it."""
    import getpass

    return getpass.getuser()


def user_associations(fields: list[str], timeout: float = 30) -> list[list[str]]:
    """This user's associations in accounting (sacctmgr), one row of `fields` each."""
    text = command(
        [
            "sacctmgr",
            "--noheader",
            "--parsable2",
            "show",
            "assoc",
            "where",  # its own word: sacctmgr refuses "where user=X" as one ("Unknown condition")
            f"user={user_name()}",
            "format=" + ",".join(fields),
        ],
        timeout,
    )
    return [line.split("|") for line in text.splitlines() if line.strip()]


def accounting_problem(timeout: float = 60) -> str | None:
    """Why sacct does not answer (a cluster without accounting), or None when it does."""
    try:
        command(
            [
                "sacct",
                "--noheader",
                "--allocations",
                "--parsable2",
                "--starttime=now-1hours",
                "--format=JobID",
            ],
            timeout,
        )
    except HpctrainError as err:
        return str(err)
    return None


def command(argv: list[str], timeout: float = 30, merge: bool = False) -> str:
    """Run a Slurm command; a missing binary, a timeout or a non-zero exit is one BackendError line."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except FileNotFoundError:
        raise BackendError(f"{argv[0]} not found: is this a Slurm login node?") from None
    except subprocess.TimeoutExpired:
        raise BackendError(f"{' '.join(argv)} did not answer within {timeout:.0f} s") from None
    if proc.returncode != 0:
        message = (proc.stderr or proc.stdout).strip().splitlines()
        raise BackendError(f"{' '.join(argv)} failed: {message[-1] if message else proc.returncode}")
    return proc.stdout + (proc.stderr if merge else "")


# ----------------------------------------------------------------------------------------------
# srun's word on tasks that died (batch logs)
# ----------------------------------------------------------------------------------------------


class FailedTask(msgspec.Struct):
    """srun's own word on a task that died: `srun: error: node2: task 3: Killed`."""

    rank: str
    node: str
    error: str


def srun_task_errors(lines: Iterable[str], max_tasks: int = MAX_RANGE) -> list[FailedTask]:
    """The tasks that srun's error lines among `lines` name, each once (its first word counts); a
    task by its node too (steps of one node each count their tasks from 0)."""
    found: dict[tuple[str, str], FailedTask] = {}
    for line in lines:
        match = _SRUN_ERROR.search(line)
        if not match:
            continue
        node, tasks, what = match.groups()
        for task in task_ranks(tasks):
            if len(found) >= max_tasks:
                return list(found.values())
            found.setdefault((task, node), FailedTask(task, node, what.strip()))
    return list(found.values())


def task_ranks(ranges: str) -> list[str]:
    """`0-2,7` -> 0 1 2 7; a range wider than MAX_RANGE, or one that is no range, stays as written."""
    out: list[str] = []
    for part in ranges.split(","):
        low, dash, high = part.partition("-")
        if dash and _small_number(low) and _small_number(high) and 0 <= int(high) - int(low) < MAX_RANGE:
            out.extend(str(i) for i in range(int(low), int(high) + 1))
        elif part:
            out.append(part)
    return out


def _small_number(text: str) -> bool:
    return 0 < len(text) <= 18 and text.isascii() and text.isdigit()
