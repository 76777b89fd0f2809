"""JobSpec and Site: the one typed, validated source of truth for a job and the cluster it runs on.

Both halves read these types: the login-node CLI validates YAML into them, and the runtime decodes
the resolved copy (``spec.json`` in the run directory) back into the same types. Field docs are
the help text (``hpctrain explain``) and the reference in docs/job-spec.md. The package is split by
concern: ``job`` (the job's structs), ``sweep`` (its sweep section), ``site`` (the cluster's),
``resolve`` (loading, overrides and the job-against-site checks), ``base`` (the base struct and the
value types both halves use) and ``docs`` (field documentation); this module is its one interface.

Imports stay light (msgspec, yaml): the CLI must start fast on a login node.
"""

from hpctrain.errors import SpecError
from hpctrain.spec.base import Base
from hpctrain.spec.docs import FieldDoc, field_docs
from hpctrain.spec.job import (
    SHORTHANDS,
    Code,
    Container,
    JobSpec,
    Parallel,
    ParameterServer,
    Preemption,
    Progress,
    Resources,
    Restart,
    Resume,
    Train,
    Watchdog,
)
from hpctrain.spec.resolve import (
    Resolved,
    apply_overrides,
    decode,
    dumps,
    load_job,
    load_site,
    loads,
    resolve,
    with_workdir,
)
from hpctrain.spec.site import Network, Partition, Site
from hpctrain.spec.slurm_values import NAME, memory_mb, time_minutes
from hpctrain.spec.sweep import EarlyStop, Sweep

__all__ = [
    "NAME",
    "SHORTHANDS",
    "Base",
    "Code",
    "Container",
    "EarlyStop",
    "FieldDoc",
    "JobSpec",
    "Network",
    "Parallel",
    "ParameterServer",
    "Partition",
    "Preemption",
    "Progress",
    "Resolved",
    "Resources",
    "Restart",
    "Resume",
    "Site",
    "SpecError",
    "Sweep",
    "Train",
    "Watchdog",
    "apply_overrides",
    "decode",
    "dumps",
    "field_docs",
    "load_job",
    "load_site",
    "loads",
    "memory_mb",
    "resolve",
    "time_minutes",
    "with_workdir",
]
