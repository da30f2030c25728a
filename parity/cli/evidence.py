"""``python -m parity evidence``: where each known divergence was seen, per version (docs/version-diff.md).

``python -m parity evidence --write-cases DIR [--runs RUN_DIR ...]``: step 1, each entry's case (the one
``export-repro --known`` writes its script from: the smallest row it explains, shrunk where the run shrank
it; ``--index`` keeps the recorded ones) as ``DIR/BACKEND.jsonl``, one case per line for ``parity run
--case-file``, and ``DIR/cases.tsv`` (entry, backend, case id); prints one ``parity run`` line per backend
to run on each staged version.

``python -m parity evidence RUN_DIR ...``: step 2, the table entry x version (seen / not seen / not run) over
those runs, the range the evidence supports and whether ``versions`` agrees (:mod:`parity.report.evidence`);
printed, and with ``--out DIR`` written as ``DIR/evidence.md`` and ``DIR/evidence.csv``. Nothing is edited.

Exit codes: 0 written; 2 bad input (no run folder, a folder that is not a run, a bad expectations file).
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

from ..errors import UserError
from .common import add_expect_argument, load_expectations, split_list


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("evidence", help="where each known divergence was seen: entry x version, from runs on several versions")
    p.add_argument("run_dirs", type=Path, nargs="*", metavar="RUN_DIR", help="runs of the entries' cases, on one version or several each")
    p.add_argument("--entry", action="append", default=[], metavar="GLOB", help="only these entries (id globs; comma list, repeatable)")
    p.add_argument("--out", type=Path, metavar="DIR", help="write evidence.md and evidence.csv here (default: print only)")
    step1 = p.add_argument_group("step 1: the cases to run on each version")
    step1.add_argument(
        "--write-cases", type=Path, metavar="DIR", help="write each entry's case, one BACKEND.jsonl per backend, and cases.tsv"
    )
    step1.add_argument(
        "--runs",
        type=Path,
        nargs="+",
        metavar="DIR",
        help="--write-cases: the runs to pick the cases from (required with it; a run folder or a folder of them)",
    )
    step1.add_argument(
        "--index", type=Path, metavar="FILE", help="--write-cases: entries named here keep that case (default: the findings-repros index)"
    )
    add_expect_argument(p)
    return p


def run(args: argparse.Namespace) -> int:
    from ..report.runs import load_run

    expectations = load_expectations(args.expect)
    globs = split_list(args.entry)
    if args.write_cases is not None:
        if args.run_dirs:
            raise UserError("evidence --write-cases takes the runs to pick from with --runs DIR ..., not RUN_DIR")
        return _write_cases(args, expectations, globs)
    if args.runs or args.index:
        raise UserError("evidence: --runs and --index go with --write-cases")
    if not args.run_dirs:
        raise UserError("evidence: name the run folders (RUN_DIR ...), or --write-cases DIR for the cases to run first")
    from ..report.evidence import CSV_HEADER, collect, csv_rows, render_markdown

    runs = [load_run(d) for d in args.run_dirs]
    found = collect(runs, expectations, globs)
    if not found:
        raise UserError(f"evidence: no entry matches --entry {', '.join(globs)}")
    md = render_markdown(found, runs)
    print(md, end="")
    if args.out is not None:
        try:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / "evidence.md").write_text(md, encoding="utf-8")
            with (args.out / "evidence.csv").open("w", newline="", encoding="utf-8") as fh:
                csv.writer(fh).writerows([CSV_HEADER, *csv_rows(found)])
        except OSError as exc:
            raise UserError(f"--out {args.out}: cannot write there ({exc.strerror or exc})") from None
        print(f"parity: wrote {args.out / 'evidence.md'}, {args.out / 'evidence.csv'}", file=sys.stderr)
    return 0


def _write_cases(args: argparse.Namespace, expectations, globs: list[str]) -> int:
    import fnmatch

    from ..case import Case
    from ..export_repro import INDEX, pick, read_index, shrunk_cases
    from ..report.runs import load_run
    from .export_repro import _run_folders

    if not args.runs:
        raise UserError("evidence --write-cases: name the run folders to pick each entry's case from with --runs DIR ...")
    folders = _run_folders(args.runs)
    runs = [load_run(d, expectations, rejudge=True) for d in folders]
    picked = pick(runs, read_index(args.index if args.index is not None else INDEX))
    wanted = [e.id for e in expectations.entries if e.id in picked and (not globs or any(fnmatch.fnmatchcase(e.id, g) for g in globs))]
    by_backend: dict[str, list[str]] = {}
    lines = []
    for entry in wanted:
        run_, _, row = picked[entry]
        found = shrunk_cases(run_).get((row["backend"], row["case_id"]))
        case = Case.from_dict(found["case"]) if found else Case.from_json(row["case_json"])
        by_backend.setdefault(row["backend"], []).append(case.to_json())
        lines.append(f"{entry}\t{row['backend']}\t{case.case_id}")
    try:
        args.write_cases.mkdir(parents=True, exist_ok=True)
        for backend, cases in by_backend.items():
            (args.write_cases / f"{backend}.jsonl").write_text("\n".join(dict.fromkeys(cases)) + "\n", encoding="utf-8")
        (args.write_cases / "cases.tsv").write_text("\n".join(["entry\tbackend\tcase_id", *lines]) + "\n", encoding="utf-8")
    except OSError as exc:
        raise UserError(f"--write-cases {args.write_cases}: cannot write there ({exc.strerror or exc})") from None
    missing = [e.id for e in expectations.entries if e.id not in picked and (not globs or any(fnmatch.fnmatchcase(e.id, g) for g in globs))]
    print(
        f"parity evidence: {len(lines)} entries' cases in {args.write_cases}"
        + (f"; no row explained by: {', '.join(missing)}" if missing else "")
    )
    for backend in by_backend:
        print(
            f"  python -m parity run --backend {backend} --case-file {args.write_cases / (backend + '.jsonl')} --out RUNS/{backend}-VERSION"
        )
    return 0
