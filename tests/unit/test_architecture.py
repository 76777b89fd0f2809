"""The import rules of the package's architecture, read off every module's imports (ast) and checked for real.

login side (cli, launch, runs, sweep, site, report) and allocation side (supervisor, runtime) never
import each other; both may import the shared column (version, errors, rundir, spec, scheduler), which
imports neither side and is ordered: each of its packages imports only those below it. The supervisor and
everything on the login side never import torch.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "hpctrain"

LOGIN = frozenset({"api", "cli", "submission", "tracking", "sweep", "site", "report"})
ALLOCATION = frozenset({"supervisor", "runtime", "command"})
# The shared column, lowest first: a package imports only the ones before it, at the top of a module,
# inside a function or under TYPE_CHECKING alike (the job states live with the run record, in rundir).
SHARED_ORDER = ("version", "errors", "rundir", "spec", "scheduler")
SHARED = frozenset(SHARED_ORDER)
EXAMPLES = "examples"
TOP_LEVEL_FILES = frozenset({"__init__.py", "version.py", "errors.py", "api.py", "client.py"})
TORCH_FREE = LOGIN | {"supervisor", "command"}
# The command wrapper reuses the runtime's torch-free pieces: the heartbeat slot writer, NCCL's settings
# and the rank log's redirection; and its TensorBoard sink, imported in a thread after the script started.
COMMAND_MAY_IMPORT = frozenset(
    {
        "hpctrain.runtime.heartbeat",
        "hpctrain.runtime.collective_timeout",
        "hpctrain.runtime.logs",
        "hpctrain.runtime.tensorboard_log",
    }
)

# (importer, imported module): imports in modules that another branch of this redesign rewrites. Delete an
# entry once that branch is merged; the test then holds the rule there too.
AWAITING_OTHER_BRANCHES: dict[tuple[str, str], str] = {}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def imported(path: Path, name: str) -> set[str]:
    """Every module `path` imports, at its top or inside a function (relative imports resolved)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


TOP_LEVEL = frozenset(path.stem for path in PACKAGE.iterdir() if path.suffix == ".py" or path.is_dir())


def part_of(name: str) -> str | None:
    """`hpctrain.runtime.ps.server` -> "runtime"; `hpctrain.errors` -> "errors"; None outside hpctrain and
    for the package's face (`from hpctrain import spec`)."""
    parts = name.split(".")
    if parts[0] != "hpctrain" or len(parts) < 2 or parts[1] not in TOP_LEVEL or parts[1] == "__init__":
        return None
    return parts[1]


def command_reuse(name: str, target: str) -> bool:
    return part_of(name) == "command" and any(
        target == module or target.startswith(module + ".") for module in COMMAND_MAY_IMPORT
    )


def awaited(name: str, target: str) -> bool:
    return any((name, module) in AWAITING_OTHER_BRANCHES for module in (target, target.rpartition(".")[0]))


def allowed(importer: str, target: str) -> bool:
    if importer == target:
        return True
    if importer in SHARED:
        return target in SHARED and SHARED_ORDER.index(target) < SHARED_ORDER.index(importer)
    if target in SHARED:
        return True
    if importer == EXAMPLES:
        return target == "runtime"
    if importer in LOGIN:
        return target in LOGIN
    return False  # the shared column imports neither side; the two allocation packages stay apart


IMPORTS = {name: imported(path, name) for name, path in modules().items()}


def passes_in_a_fresh_interpreter(code: str) -> None:
    """Run `code` in a new Python, whose sys.modules holds only what that code imported."""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_rule_itself() -> None:
    assert allowed("cli", "tracking") and allowed("runtime", "rundir") and allowed("supervisor", "scheduler")
    assert not allowed("supervisor", "runtime") and not allowed("runtime", "supervisor")
    assert not allowed("sweep", "supervisor") and not allowed("runtime", "cli")
    assert not allowed("rundir", "runtime") and not allowed("spec", "cli")
    assert allowed("scheduler", "spec") and allowed("spec", "rundir") and allowed("rundir", "errors")
    assert (
        not allowed("rundir", "scheduler")
        and not allowed("rundir", "spec")
        and not allowed("spec", "scheduler")
    )
    assert (
        not allowed("errors", "rundir") and not allowed("version", "errors") and allowed("errors", "version")
    )
    assert allowed("examples", "runtime") and not allowed("examples", "cli")
    assert imported(PACKAGE / "runtime" / "__main__.py", "hpctrain.runtime.__main__") >= {"torch"}


def test_login_allocation_and_shared_packages_import_only_what_the_architecture_allows() -> None:
    broken = sorted(
        f"{name} imports {target}"
        for name, targets in IMPORTS.items()
        for target in targets
        if (importer := part_of(name)) is not None
        and (side := part_of(target)) is not None
        and not allowed(importer, side)
        and not awaited(name, target)
        and not command_reuse(name, target)
    )
    assert not broken, "\n".join(broken)


def test_the_order_is_checked_in_functions_and_under_type_checking_too(tmp_path: Path) -> None:
    source = tmp_path / "structs.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from hpctrain.scheduler.base import JobInfo\n"
        "def state():\n    from hpctrain.spec import slurm_values\n"
    )
    found = imported(source, "hpctrain.rundir.structs")
    assert {"hpctrain.scheduler.base", "hpctrain.spec"} <= found
    assert not allowed("rundir", part_of("hpctrain.scheduler.base") or "")
    assert not allowed("rundir", part_of("hpctrain.spec") or "")


def test_no_module_reads_the_version_through_the_package_face() -> None:
    """`from hpctrain import __version__` runs the face's lazy `__getattr__` machinery first (once it
    broke every rank); the version has its own module, hpctrain.version."""
    through_face = sorted(
        name
        for name, path in modules().items()
        if name != "hpctrain"
        and ("hpctrain.__version__" in IMPORTS[name] or "hpctrain.__version__" in path.read_text())
    )
    assert not through_face, through_face


def test_the_torch_free_packages_never_spell_a_torch_import() -> None:
    spelled = sorted(
        f"{name} imports {target}"
        for name, targets in IMPORTS.items()
        if part_of(name) in TORCH_FREE
        for target in targets
        if target == "torch" or target.startswith("torch.")
    )
    assert not spelled, "\n".join(spelled)


def entry_modules(packages: frozenset[str]) -> list[str]:
    return sorted(name for name in IMPORTS if part_of(name) in packages)


@pytest.mark.parametrize("package", sorted(TORCH_FREE & TOP_LEVEL))
def test_importing_a_torch_free_package_loads_no_torch(package: str) -> None:
    """Every module of the package, imported in a fresh interpreter: torch must not be among sys.modules
    (an import through a shared module would not show in the package's own source)."""
    names = entry_modules(frozenset({package}))
    assert names, f"no modules found for hpctrain.{package}"
    code = f"import sys, {', '.join(names)}; assert 'torch' not in sys.modules, 'torch was imported'"
    passes_in_a_fresh_interpreter(code)


def test_nothing_sits_at_the_top_of_the_package_but_its_face_errors_and_the_packages() -> None:
    strays = sorted(
        path.name
        for path in PACKAGE.iterdir()
        if (path.suffix == ".py" and path.name not in TOP_LEVEL_FILES)
        or (path.is_dir() and path.name != "__pycache__" and not (path / "__init__.py").exists())
    )
    assert not strays, strays


# The CLI's verbs format what hpctrain.api returns: they import the API, the errors and the CLI's own
# formatting (hpctrain.cli.*), and `hpctrain.version`; every verb, doctor and init-site included.
CLI_ALLOWED = frozenset({"hpctrain", "hpctrain.api", "hpctrain.errors", "hpctrain.version"})
# The views draw the contract's structs: they may import the modules that define those structs and their
# one-line descriptions (never a poll: the verbs hand them what the API returned).
VIEW_ALLOWED = CLI_ALLOWED | {
    "hpctrain.report.build",
    "hpctrain.rundir",
    "hpctrain.rundir.attempts",
    "hpctrain.rundir.stragglers",
    "hpctrain.tracking.health",
    "hpctrain.tracking.poll",
    "hpctrain.tracking.status",
    "hpctrain.scheduler",
    "hpctrain.scheduler.base",
}


def hpctrain_modules_imported(name: str) -> set[str]:
    """The hpctrain modules `name` imports (`from m import x` counts as m when x is no module)."""
    names = set(IMPORTS)
    out = set()
    for target in IMPORTS[name]:
        if target.split(".")[0] != "hpctrain" or target.startswith("hpctrain.cli"):
            continue
        out.add(target if target in names or target == "hpctrain" else target.rpartition(".")[0])
    return out


def stray_cli_imports() -> list[str]:
    stray = []
    for name in IMPORTS:
        if not name.startswith("hpctrain.cli."):
            continue
        allowed_here = VIEW_ALLOWED if name.startswith("hpctrain.cli.view") else CLI_ALLOWED
        stray += [f"{name} imports {t}" for t in sorted(hpctrain_modules_imported(name) - allowed_here)]
    return stray


def test_the_cli_verbs_import_only_the_api_the_errors_and_the_cli_formatting() -> None:
    stray = stray_cli_imports()
    assert not stray, "\n".join(stray)


def test_the_cli_rule_sees_a_verb_that_goes_around_the_api(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(IMPORTS, "hpctrain.cli.submit_cmd", {"hpctrain.submission.submit_path.submit"})
    assert stray_cli_imports() == ["hpctrain.cli.submit_cmd imports hpctrain.submission.submit_path"]


def test_importing_hpctrain_or_building_a_verb_parser_imports_no_api() -> None:
    """`import hpctrain` re-exports the API lazily: none of it is loaded until a name is used."""
    code = (
        "import sys, hpctrain; from hpctrain.cli.main import build_parser; build_parser('status'); "
        "assert 'hpctrain.api' not in sys.modules, 'api imported'; "
        "assert hpctrain.submit is hpctrain.api.submit and hpctrain.RunStatus.__name__ == 'RunStatus'"
    )
    passes_in_a_fresh_interpreter(code)


def test_the_allocation_side_importing_hpctrain_packages_never_loads_the_api() -> None:
    """`from hpctrain import spec` asks the package's lazy `__getattr__` first: a subpackage must not
    make it import the API (the runtime's first line did, and inside a container whose hpctrain had no
    api.py every rank then failed)."""
    code = (
        "import sys; from hpctrain import spec, rundir, scheduler, errors; "
        "import hpctrain.supervisor.supervise, hpctrain.supervisor.watchdog; "
        "import hpctrain.supervisor.attempt_loop; "
        "assert 'hpctrain.api' not in sys.modules, 'api imported'"
    )
    passes_in_a_fresh_interpreter(code)


def test_polling_runs_loads_neither_the_spec_nor_the_templates(tmp_path: Path) -> None:
    """`hpctrain status` polls every tracked run on each call: it reads the index, the run directories
    and the scheduler, never a spec, a template or a backend the runs do not use (which is why
    scheduler.base's `prepare`, facts' `slurm_time` and `select_backend` import them where they are
    used)."""
    code = (
        "import os, sys; os.environ['HPCTRAIN_HOME'] = sys.argv[1]\n"
        "from hpctrain.cli.main import main\n"
        "from hpctrain.scheduler import select_backend\n"
        "import hpctrain.tracking.status, hpctrain.tracking.poll, hpctrain.scheduler.slurm.nodes\n"
        "select_backend('slurm'); main(['status'])\n"
        "assert 'hpctrain.scheduler.local' not in sys.modules, 'the local backend was imported'\n"
        "select_backend('local')\n"
        "loaded = [m for m in ('hpctrain.spec', 'hpctrain.scheduler.render', 'jinja2') if m in sys.modules]\n"
        "assert not loaded, loaded"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_client_imports_only_the_standard_library() -> None:
    """`from hpctrain import client` runs in users' own scripts: the standard library only, and nothing of
    hpctrain that imports more (it loads rundir's names.py and slots.py by path, without the package)."""
    spelled = sorted(t for t in IMPORTS["hpctrain.client"] if t.split(".")[0] not in sys.stdlib_module_names)
    assert not spelled, spelled
    code = (
        "import sys; before = set(sys.modules); from hpctrain import client; client._load('names'); "
        "client._load('slots'); new = set(sys.modules) - before; "
        "bad = sorted(m for m in new if m.split('.')[0] not in sys.stdlib_module_names "
        "and m not in ('hpctrain', 'hpctrain.version', 'hpctrain.client') "
        "and not m.startswith('hpctrain._client_')); "
        "assert not bad, bad"
    )
    passes_in_a_fresh_interpreter(code)
