"""`hpctrain index check|compact`: find unreadable lines and unindexed run directories; repair."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "action",
        choices=("check", "compact"),
        help="check: adopt the jobs of submits that were cut short (found by the run id they carry),"
        " record run directories whose submit was killed before recording them as SUBMIT_FAILED,"
        " report unreadable lines (exit 1 if any); compact: archive runs that ended over a day ago "
        "and move unreadable lines to index-rejected.jsonl.",
    )


def run(args: argparse.Namespace) -> int:
    from hpctrain import api

    index = api.run_index()
    if args.action == "compact":
        done = index.compact()
        print(
            f"{done.active} runs in the journal, {done.archived} in the archive ({done.moved} moved now);"
            f" {done.rejected} unreadable lines set aside"
            + (f" in {index.rejected_path}" if done.rejected else "")
        )
        return 0
    for adopted in index.adopt_interrupted():
        job = f"job {adopted.job_id}" if adopted.job_id else "no job"
        print(f"run {adopted.run_id}: {job}; {adopted.verdict}")
    for orphan in index.adopt_unindexed():
        print(f"run {orphan.run_id}: no job; {orphan.state}: {orphan.reason}")
    report = index.check()
    print(f"{report.runs} runs; journal {index.path} is {report.journal_bytes} bytes")
    for path, number, text in report.bad_lines:
        print(f"unreadable line {path}:{number}: {text.decode('utf-8', 'replace')!r}")
    for run_id in report.unindexed_dirs:
        # Left by adopt_unindexed: changed moments ago, a submit that has not recorded its run yet.
        print(f"run directory not in the index yet (a submit in progress): {index.root / 'runs' / run_id}")
    for run_id in report.missing_dirs:
        print(f"indexed run without its directory: {run_id}")
    if report.bad_lines:
        print("`hpctrain index compact` moves the unreadable lines to index-rejected.jsonl")
    return 1 if report.bad_lines else 0
