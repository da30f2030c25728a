"""``python -m parity diff [BASE_DIR [HEAD_DIR]]``: what changed between two runs of the same cases.

HEAD_DIR defaults to the latest run (``reports/latest``); with neither, the two newest runs under
``reports/runs/`` are compared. stderr names the two folders compared.

Writes ``diff.html`` and ``diff.md`` (default: into HEAD_DIR); the sections and what counts as
a regression: :mod:`parity.report.diff`. Exit codes: 0 no regression; 1 a regression; 2 bad
input (missing folder, a CSV without the columns, runs of different schemas, runs with no case
in common, a bad expectations file).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..errors import UserError
from .common import LATEST, RUNS_DIR, add_expect_argument, latest_run, load_expectations, newest_runs, write_pages


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("diff", help="what changed between two runs (exit 1 on a regression)")
    p.add_argument(
        "base",
        type=Path,
        nargs="?",
        metavar="BASE_DIR",
        help="run folder of the base (e.g. main); default: the run before the newest under reports/runs/",
    )
    p.add_argument(
        "head",
        type=Path,
        nargs="?",
        metavar="HEAD_DIR",
        help="run folder of the head (e.g. the pull request); default: the latest run (reports/latest), "
        "or the newest under reports/runs/ when BASE_DIR is left out too",
    )
    p.add_argument("--out", type=Path, help="where to write diff.html and diff.md (default: HEAD_DIR)")
    p.add_argument(
        "--ratio-threshold",
        type=float,
        default=1.5,
        help="an error ratio change counts when it grows or shrinks by more than this factor (default 1.5) ...",
    )
    p.add_argument("--min-ratio-delta", type=float, default=0.25, help="... and by more than this much in absolute terms (default 0.25)")
    p.add_argument(
        "--allow-coverage-loss",
        action="store_true",
        help="do not count pass -> unsupported/unavailable or a vanished backend as a regression",
    )
    add_expect_argument(p)
    return p


def run(args: argparse.Namespace) -> int:
    if not (args.ratio_threshold >= 1 and args.min_ratio_delta >= 0):  # not >=: NaN too
        raise UserError(
            f"--ratio-threshold must be >= 1 and --min-ratio-delta >= 0, got {args.ratio_threshold:g} and {args.min_ratio_delta:g}"
        )
    from ..report.diff import SECTIONS, compare_runs, headline, render_html, render_markdown
    from ..report.runs import load_run

    args.base, args.head = _folders(args.base, args.head)
    expectations = load_expectations(args.expect)
    base = load_run(args.base, expectations, rejudge=bool(args.expect))
    head = load_run(args.head, expectations, rejudge=bool(args.expect))
    d = compare_runs(base, head, args.ratio_threshold, args.min_ratio_delta, args.allow_coverage_loss)
    out = args.out or args.head
    write_pages(out, {"diff.md": render_markdown(d), "diff.html": render_html(d)})
    print(f"parity: diff: compared {_shown(args.base)} (base) with {_shown(args.head)} (head)", file=sys.stderr)
    print(f"parity diff: {headline(d)}")
    for attr, title, _ in SECTIONS:
        n = len(getattr(d, attr))
        if n:
            print(f"  {title}: {n}")
    print(f"parity: wrote {out / 'diff.html'}, {out / 'diff.md'}", file=sys.stderr)
    return 1 if d.regressions else 0


def _folders(base: Path | None, head: Path | None) -> tuple[Path, Path]:
    """BASE_DIR and HEAD_DIR as given, HEAD_DIR defaulting to the latest run, and both to the two newest
    runs under reports/runs/; a one-line :class:`UserError` saying what to pass when there are none."""
    if base is None:
        runs = newest_runs(2)
        if len(runs) < 2:
            n = len(runs)
            raise UserError(
                f"found {n} run{'' if n == 1 else 's'} under {RUNS_DIR}/, two are needed to compare; "
                "pass the run folders: parity diff BASE_DIR HEAD_DIR"
            )
        return runs[0], runs[1]
    if head is not None:
        return base, head
    latest = latest_run()
    if not latest.is_dir():
        raise UserError(f"no latest run ({LATEST} names none) to compare {base} with; pass HEAD_DIR too: parity diff {base} HEAD_DIR")
    if base.exists() and base.resolve() == latest.resolve():
        raise UserError(f"{base} is the latest run ({LATEST}); pass the run to compare it with: parity diff BASE_DIR HEAD_DIR")
    return base, latest


def _shown(folder: Path) -> str:
    """``folder`` as given, and where it leads when it is a link (reports/latest -> reports/runs/...)."""
    try:
        real, cwd = folder.resolve(), Path.cwd().resolve()
    except OSError:
        return str(folder)
    if real == folder.absolute():
        return str(folder)
    return f"{folder} ({real.relative_to(cwd) if real.is_relative_to(cwd) else real})"
