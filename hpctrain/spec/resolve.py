"""Loading job and site files, --set overrides, and resolve(): a job checked against a site."""

from pathlib import Path
from typing import Any

import msgspec

from hpctrain.errors import SpecError
from hpctrain.spec.base import Base
from hpctrain.spec.job import (
    SHORTHANDS,
    SLURM_TASK_LAUNCHERS,
    JobSpec,
    Parallel,
    ParameterServer,
    Preemption,
    Resources,
)
from hpctrain.spec.layout import LayoutError
from hpctrain.spec.site import Partition, Site
from hpctrain.spec.slurm_values import memory_mb, time_minutes

# ----------------------------------------------------------------------------------------------
# Loading, overrides, cross-checks
# ----------------------------------------------------------------------------------------------


class Resolved(Base):
    """A job spec checked against a site: what gets recorded in the run directory as spec.json."""

    job: JobSpec
    site: Site
    partition: str
    world_size: int
    parallel: Parallel

    @property
    def preemption(self) -> Preemption:
        """The job's preemption settings, else the site's, else the defaults."""
        return self.job.preemption or self.site.preemption or Preemption()


def _read_yaml(path: Path) -> Any:
    from hpctrain.spec import yaml_reader as spec_yaml

    return spec_yaml.load(spec_yaml.read_text(path), str(path))


def _override_path(key: str, item: str) -> list[str]:
    parts = key.split(".")
    if not all(parts):
        raise SpecError(f"--set {item!r}: expected dotted.key=value")
    return parts


def apply_overrides(data: dict[str, Any], overrides: list[str], origin: str) -> dict[str, Any]:
    """Apply `dotted.key=value` overrides (values parsed as YAML scalars) to raw spec data."""
    from hpctrain.spec import yaml_reader as spec_yaml

    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise SpecError(f"--set {item!r}: expected dotted.key=value")
        parts = _override_path(key, item)
        node = data
        for depth, part in enumerate(parts[:-1]):
            child = node.get(part)
            if isinstance(child, str) and part == "parallel":
                if child not in SHORTHANDS:
                    where = ".".join(parts[: depth + 1])
                    raise SpecError(
                        f"{origin}: {where}: {child!r} is not one of {', '.join(SHORTHANDS)}, so "
                        f"--set {key} has nothing to change"
                    )
                child = {"dp": 1} if child != "ddp" else {}
                child.update(msgspec.to_builtins(SHORTHANDS[node[part]]))
            if child is None:
                child = {}
            if not isinstance(child, dict):
                raise SpecError(f"--set {key}: {part} is not a section in {origin}")
            node[part] = child
            node = child
        node[parts[-1]] = _override_value(raw, key, tuple(parts[:-1]) in spec_yaml.LITERAL_MAPS)
    return data


def _override_value(raw: str, key: str, literal: bool) -> Any:
    """A --set value as YAML reads it; env values keep their text (`--set env.X=0755` is "0755")."""
    from hpctrain.spec import yaml_reader as spec_yaml

    if literal and not raw:
        return ""
    try:
        return spec_yaml.load(raw, f"--set {key}", {()} if literal else ())
    except SpecError as err:
        if "invalid YAML" in str(err):
            return raw
        raise


def decode(kind: type[msgspec.Struct], data: Any, origin: str) -> Any:
    """`data` as a `kind` struct; every problem is a one-line SpecError naming the file and the field."""
    from hpctrain.spec import yaml_reader as spec_yaml

    spec_yaml.check_values(data, (), origin)
    try:
        return msgspec.convert(data, kind, strict=False)
    except msgspec.ValidationError as err:
        from hpctrain.spec import messages  # difflib and the error walk: only for bad input

        path, problem = messages.describe(kind, data, str(err))
        where = f" {path}:" if path else ""
        raise SpecError(f"{origin}:{where} {problem}") from None


def load_job(path: str | Path, overrides: list[str] | None = None) -> JobSpec:
    path = Path(path)
    data = _read_yaml(path)
    if not isinstance(data, dict):
        raise SpecError(f"{path}: expected a mapping at the top level")
    data = apply_overrides(data, overrides or [], str(path))
    return decode(JobSpec, data, str(path))


def load_site(path: str | Path) -> Site:
    """A site profile from its file; `hpctrain.site.lookup.locate` turns a `--site NAME` into that file."""
    if not str(path).strip():
        raise SpecError("--site: empty; give a site name (e.g. local) or a path")
    path = Path(path)
    data = _read_yaml(path)
    if not isinstance(data, dict):
        raise SpecError(f"{path}: expected a mapping at the top level")
    return decode(Site, data, str(path))


def resolve(job: JobSpec, site: Site, job_origin: str = "job", site_origin: str = "site") -> Resolved:
    """Check that `site` can run `job`; every refusal names the field and both files' facts."""
    res = job.resources
    try:
        part_name, part = site.partition(res.partition)
    except KeyError:
        raise SpecError(
            f"{job_origin}: resources.partition: {res.partition!r} is not a partition of site "
            f"{site.name} ({', '.join(site.partitions)})"
        ) from None
    where = f"partition {part_name} of site {site.name}"
    if res.gpus_per_node > part.gpus_per_node:
        raise SpecError(
            f"{job_origin}: resources.gpus_per_node: {res.gpus_per_node} GPUs per node asked, "
            f"{where} has {part.gpus_per_node}"
        )
    if res.nodes > (part.max_nodes or part.nodes):
        raise SpecError(
            f"{job_origin}: resources.nodes: {res.nodes} nodes asked, {where} allows "
            f"{part.max_nodes or part.nodes}"
        )
    if time_minutes(res.time) > time_minutes(part.max_time):
        raise SpecError(
            f"{job_origin}: resources.time: {res.time} is over the {part.max_time} limit of {where}"
        )
    cpus = res.ntasks_per_node * res.cpus_per_task
    if cpus > part.cpus_per_node:
        raise SpecError(
            f"{job_origin}: resources.cpus_per_task: {res.ntasks_per_node} tasks x "
            f"{res.cpus_per_task} CPUs = {cpus} per node, {where} has {part.cpus_per_node}"
        )
    if res.mem is not None and memory_mb(res.mem) > memory_mb(part.mem_per_node):
        raise SpecError(
            f"{job_origin}: resources.mem: {res.mem} per node asked, {where} has {part.mem_per_node}"
        )
    _check_nodes_and_gpus(res, part, where, job_origin)
    runtime = job.container.runtime
    if runtime != "none" and runtime not in site.container_runtimes:
        raise SpecError(
            f"{job_origin}: container.runtime: site {site.name} has no {runtime} "
            f"(its container_runtimes: {', '.join(site.container_runtimes) or 'none'}; see hpctrain doctor)"
        )
    if (
        res.gpus_per_node
        and res.tasks_per_node not in (None, res.gpus_per_node)
        and job.launcher in SLURM_TASK_LAUNCHERS
    ):
        raise SpecError(
            f"{job_origin}: resources.tasks_per_node: the {job.launcher} launcher runs one rank per GPU "
            f"({res.gpus_per_node}), got {res.tasks_per_node}"
        )
    world_size = res.nodes * res.ntasks_per_node
    if job.train is None:  # a command: its own layout, which hpctrain sees as one data-parallel world
        if job.launcher in ("fork", "mpi"):
            raise SpecError(
                f"{job_origin}: launcher: {job.launcher} runs hpctrain's runtime; a command runs with srun or"
                " torchrun"
            )
        degrees = Parallel().layout(world_size, res.ntasks_per_node).degrees
        return Resolved(
            job=job, site=site, partition=part_name, world_size=world_size, parallel=Parallel(**degrees)
        )
    dims = job.train.parallel_dims
    if dims.ps is not None:
        ps = dims.ps
        if job.launcher == "fork":
            # A parameter-server job goes on when a worker dies; a forked node ends with its first rank.
            raise SpecError(
                f"{job_origin}: launcher: fork does not run parameter-server jobs (train.parallel.ps); "
                "use srun"
            )
        if ps.heterogeneous and not site.heterogeneous_jobs:
            raise SpecError(
                f"{job_origin}: train.parallel.ps.heterogeneous: site {site.name} does not allow "
                "heterogeneous jobs; set it to false"
            )
        if ps.partition is not None and ps.partition not in site.partitions:
            raise SpecError(
                f"{job_origin}: train.parallel.ps.partition: {ps.partition!r} is not a partition of "
                f"site {site.name}"
            )
        if not ps.heterogeneous and ps.servers >= world_size:
            raise SpecError(
                f"{job_origin}: train.parallel.ps.servers: {ps.servers} servers leave no worker "
                f"among {world_size} tasks"
            )
        _check_servers(ps, site, ps.partition or part_name, job_origin)
        parallel = dims
    else:
        try:
            layout = dims.layout(world_size, res.ntasks_per_node)
            layout.check_batch(job.train.batch_size, job.train.grad_accum)
        except LayoutError as err:
            where = {"batch_size": "train.batch_size", "": "train.parallel"}.get(
                err.field, f"train.parallel.{err.field}"
            )
            raise SpecError(f"{job_origin}: {where}: {err.problem}") from None
        parallel = msgspec.structs.replace(dims, **layout.degrees)
    return Resolved(job=job, site=site, partition=part_name, world_size=world_size, parallel=parallel)


def _check_nodes_and_gpus(res: Resources, part: Partition, where: str, job_origin: str) -> None:
    """Typed GPUs and named nodes must exist in the partition the job runs in."""
    if res.gpu_type is not None and res.gpu_type != part.gpu_type:
        has = f"has {part.gpu_type} GPUs" if part.gpu_type else "lists no GPU type"
        raise SpecError(f"{job_origin}: resources.gpu_type: {res.gpu_type!r} asked, {where} {has}")
    if res.gpu_type is not None and not res.gpus_per_node:
        raise SpecError(f"{job_origin}: resources.gpu_type: set, but gpus_per_node is 0")
    if part.node_names is None:
        return
    for field in ("exclude", "nodelist"):
        unknown = [n for n in getattr(res, field) if n not in part.node_names]
        if unknown:
            raise SpecError(
                f"{job_origin}: resources.{field}: {', '.join(unknown)} not in {where} "
                f"({', '.join(part.node_names)})"
            )
    left = len(set(part.node_names) - set(res.exclude))
    if res.nodes > left:
        raise SpecError(
            f"{job_origin}: resources.exclude: {res.nodes} nodes asked, {left} left in {where} "
            "after the exclusions"
        )


def _check_servers(ps: ParameterServer, site: Site, part_name: str, job_origin: str) -> None:
    """The parameter servers' own request (their hetjob component) must fit their partition."""
    part = site.partitions[part_name]
    where = f"partition {part_name} of site {site.name}"

    def refuse(field: str, problem: str) -> SpecError:
        return SpecError(f"{job_origin}: train.parallel.ps.{field}: {problem}")

    if ps.mem is not None and memory_mb(ps.mem) > memory_mb(part.mem_per_node):
        raise refuse("mem", f"{ps.mem} per node asked, {where} has {part.mem_per_node}")
    if ps.cpus_per_server > part.cpus_per_node:
        raise refuse("cpus_per_server", f"{ps.cpus_per_server} CPUs asked, {where} has {part.cpus_per_node}")
    if not ps.heterogeneous:
        return
    if ps.nodes > (part.max_nodes or part.nodes):
        raise refuse("nodes", f"{ps.nodes} nodes asked, {where} allows {part.max_nodes or part.nodes}")
    if ps.nodes > ps.servers:
        raise refuse("nodes", f"{ps.nodes} nodes for {ps.servers} servers would leave a node empty")
    per_node = -(-ps.servers // ps.nodes)
    if per_node * ps.cpus_per_server > part.cpus_per_node:
        raise refuse(
            "cpus_per_server",
            f"{per_node} servers x {ps.cpus_per_server} CPUs = {per_node * ps.cpus_per_server} per node, "
            f"{where} has {part.cpus_per_node}",
        )


def dumps(resolved: Resolved) -> bytes:
    return msgspec.json.format(msgspec.json.encode(resolved), indent=2)


def loads(data: bytes | str) -> Resolved:
    """A recorded spec.json, as written by this version or an earlier one."""
    from hpctrain.spec.slurm_values import RECORDED

    token = RECORDED.set(True)
    try:
        return msgspec.json.decode(data, type=Resolved)
    finally:
        RECORDED.reset(token)
