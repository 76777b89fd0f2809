"""The job arguments that `render`, `submit` and `sweep` share: spec, site, overrides, backend, checks."""

from __future__ import annotations

import argparse

from hpctrain.scheduler import NAMES as BACKEND_NAMES


def add_job_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job", help="Job spec (YAML), e.g. jobs/digits-ddp.yaml.")
    parser.add_argument("--site", required=True, help="Site profile: a path, or a name in site-configs/.")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="Override a spec field, e.g. --set train.steps=500 (repeatable).",
    )
    parser.add_argument(
        "--backend",
        choices=BACKEND_NAMES,
        default=None,
        help="Scheduler backend (default: $HPCTRAIN_BACKEND or auto).",
    )
    parser.add_argument(
        "--no-check",
        dest="check",
        action="store_false",
        help="Skip the entrypoint and path checks (module found, function defined, files readable).",
    )
