"""``python -m parity report DIR``: (re)render the reports of an existing run folder.

Writes ``report.html``, ``summary.md`` and ``junit.xml`` (into DIR, or ``--out``). Known
divergences (:mod:`parity.expect`): rows the run judged keep their verdicts and rows of older
runs are judged with the default expectations; ``--expect FILE`` / ``--expect none`` judges
every row anew with those. results.csv is left as it is unless ``--rewrite-results``.

Exit codes: 0 written; 1 written and ``--strict`` and a row failed, errored, crashed, timed out
(no known divergence explaining it) or passed unexpectedly; 2 bad input (no such folder, no
results.csv, a CSV without the needed columns, a bad expectations file).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..errors import UserError
from .common import EXIT_PARTIAL, add_expect_argument, latest_run, load_expectations


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("report", help="(re)render report.html, summary.md, junit.xml of a run folder")
    p.add_argument(
        "dir",
        type=Path,
        nargs="?",
        metavar="DIR",
        help="a run folder (holding results.csv, environment.json); default: the latest run (reports/latest)",
    )
    p.add_argument("--out", type=Path, help="write the reports here instead of DIR")
    p.add_argument(
        "--strict",
        action="store_true",
        help="exit 1 when a row failed, errored, crashed, timed out or passed unexpectedly; 3 when none did but the run is partial",
    )
    add_expect_argument(p)
    p.add_argument(
        "--rewrite-results",
        action="store_true",
        help="also write the verdicts as judged now back into DIR's results.csv (default: only the reports show them)",
    )
    return p


def run(args: argparse.Namespace) -> int:
    from ..report.data import n_failing
    from ..report.runs import load_run, save_results
    from ..report.write import write_reports

    expectations = load_expectations(args.expect)
    if args.dir is None:
        args.dir = latest_run()
    run_ = load_run(args.dir, expectations, rejudge=bool(args.expect))
    if run_.env.get("missing") and args.expect:
        # every entry has a version range and a version that cannot be found is outside it: judged anew, the rows
        # this run explained itself would turn back into failures
        words = f"{run_.path} has no environment.json, so its backends' versions are unknown and no known divergence can match"
        if args.rewrite_results:
            raise UserError(f"{words}: results.csv is not rewritten (the verdicts its run gave stay)")
        print(f"parity: warning: {words}; the reports show every failing row as new", file=sys.stderr)
    try:
        written = write_reports(run_, args.out or args.dir)
        if args.rewrite_results:
            written.append(save_results(run_))
    except OSError as exc:
        raise UserError(f"cannot write the reports: {exc}") from None
    print("parity: wrote " + ", ".join(str(p) for p in written), file=sys.stderr)
    from ..report.runs import partial_words

    if partial_words(run_):
        print(f"parity: {partial_words(run_)}", file=sys.stderr)
    if args.strict and n_failing(run_):
        return 1
    return EXIT_PARTIAL if args.strict and partial_words(run_) else 0
