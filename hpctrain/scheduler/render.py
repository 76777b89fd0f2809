"""Render a resolved job into a batch script: the Jinja environment, its filters and the template context."""

from __future__ import annotations

import os
import re
import sys
from functools import cache
from pathlib import Path
from typing import Any

import msgspec

from hpctrain.errors import RenderError
from hpctrain.rundir.names import BATCH_LOG, LOGS, SLURM_ARRAY_BATCH_LOG, SLURM_PREFLIGHT_LOG, template_files
from hpctrain.scheduler.job_comment import carrying_comment
from hpctrain.scheduler.rank_program import rank_program
from hpctrain.spec import Container, Resolved, Site
from hpctrain.spec.job import SLURM_TASK_LAUNCHERS
from hpctrain.spec.resources import data_folder
from hpctrain.spec.slurm_values import memory_mb, signal_name, standby_go_signal
from hpctrain.version import __version__

TEMPLATES = data_folder("templates")
# No `%`: Slurm expands `%j`, `%x`... in --output/--error, so the logs would land somewhere else.
SAFE_PATH = re.compile(r"^[A-Za-z0-9_./+@=:\-]+$")
MOUNT_SEPARATORS = (":", ",")
"""What splits a pyxis --container-mounts list or an apptainer --bind: a mounted path cannot hold them."""


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
    env.filters["q_path"] = shell_quote_path
    return env


def shell_quote(value: object) -> str:
    """Always single-quote: shlex leaves words like `=mlx5_0:1` bare, which bash then misreads."""
    return "'" + str(value).replace("'", "'\"'\"'") + "'"


def shell_quote_path(value: object) -> str:
    """A path quoted as any value, but for a leading `~` or `~/`, which the shell expands only unquoted
    (SC2088): it becomes `"$HOME"`, so `python: ~/venv/bin/python` is found in the job's home."""
    text = str(value)
    if text == "~":
        return '"$HOME"'
    if text.startswith("~/"):
        return '"$HOME"/' + shell_quote(text[2:])
    return shell_quote(text)


def slurm_directive_path(path: Path) -> str:
    """A path that may stand in an #SBATCH line, where sbatch (not a shell) parses it."""
    text = str(path)
    if not SAFE_PATH.match(text):
        raise RenderError(
            f"run directory {text!r} has characters that #SBATCH lines cannot carry; "
            "set HPCTRAIN_HOME to a plain path"
        )
    return text


def env_items(mapping: dict[str, Any]) -> list[tuple[str, str]]:
    """(name, text) of each environment variable, as the script exports it (a boolean is 1 or 0)."""

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


class Directive(msgspec.Struct, frozen=True, array_like=True):
    """One batch option: `--option=value`, or the flag `--option` when value is None.

    Values come from validated spec fields only (no newline, no quote, no `#`), so sbatch, which
    reads #SBATCH lines itself, takes each one as written.
    """

    option: str
    value: str | None = None

    @property
    def text(self) -> str:
        if self.value is None:
            return f"--{self.option}"
        value = f'"{self.value}"' if " " in self.value else self.value
        return f"--{self.option}={value}"


BatchOptions = list[list[Directive]]
"""Batch options per hetjob component (one component unless parameter servers run beside the workers);
the first component also carries the options of the whole job."""


def expedited(resolved: Resolved) -> bool:
    """Whether the job asks for --requeue=expedite (site.expedited_requeue): requeued, and not
    pinned to nodes (an expediting job's pin to a lost node could not be dropped)."""
    job = resolved.job
    return resolved.preemption.requeue and resolved.site.expedited_requeue and not job.resources.nodelist


def batch_options(resolved: Resolved, run_dir: Path, array_offset: int = 0) -> BatchOptions:
    """What the job asks of Slurm, as data: the template prints it, backends submit it."""
    job, site = resolved.job, resolved.site
    res = job.resources
    part = site.partitions[resolved.partition]
    preemption = resolved.preemption

    def some(**options: object) -> list[Directive]:
        """Directives for the options that are set; True is a flag, None/False/empty is left out."""
        out = []
        for name, value in options.items():
            if value is None or value is False or value == [] or value == "":
                continue
            option = name.rstrip("_").replace("_", "-")
            out.append(Directive(option, None if value is True else str(value)))
        return out

    whole_job = some(
        job_name=job.name,
        output=f"{slurm_directive_path(run_dir)}/{LOGS}/{batch_log_name(bool(job.array), array_offset)}",
        open_mode="append",
        time=res.time,
        signal=f"B:{preemption.signal}@{preemption.lead_time}",
        requeue="expedite" if expedited(resolved) else preemption.requeue,
        no_requeue=not preemption.requeue,
        # A lost node that does not run the batch script must not end the job: the supervisor
        # restarts the training step on the nodes left (Slurm drops the dead one at SlurmdTimeout).
        no_kill=job.restart.max > 0,
        account=res.account,
        qos=res.qos,
        array=job.array,
        dependency=job.dependency,
        reservation=res.reservation,
        licenses=res.licenses,
        begin=job.begin,
        comment=carrying_comment(run_dir.name, job.comment),
        mail_type=",".join(job.mail_type),
        mail_user=job.mail_user,
    )
    ps = resolved.parallel.ps
    mem_mb = memory_mb(res.mem) if res.mem else None
    exclude = ",".join(res.exclude)
    components: BatchOptions = []
    if ps is not None and ps.heterogeneous:
        ps_mem_mb = memory_mb(ps.mem) if ps.mem else None
        # srun refuses a step whose components mix --mem with the per-CPU default.
        mem_mb, ps_mem_mb = mem_mb or ps_mem_mb, ps_mem_mb or mem_mb
        components.append(
            some(
                partition=ps.partition or resolved.partition,
                nodes=ps.nodes,
                ntasks=ps.servers,
                cpus_per_task=ps.cpus_per_server,
                mem=f"{ps_mem_mb}M" if ps_mem_mb else None,
                exclude=exclude,
            )
        )
    torchrun = job.launcher == "torchrun"
    gpus = res.gpus_per_node
    gpu_type = res.gpu_type or part.gpu_type
    heterogeneous = ps is not None and ps.heterogeneous
    workers = some(
        partition=resolved.partition,
        nodes=res.nodes,
        ntasks_per_node=1 if torchrun else res.ntasks_per_node,
        # Slurm 24.11 and 26.05 start one task per node of a hetjob component that asks only for
        # --ntasks-per-node in `srun --het-group=0,1` (22.05 started them all): spell the count out.
        ntasks=res.nodes * res.ntasks_per_node if heterogeneous and not torchrun else None,
        cpus_per_task=res.cpus_per_task * (res.ntasks_per_node if torchrun else 1),
        gres=(f"{site.gres_name}:{gpu_type}:{gpus}" if gpu_type else f"{site.gres_name}:{gpus}")
        if gpus
        else None,
        mem=f"{mem_mb}M" if mem_mb else None,
        constraint=res.constraint,
        exclusive=res.exclusive,
        exclude=exclude,
        nodelist=",".join(res.nodelist),
    )
    workers += [Directive(name, None if value is True else str(value)) for name, value in job.sbatch.items()]
    components.append(workers)
    components[0] = whole_job + components[0]
    return components


class ContainerLaunch(msgspec.Struct, frozen=True):
    """What the batch script itself says of the job's container: its runtime and the lines it
    exports before the supervisor starts (the steps' container words: scheduler.slurm.steps)."""

    runtime: str
    exports: tuple[str, ...] = ()


def mountable(run_dir: str | Path, container: Container) -> str:
    """`run_dir` as the container's mount of it, refused (one line) where the mount would split it."""
    text = str(run_dir)
    if container.enabled and container.runtime != "oci" and any(s in text for s in MOUNT_SEPARATORS):
        option = "--container-mounts" if container.runtime == "pyxis" else "apptainer --bind"
        raise RenderError(
            f"run directory {text!r} has a ':' or ',', which split a container mount ({option}); "
            "set HPCTRAIN_HOME to a path without them"
        )
    return text


def container_launch(container: Container) -> ContainerLaunch:
    """The container lines of the batch script (docs/containers.md)."""
    if not container.enabled:
        return ContainerLaunch("none")
    # APPTAINERENV_NAME sets NAME inside the container over the image's own value, whatever it holds
    # (apptainer's --env splits its list on commas).
    exports: tuple[str, ...] = ()
    if container.runtime == "apptainer":
        exports = tuple(f'export APPTAINERENV_{name}="${{{name}-}}"' for name in container.env)
    return ContainerLaunch(container.runtime, exports=exports)


def context(
    resolved: Resolved, run_dir: Path, python: str | None = None, array_offset: int = 0
) -> dict[str, Any]:
    """Everything a template may use; computed here so templates stay free of logic.

    `array_offset` is added to each array index: a sweep above MaxArraySize is several arrays.
    """
    job, site = resolved.job, resolved.site
    environment_vars = dict(site.env)
    if job.resources.gpus_per_node:
        environment_vars.update(site.network.nccl_env)
        environment_vars.update(site.network.ucx_env)
    if site.network.gloo_socket_ifname:
        environment_vars["GLOO_SOCKET_IFNAME"] = site.network.gloo_socket_ifname
    environment_vars.update(job.env)
    ps = resolved.parallel.ps
    heterogeneous = ps is not None and ps.heterogeneous
    # Preflight defaults to on where a bad node costs most: multi-node GPU jobs (not PS hetjobs).
    preflight = job.preflight
    if preflight is None:
        preflight = job.resources.nodes > 1 and job.resources.gpus_per_node > 0
    # What each rank runs: the runtime (a Task), or the wrapper of the user's command (no preflight:
    # preflight hands over to the runtime in the same process).
    command = job.command is not None
    preflight = preflight and not command
    mountable(slurm_directive_path(run_dir), job.container)  # `render` refuses what submit would
    return {
        "version": __version__,
        "job": job,
        "site": site,
        "resources": job.resources,
        "batch": batch_options(resolved, run_dir, array_offset),
        "world_size": resolved.world_size,
        "tasks_per_node": job.resources.ntasks_per_node,
        "fork_cpus_per_task": job.resources.ntasks_per_node * job.resources.cpus_per_task,
        "run_dir": slurm_directive_path(run_dir),
        "python": python or job.python or site.python or sys.executable,
        "env": env_items(environment_vars),
        "setup": [*site.setup, *job.setup],
        "preemption": resolved.preemption,
        "signal": signal_name(resolved.preemption.signal),
        "launcher": job.launcher,
        "mpi": site.mpi,
        "ps": ps,
        "heterogeneous": heterogeneous,
        "array": job.array,
        "array_offset": array_offset,
        "early_stop": bool(job.array and job.sweep and job.sweep.early_stop),
        "files": template_files(),
        "preflight": preflight and not heterogeneous,
        "rank_program": rank_program(resolved, preflight=False),
        # Parameter-server steps too: the watchdog gives up on a lost worker alone (supervisor/components.py).
        "watchdog": job.watchdog.enabled,
        # Only where a restart relaunches the same srun step: supervised, no torchrun or MPI world.
        "standby": job.restart.warm_standby
        and job.restart.max > 0
        and job.launcher in SLURM_TASK_LAUNCHERS
        and ps is None
        and not command,
        "standby_signal": standby_go_signal(resolved.preemption.signal),
        "expedited_requeue": expedited(resolved),
        "container": container_launch(job.container),
    }


def render(
    resolved: Resolved,
    run_dir: Path,
    python: str | None = None,
    template: str = "sbatch.sh.j2",
    array_offset: int = 0,
) -> str:
    """The batch script for `resolved`, whose outputs go to `run_dir`."""
    return _render_template(template, context(resolved, run_dir, python, array_offset))


def _render_template(template: str, values: dict[str, Any]) -> str:
    import jinja2

    try:
        tmpl = environment(str(template_dir())).get_template(template)
    except jinja2.TemplateNotFound as err:
        raise RenderError(f"template {err.name} not found in {template_dir()}") from None
    return tmpl.render(**values)


class DoctorJob(msgspec.Struct, frozen=True):
    """`hpctrain doctor`'s preflight job: one task on each of `nodes` (of `partition`) runs
    hpctrain.runtime.preflight, where a node `tolerance` under the median fails."""

    site: Site
    partition: str
    nodes: list[str]
    gpus: int
    """GPUs per node to ask for: what the nodes have, even where the profile claims more (the job must
    run to check them)."""
    tolerance: float
    name: str = "hpctrain-doctor"
    time: str = "5"


def doctor_options(job: DoctorJob, run_dir: Path) -> BatchOptions:
    """The doctor's job's batch options, as data (the template prints them, backends submit them)."""
    options = [
        Directive("job-name", job.name),
        Directive("output", f"{slurm_directive_path(run_dir)}/{LOGS}/{BATCH_LOG}"),
        Directive("partition", job.partition),
        Directive("nodes", str(len(job.nodes))),
        Directive("nodelist", ",".join(job.nodes)),
        Directive("ntasks-per-node", "1"),
        Directive("time", job.time),
        Directive("comment", carrying_comment(run_dir.name, None)),
    ]
    if job.gpus:
        options.append(Directive("gres", f"{job.site.gres_name}:{job.gpus}"))
    return [options]


def render_doctor(job: DoctorJob, run_dir: Path) -> str:
    """The doctor's preflight job script (templates/doctor.sh.j2), whose outputs go to `run_dir`."""
    site = job.site
    env = dict(site.env)
    if site.network.gloo_socket_ifname:
        env["GLOO_SOCKET_IFNAME"] = site.network.gloo_socket_ifname
    folder = slurm_directive_path(run_dir)
    return _render_template(
        "doctor.sh.j2",
        {
            "version": __version__,
            "site": site,
            "batch": doctor_options(job, run_dir),
            "setup": list(site.setup),
            "env": env_items(env),
            "python": site.python or sys.executable,
            "run_dir": folder,
            "step_log": f"{folder}/{LOGS}/{SLURM_PREFLIGHT_LOG}",
            "tolerance": job.tolerance,
        },
    )
