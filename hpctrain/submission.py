"""Submit = prepare (a dry-run request: resolved spec + rendered script) then schedule it on a backend."""

from __future__ import annotations

import json
import time
from pathlib import Path

import msgspec

from hpctrain import sites, spec
from hpctrain.backends import select_backend
from hpctrain.backends.base import BackendError, JobState
from hpctrain.entry_check import check_job
from hpctrain.records import SUBMIT_FAILED, Index, Run
from hpctrain.render import render, slurm_directive_path
from hpctrain.resources import job_file


def site_search_path() -> list[Path]:
    """Where `--site NAME` is looked up: the folders of hpctrain.sites.search_path, in order."""
    return [folder for _, folder in sites.search_path()]


class Request(msgspec.Struct):
    """What would be submitted: everything is known and checked before the scheduler is asked."""

    resolved: spec.Resolved
    script: str


def prepare(
    job_path: str | Path,
    site: str,
    overrides: list[str] | None = None,
    backend_name: str | None = None,
    check: bool = True,
) -> Request:
    """Load, override, validate and render; raises SpecError / RenderError with one-line messages."""
    resolved = load_and_resolve(job_path, site, overrides, check)
    # A dry run has no run directory yet: the script shows where it would be.
    return Request(resolved, render(resolved, Path("/RUN_DIR"), template=template_for(backend_name)))


def load_and_resolve(
    job_path: str | Path, site: str, overrides: list[str] | None, check: bool = True
) -> spec.Resolved:
    job = spec.load_job(job_file(job_path), overrides)
    site_profile = spec.load_site(sites.locate(site))
    resolved = spec.resolve(job, site_profile, str(job_path), str(site))
    if check:
        check_job(resolved, str(job_path))
    return resolved


def template_for(backend_name: str | None) -> str:
    return "local.sh.j2" if backend_name == "local" else "sbatch.sh.j2"


class Submitted(msgspec.Struct):
    run: Run
    error: str | None = None


def submit(
    job_path: str | Path,
    site: str,
    overrides: list[str] | None = None,
    backend_name: str | None = None,
    index: Index | None = None,
    check: bool = True,
) -> Submitted:
    """Record, render and submit. The run directory keeps script and spec even if the scheduler refuses."""
    index = index or Index()
    backend = select_backend(backend_name)
    # Validate before creating anything: a bad spec or an unusable home leaves no half-made run behind.
    resolved = load_and_resolve(job_path, site, overrides, check)
    slurm_directive_path(index.root / "runs")
    run_id, run_dir = index.new_run_dir(resolved.job.name)
    script = render(resolved, run_dir, template=template_for(backend.name))
    (run_dir / "spec.json").write_bytes(spec.dumps(resolved))
    script_path = run_dir / "job.sbatch"
    script_path.write_text(script)
    submitted_with = {
        "job": str(Path(job_path).resolve()),
        "site": site,
        "overrides": overrides or [],
        "backend": backend.name,
        "cwd": str(Path.cwd()),
    }
    (run_dir / "submit.json").write_text(json.dumps(submitted_with, indent=2) + "\n")
    now = time.time()
    run = Run(
        run_id,
        None,
        resolved.job.name,
        resolved.site.name,
        backend.name,
        run_dir,
        now,
        JobState.PENDING.value,
        now,
    )
    try:
        run.job_id = backend.submit(script_path, run_dir)
    except BackendError as err:
        run.state, run.reason = SUBMIT_FAILED, str(err)
        index.add(run)
        return Submitted(run, str(err))
    index.add(run)
    return Submitted(run)
