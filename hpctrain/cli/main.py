"""`hpctrain`: the entry point that parses arguments and turns every known failure into one line."""

from __future__ import annotations

import argparse
import importlib
import sys

from hpctrain.version import __version__

VERBS = {
    "render": "Print the batch script a job would submit (dry run; submits nothing).",
    "submit": "Validate, render, record and submit a job.",
    "status": "Show the state and progress of tracked jobs (one scheduler query per poll).",
    "logs": "Print a job's batch log or one rank's log.",
    "cancel": "Cancel jobs.",
    "report": "Figures and a one-page summary of a run or sweep (loss, throughput, ranks, memory).",
    "sweep": "Submit a hyper-parameter sweep as job arrays; sweep status|cancel|report|resume SWEEP.",
    "list": "Every job submitted through hpctrain, newest first.",
    "index": "Check or compact the index of runs (set aside unreadable lines, archive ended runs).",
    "explain": "The job-spec and site-profile fields with their documentation.",
    "sites": "Every site profile --site NAME can reach, and where each comes from.",
    "examples": "The example job specs shipped with hpctrain (submit one by name).",
    "init-site": "Write a site profile read off the live cluster (scontrol, sacctmgr, a probe job).",
    "doctor": "Check a site profile and every node of the live cluster (preflight job, all-reduce).",
    "completion": "Print the shell completion script: source <(hpctrain completion bash).",
}

# Exit codes: 2 = the user's input is wrong (nothing was submitted), 1 = the cluster or job failed.
EXIT_INPUT = 2
EXIT_FAILURE = 1


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser; with `only`, just that verb's subparser is built (the others cost start-up time).

    `only=None` builds every verb's arguments (shell completion reads them all)."""
    parser = argparse.ArgumentParser(
        prog="hpctrain",
        description="Distributed PyTorch training on Slurm: render, submit, track, cancel.",
    )
    parser.add_argument("--version", action="version", version=f"hpctrain {__version__}")
    sub = parser.add_subparsers(dest="verb", metavar="COMMAND")
    for verb, help_text in VERBS.items():
        if only is not None and verb != only:
            if not only:  # the verb list of `hpctrain --help`; a verb's own run does not show it
                sub.add_parser(verb, help=help_text)
            continue
        module = importlib.import_module(f"hpctrain.cli.{verb.replace('-', '_')}_cmd")
        child = sub.add_parser(verb, help=help_text, description=help_text)
        module.add_arguments(child)
        child.set_defaults(run=module.run)
    return parser


# Verbs that, run as the program, leave without the interpreter's finalization (see `main`).
QUICK_EXIT = frozenset({"render", "submit", "report"})


def main(argv: list[str] | None = None) -> int:
    as_program = argv is None
    argv = sys.argv[1:] if argv is None else argv
    # Without a verb (`hpctrain`, `hpctrain --help`) no verb module is imported: "" names none.
    verb = argv[0] if argv and argv[0] in VERBS else ""
    parser = build_parser(verb)
    args = parser.parse_args(argv)
    if not getattr(args, "verb", None):
        parser.print_help()
        return EXIT_INPUT
    code = run_verb(args)
    if as_program and verb in QUICK_EXIT:
        quick_exit(code)
    return code


def run_verb(args: argparse.Namespace) -> int:
    """The verb's exit code; every known failure is one line on stderr."""
    import os

    from hpctrain.errors import HpctrainError

    debug = os.environ.get("HPCTRAIN_DEBUG", "") not in ("", "0")
    try:
        return int(args.run(args) or 0)
    except KeyboardInterrupt:
        print("hpctrain: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as err:
        if debug:
            import traceback

            traceback.print_exc()
        print(f"hpctrain: error: {one_line(err, debug)}", file=sys.stderr)
        return err.exit_code if isinstance(err, HpctrainError) else EXIT_FAILURE


def quick_exit(code: int) -> None:
    """Leave now, skipping the interpreter's finalization (tearing down jinja2, yaml and msgspec
    costs about 50 ms of CPU, a fifth of a render on a login node; matplotlib adds more to a
    report). Only for verbs that have closed every file they wrote, started no thread and waited
    for their children: nothing is left to flush but stdout and stderr."""
    import os

    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:  # `hpctrain render ... | head`: the reader left; as in `run_verb`, no error
        pass
    os._exit(code)


def one_line(err: Exception, debug: bool) -> str:
    """The message of a known failure, or the type and message of an unexpected one."""
    from hpctrain.errors import HpctrainError
    from hpctrain.errors import one_line as escape_controls

    if isinstance(err, HpctrainError):
        return escape_controls(str(err))
    if isinstance(err, OSError):
        return escape_controls(f"{err.strerror or err}: {err.filename or ''}".rstrip(": "))
    message = " ".join(str(err).split())[:300]
    hint = "" if debug else " (set HPCTRAIN_DEBUG=1 for the traceback)"
    return f"unexpected {type(err).__name__}: {message}{hint}"


if __name__ == "__main__":
    sys.exit(main())
