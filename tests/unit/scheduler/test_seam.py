"""The scheduler seam: no Slurm command is spelled outside hpctrain/scheduler/ (the templates may run
srun and scontrol only), so every call goes through a backend or a function of the scheduler package."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import hpctrain
from tests.unit.code_strings import code_strings

PACKAGE = Path(hpctrain.__file__).resolve().parent
TEMPLATES = PACKAGE.parent / "templates"
COMMANDS = ("sbatch", "squeue", "sacct", "scontrol", "scancel", "sinfo", "sacctmgr")
TEMPLATE_ALLOWED = ("scontrol",)  # srun is no command of the list: the templates launch with it
# A command as an argv element ("squeue") or at the head of a command line ("scontrol show config").
ARGV = re.compile(rf"^\s*({'|'.join(COMMANDS)})(\s+(-\S|show|update|requeue\w*|release|hold)\b.*)?\s*$", re.S)
SHELL_WORD = re.compile(rf"(?<![\w.-])({'|'.join(COMMANDS)})(?![\w.-])")


def spelled_in_source(source: str) -> list[tuple[int, str]]:
    """(line, text) of each string of the code (not a docstring) that spells a Slurm command."""
    return [(line, text) for line, text in code_strings(source) if ARGV.match(text)]


def spelled_in_template(text: str) -> list[tuple[int, str]]:
    """(line, command) of each command a template runs other than srun and scontrol (comments aside)."""
    text = re.sub(r"\{#.*?#\}", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        code = line.split("#", 1)[0] if not line.lstrip().startswith("#!") else ""
        found += [(number, word) for word in SHELL_WORD.findall(code) if word not in TEMPLATE_ALLOWED]
    return found


def test_no_module_outside_the_scheduler_spells_a_slurm_command() -> None:
    scheduler = PACKAGE / "scheduler"
    found = [
        f"{path.relative_to(PACKAGE)}:{line}: {text!r}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if scheduler not in path.parents
        for line, text in spelled_in_source(path.read_text())
    ]
    assert found == []


def test_the_templates_run_only_srun_and_scontrol() -> None:
    found = [
        f"{path.relative_to(TEMPLATES)}:{line}: {word}"
        for path in sorted(TEMPLATES.rglob("*.j2"))
        for line, word in spelled_in_template(path.read_text())
    ]
    assert found == []


@pytest.mark.parametrize(
    "source",
    [
        'subprocess.run(["scancel", job_id])',
        'run(["sacctmgr", "-n", "show", "assoc"])',
        'os.system("scontrol show config")',
        'QUERY = "squeue --me"',
        'argv = [f"{x}", "sinfo"]',
    ],
)
def test_the_source_scan_catches_a_command(source: str) -> None:
    assert spelled_in_source(source)


@pytest.mark.parametrize(
    "source",
    [
        '"""Runs sbatch."""',
        'raise ValueError(f"sbatch: {problem}")',
        'message = "scontrol does not know this node"',
        'name = "squeue_format"',
    ],
)
def test_the_source_scan_leaves_words_in_messages_and_docstrings(source: str) -> None:
    assert spelled_in_source(source) == []


def test_the_template_scan_catches_a_command_but_not_a_comment_or_a_directive() -> None:
    text = '#SBATCH --array=0-3\n# scancel is not run here\n{# sacct either #}\nscancel "$SLURM_JOB_ID"\n'
    assert spelled_in_template(text) == [(4, "scancel")]
    assert spelled_in_template('scontrol show hostnames "$SLURM_JOB_NODELIST"\n') == []
