"""``python -m parity report DIR``: (re)render the reports of an existing run folder.

Writes ``report.html``, ``summary.md`` and ``junit.xml`` (into DIR, or ``--out``). Exit codes:
0 written; 1 written and ``--strict`` and a row failed, errored, crashed or timed out;
2 bad input (no such folder, no results.csv, a CSV without the needed columns).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("report", help="(re)render report.html, summary.md, junit.xml of a run folder")
    p.add_argument("dir", type=Path, metavar="DIR", help="a run folder (holding results.csv, environment.json)")
    p.add_argument("--out", type=Path, help="write the reports here instead of DIR")
    p.add_argument("--strict", action="store_true", help="exit 1 when a row failed, errored, crashed or timed out")
    return p


def run(args: argparse.Namespace) -> int:
    from .cli import UsageError
    from .report import n_failing, write_all
    from .runs import load_run

    try:
        written = write_all(args.dir, args.out)
    except OSError as exc:
        raise UsageError(f"cannot write the reports: {exc}") from None
    print("parity: wrote " + ", ".join(str(p) for p in written), file=sys.stderr)
    if args.strict and n_failing(load_run(args.dir)):
        return 1
    return 0
