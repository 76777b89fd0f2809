"""`hpctrain examples`: the example job specs shipped with hpctrain; submit one by name or copy it."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "name", nargs="?", help="Print this example's YAML (e.g. digits-ddp), or a Python example's source."
    )
    parser.add_argument("--copy", metavar="DIR", help="Copy the example(s) into DIR to edit them.")
    parser.add_argument(
        "--force", action="store_true", help="With --copy: overwrite files in DIR that you have edited."
    )


def run(args: argparse.Namespace) -> int:
    from hpctrain import api

    examples = api.example_jobs()
    scripts = api.example_scripts()
    if args.name in scripts:  # a Python script (a function job, a pipeline), not a job spec
        chosen = {args.name: scripts[args.name]}
    else:
        chosen = {args.name: api.example_job(args.name)} if args.name else {**examples, **scripts}
    if args.copy:
        from hpctrain.cli.view.user_files import write_user_files

        target = Path(args.copy)
        copies = {target / f"{name}{path.suffix}": path.read_bytes() for name, path in chosen.items()}
        for copy, written in write_user_files(copies, args.force).items():
            print(copy if written else f"{copy} (unchanged)")
        return 0
    if args.name:
        sys.stdout.write(chosen[args.name].read_text(encoding="utf-8"))
        return 0
    for name, path in examples.items():
        print(f"{name:24s} {path}")
    print("\nSubmit one by name: hpctrain submit digits-ddp --site local")
    print("\nPython scripts (print one by name; run it with python -m MODULE --site local):")
    for name in scripts:
        print(f"{name:24s} python -m {api.EXAMPLE_SCRIPTS[name]}")
    return 0
