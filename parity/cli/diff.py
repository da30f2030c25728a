"""``python -m parity diff BASE_DIR HEAD_DIR``: what changed between two runs of the same cases.

Writes ``diff.html`` and ``diff.md`` (default: into HEAD_DIR); the sections and what counts as
a regression: :mod:`parity.report.diff`. Exit codes: 0 no regression; 1 a regression; 2 bad
input (missing folder, a CSV without the columns, runs of different schemas, runs with no case
in common, a bad expectations file).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..errors import UserError as UsageError
from .common import add_expect_argument, load_expectations


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("diff", help="what changed between two runs (exit 1 on a regression)")
    p.add_argument("base", type=Path, metavar="BASE_DIR", help="run folder of the base (e.g. main)")
    p.add_argument("head", type=Path, metavar="HEAD_DIR", help="run folder of the head (e.g. the pull request)")
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
    if args.ratio_threshold < 1 or args.min_ratio_delta < 0:
        raise UsageError("--ratio-threshold must be >= 1 and --min-ratio-delta >= 0")
    from ..report.diff import SECTIONS, compare_runs, headline, render_html, render_markdown
    from ..report.runs import load_run

    expectations = load_expectations(args.expect)
    base = load_run(args.base, expectations, rejudge=bool(args.expect))
    head = load_run(args.head, expectations, rejudge=bool(args.expect))
    d = compare_runs(base, head, args.ratio_threshold, args.min_ratio_delta, args.allow_coverage_loss)
    out = args.out or args.head
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / "diff.md").write_text(render_markdown(d), encoding="utf-8")
        (out / "diff.html").write_text(render_html(d), encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write diff.html / diff.md: {exc}") from None
    print(f"parity diff: {headline(d)}")
    for attr, title, _ in SECTIONS:
        n = len(getattr(d, attr))
        if n:
            print(f"  {title}: {n}")
    print(f"parity: wrote {out / 'diff.html'}, {out / 'diff.md'}", file=sys.stderr)
    return 1 if d.regressions else 0
