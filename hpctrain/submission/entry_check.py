"""Submit-time checks of what would otherwise fail in the queue: the entrypoint and the paths a job names.

Nothing of the user's is run: the entrypoint's module is located with import finders (a package's
`__init__` is not executed) and its source is read with `ast` to find the function. The search path
is the job's: the submit directory (where `python -m hpctrain.runtime` starts) and this Python's
sys.path, which includes $PYTHONPATH (sbatch exports it to the job).
"""

from __future__ import annotations

import ast
import importlib.machinery
import os
import shutil
import sys
from pathlib import Path

from hpctrain.errors import SpecError
from hpctrain.spec import Resolved

# train.options keys that name files or folders by convention (data_dir, tokenizer_path, ...).
PATH_KEY_SUFFIXES = ("_dir", "_path", "_file", "_root")


def find_module(name: str, search: list[str]) -> importlib.machinery.ModuleSpec | None:
    """The spec of `name` found level by level on `search` plus the meta-path finders, importing nothing."""
    locations: list[str] | None = search
    spec = None
    parts = name.split(".")
    for depth in range(len(parts)):
        fullname = ".".join(parts[: depth + 1])
        spec = importlib.machinery.PathFinder.find_spec(fullname, locations)
        if spec is None:
            for finder in sys.meta_path:  # editable installs map packages with their own finders
                find = getattr(finder, "find_spec", None)
                if find is None or finder is importlib.machinery.PathFinder:
                    continue
                try:
                    spec = find(fullname, None if depth == 0 else locations)
                except (ImportError, AttributeError, TypeError, ValueError):
                    spec = None
                if spec is not None:
                    break
        if spec is None:
            return None
        locations = list(spec.submodule_search_locations or [])
    return spec


def defines(tree: ast.Module, function: str) -> bool | None:
    """True/False when the module's top level binds `function`; None when it cannot be told (star import)."""
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node.name == function:
            return True
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign | ast.AugAssign):
            targets = [node.target]
        if any(isinstance(t, ast.Name) and t.id == function for t in targets):
            return True
        if isinstance(node, ast.Import | ast.ImportFrom):
            for alias in node.names:
                if alias.name == "*" or (alias.asname or alias.name.split(".")[0]) == function:
                    return True if alias.name != "*" else None
        if isinstance(node, ast.FunctionDef) and node.name == "__getattr__":
            return None
    return False


class _Imports(ast.NodeVisitor):
    """Top-level names of the absolute imports a module needs: not those guarded by `try/except
    ImportError` (optional dependencies) nor those under `if TYPE_CHECKING:`."""

    GUARDS = ("ImportError", "ModuleNotFoundError", "Exception", "BaseException")

    def __init__(self) -> None:
        self.names: set[str] = set()

    def generic_visit(self, node: ast.AST) -> None:
        # Imports are statements: only statement bodies are walked, never expressions (a tenth of
        # the nodes; submit reads the entrypoint's module on every call).
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            children = getattr(node, field, None)
            if isinstance(children, list):
                for child in children:
                    self.visit(child)

    def visit_Try(self, node: ast.Try) -> None:
        caught = {ast.unparse(h.type) if h.type else "BaseException" for h in node.handlers}
        if not any(guard in name for name in caught for guard in self.GUARDS):
            self.generic_visit(node)
            return
        for child in [*node.handlers, *node.orelse, *node.finalbody]:
            self.visit(child)

    def visit_If(self, node: ast.If) -> None:
        if "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                self.visit(child)
            return
        self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        self.names.update(alias.name.split(".")[0] for alias in node.names)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if not node.level and node.module:
            self.names.add(node.module.split(".")[0])


def missing_imports(tree: ast.Module, search: list[str]) -> list[str]:
    """Modules the source imports (unguarded) that are on neither `search` nor the standard library."""
    visitor = _Imports()
    visitor.visit(tree)
    known = set(sys.stdlib_module_names) | set(sys.builtin_module_names)
    return sorted(n for n in visitor.names if n not in known and find_module(n, search) is None)


def check_entrypoint(
    entrypoint: str, origin: str, cwd: Path | None = None, python_path: str | None = None
) -> None:
    """Refuse (SpecError) an entrypoint whose module is not on the job's path or lacks the function.
    The job's path: the folder it is submitted from (the job starts there), the job's env.PYTHONPATH
    (`python_path`), and this Python's own path."""
    module, _, function = entrypoint.partition(":")
    folder = str(cwd or Path.cwd())
    added = [p for p in (python_path or "").split(os.pathsep) if p]
    search = [folder, *added, *[p for p in sys.path if p]]
    spec = find_module(module, search)
    where = f"{origin}: train.entrypoint: {entrypoint}"
    if spec is None:
        also = f", env.PYTHONPATH ({os.pathsep.join(added)})" if added else ""
        raise SpecError(
            f"{where}: module {module} is not found on the job's Python path (searched {folder}, the "
            f"folder you submit from{also}, and this Python's path); submit from the folder that holds "
            f"it, or add that folder with env.PYTHONPATH (--set env.PYTHONPATH=DIR) (--no-check skips this)"
        )
    if not spec.origin or not spec.origin.endswith(".py") or not os.path.exists(spec.origin):
        return  # compiled or frozen: the function cannot be looked up without importing it
    try:
        tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))  # parsed once for both checks
        found = defines(tree, function)
    except (OSError, SyntaxError, UnicodeDecodeError) as err:
        raise SpecError(f"{where}: cannot read {spec.origin}: {err}") from None
    if found is False:
        raise SpecError(f"{where}: {spec.origin} defines no {function} (--no-check skips this)")
    missing = missing_imports(tree, search)
    if missing:
        extra = "pip install 'hpctrain[examples]'" if module.startswith("hpctrain.examples") else "install it"
        raise SpecError(
            f"{where}: {Path(spec.origin).name} imports {', '.join(missing)}, which the job's Python "
            f"cannot find: {extra} (--no-check skips this)"
        )


def check_paths(resolved: Resolved, origin: str) -> None:
    """The files the job and site name exist here: site.python, and train.options *_dir/*_path/... values."""
    python = resolved.site.python
    if python and not os.access(os.path.expanduser(python), os.X_OK):
        raise SpecError(f"{origin}: site.python: {python} is not an executable file on this host")
    options = resolved.job.train.options if resolved.job.train is not None else {}
    for key, value in options.items():
        if key.endswith(PATH_KEY_SUFFIXES) and isinstance(value, str) and not os.access(value, os.R_OK):
            raise SpecError(f"{origin}: train.options.{key}: {value} does not exist or is not readable")


# Options of the Python interpreter that take a value (`python -W error train.py`): the script comes after it.
PYTHON_VALUE_OPTIONS = frozenset({"-W", "-X", "-Q"})


def check_command(words: list[str], workdir: Path, origin: str) -> None:
    """Refuse (SpecError) a command whose program, or whose Python script or module, does not exist.
    Words with a sweep's `{placeholder}` are not checked: their value comes with each trial."""
    where = f"{origin}: command"
    program = words[0]
    if "{" in program:
        return
    if "/" in program:
        path = workdir / os.path.expanduser(program)
        if not os.access(path, os.X_OK) or path.is_dir():
            raise SpecError(
                f"{where}: {program} is not an executable file in {workdir} (--no-check skips this)"
            )
    elif shutil.which(program) is None:
        raise SpecError(f"{where}: {program} is not found on PATH (--no-check skips this)")
    if not Path(program).name.startswith("python"):
        return
    rest = iter(words[1:])
    for word in rest:
        if word in PYTHON_VALUE_OPTIONS:
            next(rest, None)
        elif word == "-m":
            module = next(rest, "")
            search = [str(workdir), *[p for p in sys.path if p]]
            if module and "{" not in module and find_module(module, search) is None:
                raise SpecError(
                    f"{where}: module {module} is not found in {workdir} nor on the job's Python path "
                    "(--no-check skips this)"
                )
            return
        elif word == "-c" or word == "-":
            return
        elif not word.startswith("-"):
            if "{" not in word and not (workdir / os.path.expanduser(word)).is_file():
                raise SpecError(f"{where}: script {word} does not exist in {workdir} (--no-check skips this)")
            return


def check_job(resolved: Resolved, origin: str) -> None:
    job = resolved.job
    if job.train is not None:
        python_path = job.env.get("PYTHONPATH")
        check_entrypoint(
            job.train.entrypoint, origin, python_path=None if python_path is None else str(python_path)
        )
    else:
        workdir = Path(job.workdir or ".")
        if not workdir.is_dir():
            raise SpecError(f"{origin}: workdir: {workdir} is not a folder")
        check_command(job.command_words, workdir, origin)
    check_paths(resolved, origin)
