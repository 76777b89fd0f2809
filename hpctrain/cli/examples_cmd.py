"""`hpctrain examples`: the example job specs shipped with hpctrain; submit one by name or copy it."""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", nargs="?", help="Print this example's YAML (e.g. digits-ddp).")
    parser.add_argument("--copy", metavar="DIR", help="Copy the example(s) into DIR to edit them.")


def run(args: argparse.Namespace) -> int:
    from hpctrain.spec.resources import example_jobs, job_file

    examples = example_jobs()
    chosen = {args.name: job_file(args.name)} if args.name else examples
    if args.copy:
        target = Path(args.copy)
        target.mkdir(parents=True, exist_ok=True)
        for name, path in chosen.items():
            shutil.copyfile(path, target / f"{name}.yaml")
            print(target / f"{name}.yaml")
        return 0
    if args.name:
        sys.stdout.write(chosen[args.name].read_text(encoding="utf-8"))
        return 0
    for name, path in examples.items():
        print(f"{name:24s} {path}")
    print("\nSubmit one by name: hpctrain submit digits-ddp --site local")
    return 0
