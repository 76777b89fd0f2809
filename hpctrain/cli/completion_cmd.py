"""`hpctrain completion bash|zsh`: shell completion for verbs, options, job files, site names, job ids."""

from __future__ import annotations

import argparse

# The script is generated from the parser itself, so a new verb or option completes without edits.
BASH = r"""# hpctrain completion (bash); load with: source <(hpctrain completion bash)
_hpctrain() {
    local cur prev verb words
    cur="${COMP_WORDS[COMP_CWORD]}"
    prev="${COMP_WORDS[COMP_CWORD-1]}"
    verb="${COMP_WORDS[1]}"
    if [ "$COMP_CWORD" -eq 1 ]; then
        mapfile -t COMPREPLY < <(compgen -W "__VERBS__ --help --version" -- "$cur")
        return 0
    fi
    case "$prev" in
        --site)
            words="$(hpctrain completion --words sites 2>/dev/null)"
            mapfile -t COMPREPLY < <(compgen -W "$words" -- "$cur"; compgen -f -X '!*.yaml' -- "$cur")
            return 0 ;;
__CHOICES__
    esac
    if [[ "$cur" == -* ]]; then
        case "$verb" in
__OPTIONS__
        esac
        mapfile -t COMPREPLY < <(compgen -W "$words" -- "$cur")
        return 0
    fi
    case "$verb" in
        submit | render)
            words="$(hpctrain completion --words jobs 2>/dev/null)"
            mapfile -t COMPREPLY < <(compgen -W "$words" -- "$cur"
                compgen -f -X '!*.y*ml' -- "$cur"; compgen -d -S / -- "$cur") ;;
        status | logs | cancel)
            words="$(hpctrain completion --words ids 2>/dev/null)"
            mapfile -t COMPREPLY < <(compgen -W "$words" -- "$cur") ;;
__POSITIONAL__
        examples)
            words="$(hpctrain completion --words jobs 2>/dev/null)"
            mapfile -t COMPREPLY < <(compgen -W "$words" -- "$cur") ;;
        *)
            mapfile -t COMPREPLY < <(compgen -f -- "$cur") ;;
    esac
    return 0
}
complete -o nospace -o filenames -F _hpctrain hpctrain
"""

# zsh runs the same function through its bash-completion emulation.
ZSH = "autoload -U +X bashcompinit && bashcompinit\n"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("shell", nargs="?", choices=("bash", "zsh"), default="bash", help="bash or zsh")
    parser.add_argument(
        "--words", choices=("jobs", "sites", "ids"), help=argparse.SUPPRESS
    )  # what the script asks for


def words(kind: str) -> list[str]:
    """Completion candidates: example job names, site names, or the job ids of tracked runs."""
    from hpctrain import api

    if kind == "jobs":
        return list(api.example_jobs())
    if kind == "sites":
        return sorted({e.name for e in api.sites(describe=False)})
    return [r.job_id for r in api.list_runs(everything=True, limit=200) if r.job_id]


def script(shell: str) -> str:
    from hpctrain.cli.main import VERBS, build_parser

    parser = build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    options, choices, positional = [], [], []
    for verb, child in subparsers.choices.items():
        first = next((a for a in child._actions if not a.option_strings), None)
        if first is not None and first.choices:  # explain job|site|files, completion bash|zsh...
            values = " ".join(str(c) for c in first.choices)
            positional.append(
                f'        {verb}) COMPREPLY=(); [ "$COMP_CWORD" -eq 2 ] && '
                f'mapfile -t COMPREPLY < <(compgen -W "{values}" -- "$cur") ;;'
            )
        flags = [
            f for action in child._actions for f in action.option_strings if action.help != "==SUPPRESS=="
        ]
        options.append(f'            {verb}) words="{" ".join(flags)}" ;;')
        for action in child._actions:
            if action.option_strings and action.choices and action.option_strings[0] != "--words":
                pattern = " | ".join(action.option_strings)
                values = " ".join(str(c) for c in action.choices)
                reply = f'mapfile -t COMPREPLY < <(compgen -W "{values}" -- "$cur"); return 0'
                line = f"        {pattern}) {reply} ;;"
                if line not in choices:
                    choices.append(line)
    text = (
        BASH.replace("__VERBS__", " ".join(VERBS))
        .replace("__OPTIONS__", "\n".join(options))
        .replace("__CHOICES__", "\n".join(choices))
        .replace("__POSITIONAL__", "\n".join(positional))
    )
    return (ZSH + text) if shell == "zsh" else text


def run(args: argparse.Namespace) -> int:
    if args.words:
        print("\n".join(words(args.words)))
        return 0
    print(script(args.shell), end="")
    return 0
