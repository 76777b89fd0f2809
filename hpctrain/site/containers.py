"""Which container runtimes a cluster has: pyxis in srun's options, Slurm's oci.conf, apptainer on PATH.

Read on the login node, as `init-site` and `doctor` see the cluster: pyxis (a SPANK plugin) adds
`--container-image` to `srun --help`; Slurm's own OCI support needs an oci.conf beside slurm.conf;
Apptainer (or Singularity, its former name) is a program on PATH. Compute nodes are assumed to be
set up like the login node; the batch script's container check confirms it on every node.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from hpctrain.scheduler.slurm.facts import ClusterFacts
from hpctrain.scheduler.slurm.probes import step_options_help
from hpctrain.spec.job import CONTAINER_RUNTIMES

DEFAULT_SLURM_CONF = "/etc/slurm/slurm.conf"


def pyxis_evidence(srun_help: str) -> str | None:
    return "srun's options include --container-image" if "--container-image" in srun_help else None


def oci_evidence(slurm_conf: str) -> str | None:
    oci_conf = Path(slurm_conf).parent / "oci.conf"
    return f"{oci_conf} exists" if oci_conf.is_file() else None


def apptainer_evidence() -> str | None:
    for program in ("apptainer", "singularity"):
        found = shutil.which(program)
        if found:
            return f"{found} on PATH"
    return None


def detect(facts: ClusterFacts, timeout: float = 30) -> dict[str, str]:
    """{runtime: what showed it} for every runtime found, in CONTAINER_RUNTIMES order."""
    found = {
        "pyxis": pyxis_evidence(step_options_help(timeout)),
        "oci": oci_evidence(facts.config.get("SLURM_CONF") or DEFAULT_SLURM_CONF),
        "apptainer": apptainer_evidence(),
    }
    return {runtime: found[runtime] for runtime in CONTAINER_RUNTIMES if found[runtime]}
