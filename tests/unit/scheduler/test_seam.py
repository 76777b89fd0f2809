"""The scheduler seam: no Slurm command is spelled outside hpctrain/scheduler/, in the strings a module
generates too (a shell line, an argv), so every call goes through a backend or a function of the
scheduler package. The templates the scheduler renders may run srun and scontrol."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import hpctrain

PACKAGE = Path(hpctrain.__file__).resolve().parent
TEMPLATES = PACKAGE.parent / "templates"
COMMANDS = ("sbatch", "srun", "squeue", "sacct", "scontrol", "scancel", "sinfo", "sdiag", "sacctmgr")
TEMPLATE_ALLOWED = ("srun", "scontrol")  # the rank steps, and the job's own node list
# (module outside hpctrain/scheduler/, command it may spell): why. Keep it short and explicit; e.g. the
# rank step's srun line, should the attempt loop build it in Python outside the scheduler package:
# ("hpctrain/supervisor/steps.py", "srun"): "the rank step's srun line".
ALLOWED_OUTSIDE: dict[tuple[str, str], str] = {}

_WORDS = "|".join(COMMANDS)
# What makes a command word a command line: an option, a subcommand, a shell variable, a pipe or the end.
_ARGUMENT = r"(?=\s+(?:-\S|show|update|requeue\w*|release|hold|\"?\$)|\s*$|\s*[|;&`])"
# Where a shell line can start a command: the string's (or a line's) start, `$(`, a backtick, a pipe,
# `;`, `&&`, `||`, a subshell's `(`, or after exec/then/do/else.
COMMAND_LINE = re.compile(rf"(?:^|\$\(|`|[|;&(]|\b(?:exec|then|do|else)\s)\s*({_WORDS}){_ARGUMENT}", re.M)
SHELL_WORD = re.compile(rf"(?<![\w.-])({_WORDS})(?![\w.-])")


def _text(node: ast.expr) -> str | None:
    """A string constant's text, or an f-string's text up to its first placeholder."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr) and node.values:
        return _text(node.values[0])
    return None


def spelled_in_source(source: str) -> list[tuple[int, str]]:
    """(line, text) of each string of the code that runs a Slurm command: a command line anywhere in
    a string (`MASTER_ADDR=$(scontrol show hostnames ...)`), a command word that stands alone (an argv
    element), or srun at the head of an argv list. Docstrings and other bare string statements are
    prose, as are messages that name a command (`"sbatch: refused"`). `srun` alone is also a launcher's
    name (`launcher: srun`), so it counts only at the head of an argv."""
    tree = ast.parse(source)
    prose = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)}
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose:
            text = node.value
            if text.strip() != "srun" and (text.strip() in COMMANDS or COMMAND_LINE.search(text)):
                found.append((node.lineno, text))
        elif isinstance(node, ast.List | ast.Tuple) and node.elts and _text(node.elts[0]) in COMMANDS:
            # An argv: the command alone (options added later), or followed by an option.
            option = _text(node.elts[1]) if len(node.elts) > 1 else ""
            if option is not None and (not option or option.startswith("-")):
                found.append((node.lineno, f"{_text(node.elts[0])} {option}".strip()))
    return found


def spelled_in_template(text: str) -> list[tuple[int, str]]:
    """(line, command) of each command a template runs other than srun and scontrol (comments aside)."""
    text = re.sub(r"\{#.*?#\}", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        code = line.split("#", 1)[0] if not line.lstrip().startswith("#!") else ""
        found += [(number, word) for word in SHELL_WORD.findall(code) if word not in TEMPLATE_ALLOWED]
    return found


def allowed_outside(path: Path, text: str) -> bool:
    where = path.relative_to(PACKAGE.parent).as_posix()
    return any((where, word) in ALLOWED_OUTSIDE for word in SHELL_WORD.findall(text))


def test_no_module_outside_the_scheduler_spells_a_slurm_command() -> None:
    scheduler = PACKAGE / "scheduler"
    found = [
        f"{path.relative_to(PACKAGE)}:{line}: {text!r}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if scheduler not in path.parents
        for line, text in spelled_in_source(path.read_text())
        if not allowed_outside(path, text)
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
        "LINE = 'MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1)'",
        'lines.append(f"srun --output={log} {python} -m hpctrain.runtime.preflight")',
        'argv = ["srun", "--overlap", f"--jobid={job}"]',
        'argv = ["srun", f"--partition={name}", "sh"]',
        'argv = ["srun"]',
        'script = "set -e; sdiag | head -n 3"',
        'guard = "true && sbatch --parsable job.sbatch"',
    ],
)
def test_the_source_scan_catches_a_command(source: str) -> None:
    assert spelled_in_source(source)


@pytest.mark.parametrize(
    "source",
    [
        '"""Runs sbatch."""',
        'x = 1\n"""The attribute\'s doc: srun --mpi plugin for MPI jobs."""',
        'raise ValueError(f"sbatch: {problem}")',
        'message = "scontrol does not know this node"',
        'name = "squeue_format"',
        'note = "submit with the command-line backend (sbatch) instead"',
        'LAUNCHERS = ("srun", "fork")',
        'launcher = "srun"',
        'found = shutil.which("srun")',
    ],
)
def test_the_source_scan_leaves_words_in_messages_and_docstrings(source: str) -> None:
    assert spelled_in_source(source) == []


def test_the_template_scan_catches_a_command_but_not_a_comment_or_a_directive() -> None:
    text = '#SBATCH --array=0-3\n# scancel is not run here\n{# sacct either #}\nscancel "$SLURM_JOB_ID"\n'
    assert spelled_in_template(text) == [(4, "scancel")]
    assert spelled_in_template('scontrol show hostnames "$SLURM_JOB_NODELIST"\n') == []
    assert spelled_in_template("srun --overlap true\nsinfo -h\n") == [(2, "sinfo")]
