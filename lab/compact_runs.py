"""Compact the lab's committed runs to what a finding needs (issue 51): results, summary, environment, lab notes.

    python lab/compact_runs.py [--dry-run] [--full-at COMMIT] lab/runs/RUN ...

Each RUN is a top-level folder of ``lab/runs`` (the one with the lab notes, ``README.md``); every run folder under it
(a ``results.csv[.gz]``) and every file in it is handled by :data:`RULES`, in this order:

* ``results.csv[.gz]`` -> ``results.csv.gz``: the rows whose verdict is ``unsupported`` (the backend refused the case)
  or ``unavailable`` (its package did not import) leave, except in the folders of :data:`KEEP_EVERY_ROW`; the
  ``repro`` column leaves where every row's is ``python -m parity run --backend B --case 'CASE_JSON'`` (with
  ``--grad`` on every row of a backward run), rebuilt from its own row. No other row or column changes: every
  failing, expected, passing, erroring or timed-out row stays, with every number it had, so every run re-judges as
  before on the rows it keeps (the refusals were never judged). Of a row that passed (and was judged a pass),
  ``worst_where`` is blanked (its place and error are the ``worst_*`` columns and ``max_abs_err``; only the worst
  element's dim and two values were its own), and ``lse_detail`` where it says only ``max |err| E within budget B (k x
  same-dtype LSE baseline C + floor)`` (E, B: ``lse_max_abs_err``, ``lse_budget``); failing rows keep both. Neither
  is read by the judge.
* ``stages.jsonl[.gz]`` (one line per row: milliseconds per stage) -> ``stages.csv``: per (backend, status) the
  rows, and per stage the sum and the largest, in milliseconds (``timing.json``'s ``stages`` sums it per backend).
* a log (``logs/``, ``*.log``, ``*.log.gz``) that the notes do not name leaves; a named one over 8 KB is gzipped (``NAME.gz``).
* ``coverage.csv`` (rewritten from the results by ``python -m parity report``) leaves.
* the per-step and per-flip tables of the decode studies (``decode_steps.csv``, ``lm_flips.csv``, plain or gzipped)
  leave: ``decode.csv`` / ``lm_decode.csv`` and ``decode_summary.md`` summarize them (every figure the notes cite).
* ``timing*.json``, ``throughput.json`` and the decode studies' sidecars (``decode.json``, ``lm_decode.json``) over
  8 KB are gzipped (``NAME.gz``: the same JSON).
* ``environment*.json`` is written with one line per top-level key (the same JSON; ``earlier_runs`` repeats each
  call's backends, most of the indented file).

Where a file is gzipped, the notes' mentions of its path follow (``NAME`` -> ``NAME.gz``), and of its bare name where
every file of that name in the folder was gzipped. Everything else stays (results,
``environment.json``, ``summary.md``, masks, shrunk cases, the studies' summaries, notes, small records). The notes
get a section "Compacted (issue 51)" saying what left, how large it was, and
``git show COMMIT:reports/RUN/PATH`` for the full copy (COMMIT: ``--full-at``, the last commit that held the runs
whole under ``reports/``). A folder compacted before keeps that section as it was and gets a table of the later pass
under it (``git show COMMIT:lab/runs/RUN/PATH``); a pass with nothing to do writes nothing. ``--dry-run`` prints the
sizes before and after and writes nothing.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import io
import json
import re
import sys
from collections import defaultdict
from pathlib import Path

from parity.runfolder import derived_repro

#: the folders whose every row stays: the seed the next models loan resumes (lab/README.md), so that its --resume
#: does not run the refusals again
KEEP_EVERY_ROW = {"h100-2026-12-06b-models/run"}
REFUSALS = ("unsupported", "unavailable")
PER_STEP = ("decode_steps.csv", "decode_steps.csv.gz", "lm_flips.csv", "lm_flips.csv.gz")
SECTION = "## Compacted (issue 51)"
#: the heading of a later pass's table, under :data:`SECTION`
AGAIN = "### Compacted again (issue 51: passing rows' `worst_where`, environment one line per key, decode sidecars)"
#: a log or timing file at most this large stays plain
GZIP_OVER = 8192
#: what ``worst_where`` says of a row that the results keep in other columns
WHERE_KEPT_IN = ("worst_where", "worst_seq", "worst_head", "worst_row", "max_abs_err")
#: a passing row's whole ``lse_detail`` where it says nothing its numeric columns do not
LSE_PLAIN = re.compile(r"max \|err\| \S+ within budget \S+ \(k x same-dtype LSE baseline \S+ \+ floor\)")
#: the decode studies' sidecars (models, training, noise: nothing in ``parity`` reads them back)
DECODE_SIDECARS = ("decode.json", "lm_decode.json")


def _read_text(path: Path) -> str:
    return gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()


def _gz(text: str) -> bytes:
    return gzip.compress(text.encode(), 9, mtime=0)


def _derived_repro(row: dict, grad: bool) -> str:
    """The row's ``repro`` as the product writes it (:func:`parity.runfolder.derived_repro`), with ``--grad``."""
    return derived_repro(row) + (" --grad" if grad else "")


def _drop_refusals(rows: list[dict], notes: list[str]) -> list[dict]:
    left = [r for r in rows if r["verdict"] in REFUSALS]
    counts: dict[str, int] = defaultdict(int)
    for r in left:
        counts[r["verdict"]] += 1
    if left:
        notes.append("rows " + ", ".join(f"{n} {v}" for v, n in sorted(counts.items())) + f" (of {len(rows)})")
    return [r for r in rows if r["verdict"] not in REFUSALS]


def _passed(row: dict) -> bool:
    """A row that passed as it ran and as it was judged (an unexpected pass is not one)."""
    return row["verdict"] == "pass" and row.get("raw_verdict", "") in ("pass", "")


def _blank_passing_where(rows: list[dict], fields: list[str], notes: list[str]) -> None:
    """``worst_where`` of a passing row: its words are the other worst_* columns, ``max_abs_err`` and the case's
    window again; only the worst element's dim and its two values are its own. Failing rows keep it."""
    if not set(WHERE_KEPT_IN) <= set(fields):
        return
    passing = [r for r in rows if _passed(r) and r["worst_where"]]
    for r in passing:
        r["worst_where"] = ""
    if passing:
        notes.append(
            f"`worst_where` of {len(passing)} passing rows (its place and error stay in `worst_seq` / `worst_head` /"
            " `worst_row` / `worst_left_edge` and `max_abs_err`; the worst element's dim, got and want left)"
        )


def _blank_passing_lse(rows: list[dict], fields: list[str], notes: list[str]) -> None:
    """``lse_detail`` of a passing row when it says only :data:`LSE_PLAIN`: its error and budget are
    ``lse_max_abs_err`` and ``lse_budget`` (the baseline is the budget less the floor, over k). A detail that says
    more (the rows that see no key and the library's value there) stays."""
    if not {"lse_detail", "lse_check", "lse_max_abs_err", "lse_budget"} <= set(fields):
        return
    plain = [r for r in rows if _passed(r) and r["lse_check"] == "pass" and LSE_PLAIN.fullmatch(r["lse_detail"])]
    for r in plain:
        r["lse_detail"] = ""
    if plain:
        notes.append(
            f"`lse_detail` of {len(plain)} passing rows (`max err E within budget B (k x same-dtype LSE baseline C +"
            " floor)`: E and B stay in `lse_max_abs_err` / `lse_budget`; C left)"
        )


def compact_results(path: Path, rel: str) -> tuple[bytes, list[str]]:
    """The compacted ``results.csv.gz`` of ``path`` and what it left out, in words."""
    text = _read_text(path)
    newline = "\r\n" if "\r\n" in text.split("\n", 1)[0] + "\n" else "\n"
    reader = csv.DictReader(io.StringIO(text, newline=""))
    fields, rows = list(reader.fieldnames or []), list(reader)
    notes: list[str] = []
    if rel not in KEEP_EVERY_ROW and "verdict" in fields:
        rows = _drop_refusals(rows, notes)
        _blank_passing_where(rows, fields, notes)
        _blank_passing_lse(rows, fields, notes)
    if "repro" in fields and rows:
        grad = rows[0]["repro"].endswith(" --grad")
        if all(r["repro"] == _derived_repro(r, grad) for r in rows):
            fields.remove("repro")
            notes.append("column `repro` (`python -m parity run --backend B --case 'CASE_JSON'`" + (" --grad" if grad else "") + ")")
    out = io.StringIO(newline="")
    writer = csv.DictWriter(out, fieldnames=fields, lineterminator=newline, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    return _gz(out.getvalue()), notes


def environment_text(text: str) -> str:
    """An ``environment.json`` with one line per top-level key (the same JSON: ``earlier_runs`` repeats each call's
    backends, which took most of the indented file)."""
    env = json.loads(text)
    return "{\n" + ",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in env.items()) + "\n}\n"


def stages_summary(path: Path) -> str:
    """stages.jsonl as a table: per (backend, status) the rows and, per stage, the sum and the largest (ms)."""
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    names: list[str] = []
    for line in _read_text(path).splitlines():
        if line.strip():
            rec = json.loads(line)
            stages = rec.get("stage_ms", {})
            names += [k for k in stages if k not in names]
            groups[(rec.get("backend", ""), rec.get("status", ""))].append(stages)
    out = io.StringIO(newline="")
    w = csv.writer(out, lineterminator="\n")
    w.writerow(["backend", "status", "rows", *[f"{n}_{agg}" for n in names for agg in ("sum_ms", "max_ms")]])
    for (backend, status), recs in sorted(groups.items()):
        cells = []
        for n in names:
            vals = [float(r.get(n, 0) or 0) for r in recs]
            cells += [f"{sum(vals):.1f}", f"{max(vals):.1f}"]
        w.writerow([backend, status, len(recs), *cells])
    return out.getvalue()


def _is_log(path: Path) -> bool:
    return "logs" in path.parts or path.name.endswith((".log", ".log.gz"))


def _gzipped_kind(path: Path) -> bool:
    """timing.json, timing-resume.json, first-part-timing.json, ...; throughput.json; decode.json, lm_decode.json."""
    return path.suffix == ".json" and ("timing" in path.name or path.name in ("throughput.json", *DECODE_SIDECARS))


def plan(top: Path) -> tuple[dict[Path, bytes | None], list[tuple[str, int, str]], list[str]]:
    """What compacting ``top`` does: path -> new bytes (None: the file leaves), (path, size, what) per change, and the
    names (relative paths and file names) now gzipped, for the notes."""
    notes_text = (top / "README.md").read_text()
    writes: dict[Path, bytes | None] = {}
    done: list[tuple[str, int, str]] = []
    gzipped: list[str] = []
    for path in sorted(p for p in top.rglob("*") if p.is_file()):
        rel, size = path.relative_to(top).as_posix(), path.stat().st_size
        folder_rel = f"{top.name}/{path.parent.relative_to(top).as_posix()}".rstrip("/.")
        named = rel in notes_text or path.name in notes_text
        if path.name in ("results.csv", "results.csv.gz"):
            data, what = compact_results(path, folder_rel)
            if what:
                writes[path] = None
                writes[path.with_name("results.csv.gz")] = data
                done.append((rel, size, "left out: " + "; ".join(what) + f" ({len(data)} bytes now)"))
        elif path.name in ("stages.jsonl", "stages.jsonl.gz"):
            writes[path] = None
            writes[path.with_name("stages.csv")] = stages_summary(path).encode()
            done.append((rel, size, "summarized in `stages.csv` (per backend and status: rows, each stage's sum and largest)"))
        elif _is_log(path) and not named:
            writes[path] = None
            done.append((rel, size, "left out (a log the notes do not name)"))
        elif path.name == "coverage.csv":
            writes[path] = None
            done.append((rel, size, "left out (`python -m parity report` writes it from the results)"))
        elif path.name in PER_STEP:
            writes[path] = None
            done.append((rel, size, "left out (per step / per flip; the study's summary table stays)"))
        elif path.name.startswith("environment") and path.suffix == ".json":
            data = environment_text(path.read_text()).encode()
            if len(data) < size:
                writes[path] = data
                done.append((rel, size, f"one line per top-level key (the same JSON; {len(data)} bytes now)"))
        elif (_is_log(path) or _gzipped_kind(path)) and path.suffix != ".gz" and size > GZIP_OVER:
            writes[path] = None
            writes[path.with_name(path.name + ".gz")] = data = _gz(path.read_text())
            done.append((rel, size, f"gzipped: `{rel}.gz` ({len(data)} bytes)"))
            gzipped.append(rel)
    # a bare file name in the notes follows only where every file of that name here was gzipped
    names = {Path(r).name for r in gzipped}
    gzipped += [n for n in names if all(p.relative_to(top).as_posix() in gzipped for p in top.rglob(n))]
    return writes, done, gzipped


def follow(text: str, gzipped: list[str], run: str = "") -> str:
    """The notes with each mention of a gzipped file (its path or name, not already ``.gz``) naming ``NAME.gz``.

    A mention after a ``/`` is another folder's file of that name (``call4/run.log`` when the run's own
    ``run.log`` was gzipped), unless the folder is ``run``, the run's own (``RUN/run.log``)."""
    own = r"|(?<=" + re.escape(run + "/") + ")" if run else ""
    for name in sorted(set(gzipped), key=len, reverse=True):
        text = re.sub(r"(?:(?<![\w./-])" + own + ")" + re.escape(name) + r"(?![\w-]|\.gz|\.\w)", name + ".gz", text)
    return text


def notes_section(done: list[tuple[str, int, str]], top: Path, commit: str) -> str:
    lines = [
        "",
        SECTION,
        "",
        "This folder keeps what its findings need (lab/runs/README.md, `lab/compact_runs.py`). The full files are in git",
        f"history: `git show {commit}:reports/{top.name}/PATH` (the folder was `reports/{top.name}/` then).",
        "",
        *_table(done),
    ]
    return "\n".join(lines) + "\n"


def again_section(done: list[tuple[str, int, str]], top: Path, commit: str) -> str:
    """A later pass over a folder compacted before (its section stays as it was, this one follows it)."""
    lines = ["", AGAIN, "", f"The files as they were before it: `git show {commit}:lab/runs/{top.name}/PATH`.", "", *_table(done)]
    return "\n".join(lines) + "\n"


def _table(done: list[tuple[str, int, str]]) -> list[str]:
    return ["| path | bytes | what |", "|---|---:|---|", *[f"| `{rel}` | {size} | {what} |" for rel, size, what in done]]


def compact(top: Path, commit: str, dry_run: bool) -> tuple[int, int]:
    """Compact one top-level run folder; (bytes before, bytes after)."""
    before = sum(p.stat().st_size for p in top.rglob("*") if p.is_file())
    writes, done, gzipped = plan(top)
    after = before + sum(len(b or b"") - (p.stat().st_size if p.exists() else 0) for p, b in writes.items())
    if not dry_run and done:
        for path, data in writes.items():
            if data is None:
                path.unlink(missing_ok=True)
        for path, data in writes.items():
            if data is not None:
                path.write_bytes(data)
        readme = top / "README.md"
        head, sep, section = readme.read_text().partition("\n" + SECTION)
        text = follow(head.rstrip("\n") + "\n", gzipped, top.name)
        if sep:  # compacted before: that record stays, this pass's follows it
            readme.write_text(text + sep + section.rstrip("\n") + "\n" + again_section(done, top, commit))
        else:
            readme.write_text(text + notes_section(done, top, commit))
    return before, after


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("folders", type=Path, nargs="+", metavar="lab/runs/RUN")
    ap.add_argument("--full-at", default="HEAD", metavar="COMMIT", help="the commit whose reports/ holds the full files")
    ap.add_argument("--dry-run", action="store_true")
    args = ap.parse_args(argv)
    total = [0, 0]
    for top in args.folders:
        if not (top / "README.md").is_file():
            print(f"compact_runs: {top}: no README.md (name a top-level folder of lab/runs)", file=sys.stderr)
            return 2
        b, a = compact(top, args.full_at, args.dry_run)
        total = [total[0] + b, total[1] + a]
        print(f"{top}: {b} -> {a} bytes")
    print(f"all: {total[0]} -> {total[1]} bytes{' (dry run)' if args.dry_run else ''}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
