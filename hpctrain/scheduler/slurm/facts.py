"""What the live cluster says about itself: parsers of scontrol/srun/sacctmgr output, and the reads.

The parsers are pure functions of text (tested with hypothesis: any text gives a value or a
SlurmParseError, never another exception); `ClusterFacts.read()` runs the commands once each.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from hpctrain.errors import HpctrainError
from hpctrain.scheduler.slurm.commands import command

_KEY = re.compile(r"(?:^|(?<=\s))([A-Za-z][A-Za-z0-9_:/.\-]*)=")
_RANGE = re.compile(r"\[([^\[\]]*)\]")


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
