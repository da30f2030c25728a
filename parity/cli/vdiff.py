"""``python -m parity vdiff BASE_DIR [HEAD_DIR]``: a version diff, one backend (kernel) at two versions on
the same cases (docs/version-diff.md).

Two run folders: every backend in both whose recorded version differs (``--backend GLOB`` picks them
instead). One run folder: ``X`` against ``X@TAG``, the same kernel staged a second time. ``--pair A=B`` names
pairs in either case. Writes ``vdiff.md`` and ``vdiff.html`` (default: into HEAD_DIR, or the one folder);
what each section holds and what a regression is: :mod:`parity.report.vdiff`.

Exit codes: 0 no regression; 1 a regression (new findings at HEAD, an error ratio up, coverage lost);
2 bad input (missing folder, no pair found, a pair without a case in common, a bad expectations file).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..errors import UserError
from .common import add_expect_argument, load_expectations, split_list, write_pages


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("vdiff", help="version diff: one backend at two versions on the same cases (exit 1 on a regression)")
    p.add_argument("base", type=Path, metavar="BASE_DIR", help="run folder of the older version (or the one folder holding both)")
    p.add_argument(
        "head", type=Path, nargs="?", metavar="HEAD_DIR", help="run folder of the newer version (leave out: pairs X / X@TAG in BASE_DIR)"
    )
    p.add_argument(
        "--pair",
        action="append",
        default=[],
        metavar="BASE=HEAD",
        help="compare backend BASE (in BASE_DIR) with HEAD (in HEAD_DIR); repeatable",
    )
    p.add_argument(
        "--backend",
        "-b",
        action="append",
        default=[],
        metavar="GLOB",
        help="only pairs whose BASE backend matches (comma list, repeatable)",
    )
    p.add_argument(
        "--factor", type=float, default=2.0, help="a number moved when HEAD / BASE is this or more, or 1/this or less (default 2)"
    )
    p.add_argument(
        "--ratio-threshold", type=float, default=1.5, help="error ratio up counts beyond this factor (default 1.5, as parity diff) ..."
    )
    p.add_argument("--min-ratio-delta", type=float, default=0.25, help="... and by more than this much (default 0.25)")
    p.add_argument("--allow-coverage-loss", action="store_true", help="do not count ran -> unsupported/unavailable as a regression")
    p.add_argument("--out", type=Path, help="where to write vdiff.md and vdiff.html (default: HEAD_DIR, or BASE_DIR alone)")
    add_expect_argument(p)
    return p


def _pairs(items: list[str]) -> list[tuple[str, str]]:
    out = []
    for item in items:
        b, sep, h = item.partition("=")
        if not sep or not b or not h:
            raise UserError(f"--pair wants BASE=HEAD (two backend names), got {item!r}")
        out.append((b, h))
    return out


def run(args: argparse.Namespace) -> int:
    if not (args.factor > 1 and args.ratio_threshold >= 1 and args.min_ratio_delta >= 0):  # not >: NaN too
        got = f"{args.factor:g}, {args.ratio_threshold:g} and {args.min_ratio_delta:g}"
        raise UserError(f"--factor must be > 1, --ratio-threshold >= 1 and --min-ratio-delta >= 0, got {got}")
    from ..report.runs import load_run
    from ..report.vdiff import compare_versions, find_pairs
    from ..report.vdiff_page import headline, render_html, render_markdown

    expectations = load_expectations(args.expect)
    base = load_run(args.base)
    head = load_run(args.head) if args.head is not None else base
    pairs = find_pairs(base, head, _pairs(args.pair), split_list(args.backend), one_folder=args.head is None)
    d = compare_versions(base, head, pairs, expectations, args.factor, args.ratio_threshold, args.min_ratio_delta, args.allow_coverage_loss)
    out = args.out or args.head or args.base
    write_pages(out, {"vdiff.md": render_markdown(d), "vdiff.html": render_html(d)})
    print(f"parity vdiff: {headline(d)}")
    for p in d.pairs:
        print(f"  {p.label}")
    for f in d.findings:
        print(f"  {f.entry}: {f.status}" + (f" ({f.note})" if f.note else ""))
    print(f"parity: wrote {out / 'vdiff.md'}, {out / 'vdiff.html'}", file=sys.stderr)
    return 1 if d.regressions else 0
