"""Render a resolved job into a batch script: the Jinja environment, its filters and the template context."""

from __future__ import annotations

import os
import re
import sys
from functools import cache
from pathlib import Path
from typing import Any

from hpctrain import __version__
from hpctrain.errors import RenderError
from hpctrain.rundir import BATCH_LOG, SLURM_ARRAY_BATCH_LOG, template_files
from hpctrain.spec import Resolved, memory_mb, time_minutes

TEMPLATES = Path(__file__).resolve().parent.parent / "templates"
SAFE_PATH = re.compile(r"^[A-Za-z0-9_./+@%=:\-]+$")


def template_dir() -> Path:
    return Path(os.environ.get("HPCTRAIN_TEMPLATES", TEMPLATES))


def _bytecode_cache() -> Any:
    """Compiled templates cached on disk: compiling them again is most of a render's cost."""
    import jinja2

    folder = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "hpctrain" / "jinja"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return jinja2.FileSystemBytecodeCache(str(folder))


@cache
def environment(folder: str) -> Any:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(folder),
        bytecode_cache=_bytecode_cache(),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    env.filters["q"] = shell_quote
    return env


def shell_quote(value: object) -> str:
    """Always single-quote: shlex leaves words like `=mlx5_0:1` bare, which bash then misreads."""
    return "'" + str(value).replace("'", "'\"'\"'") + "'"


def slurm_directive_path(path: Path) -> str:
    """A path that may stand in an #SBATCH line, where sbatch (not a shell) parses it."""
    text = str(path)
    if not SAFE_PATH.match(text):
        raise RenderError(
            f"run directory {text!r} has characters that #SBATCH lines cannot carry; "
            "set HPCTRAIN_HOME to a plain path"
        )
    return text


def _env_items(mapping: dict[str, Any]) -> list[tuple[str, str]]:
    def text(value: Any) -> str:
        if isinstance(value, bool):
            return "1" if value else "0"
        return str(value)

    return [(key, text(value)) for key, value in mapping.items()]


def batch_log_name(array: bool, array_offset: int = 0) -> str:
    """The batch log's file name (Slurm pattern): `%a` restarts at 0 in each array of a chunked sweep,
    so an array with an offset names its logs `batch-%a+OFFSET.log`."""
    if not array:
        return BATCH_LOG
    if not array_offset:
        return SLURM_ARRAY_BATCH_LOG
    stem, _, suffix = SLURM_ARRAY_BATCH_LOG.rpartition(".")
    return f"{stem}+{array_offset}.{suffix}"


def context(
    resolved: Resolved, run_dir: Path, python: str | None = None, array_offset: int = 0
) -> dict[str, Any]:
    """Everything a template may use; computed here so templates stay free of logic.

    `array_offset` is added to each array index: a sweep above MaxArraySize is several arrays.
    """
    job, site = resolved.job, resolved.site
    res = job.resources
    part = site.partitions[resolved.partition]
    gpus = res.gpus_per_node
    gres = None
    if gpus:
        gres = f"{site.gres_name}:{part.gpu_type}:{gpus}" if part.gpu_type else f"{site.gres_name}:{gpus}"
    tasks_per_node = res.ntasks_per_node
    environment_vars = dict(site.env)
    if gpus:
        environment_vars.update(site.network.nccl_env)
        environment_vars.update(site.network.ucx_env)
    if site.network.gloo_socket_ifname:
        environment_vars["GLOO_SOCKET_IFNAME"] = site.network.gloo_socket_ifname
    environment_vars.update(job.env)
    ps = resolved.parallel.ps
    heterogeneous = ps is not None and ps.heterogeneous
    mem_mb = memory_mb(res.mem) if res.mem else None
    ps_mem_mb = memory_mb(ps.mem) if ps and ps.mem else None
    if heterogeneous:
        # srun refuses a step whose components mix --mem with the per-CPU default.
        mem_mb, ps_mem_mb = mem_mb or ps_mem_mb, ps_mem_mb or mem_mb
    return {
        "version": __version__,
        "job": job,
        "site": site,
        "resources": res,
        "partition": resolved.partition,
        "world_size": resolved.world_size,
        "tasks_per_node": tasks_per_node,
        "gres": gres,
        "mem_mb": mem_mb,
        "time_minutes": time_minutes(res.time),
        "run_dir": slurm_directive_path(run_dir),
        "python": python or site.python or sys.executable,
        "env": _env_items(environment_vars),
        "setup": [*site.setup, *job.setup],
        "preemption": resolved.preemption,
        "launcher": job.launcher,
        "mpi": site.mpi,
        "ps": ps,
        "heterogeneous": heterogeneous,
        "ps_partition": (ps.partition or resolved.partition) if ps else None,
        "ps_mem_mb": ps_mem_mb,
        "array": job.array,
        "array_offset": array_offset,
        "batch_log": batch_log_name(bool(job.array), array_offset),
        "early_stop": bool(job.array and job.sweep and job.sweep.early_stop),
        "dependency": job.dependency,
        "files": template_files(),
    }


def render(
    resolved: Resolved,
    run_dir: Path,
    python: str | None = None,
    template: str = "sbatch.sh.j2",
    array_offset: int = 0,
) -> str:
    """The batch script for `resolved`, whose outputs go to `run_dir`."""
    import jinja2

    try:
        tmpl = environment(str(template_dir())).get_template(template)
    except jinja2.TemplateNotFound as err:
        raise RenderError(f"template {err.name} not found in {template_dir()}") from None
    return tmpl.render(**context(resolved, run_dir, python, array_offset))
