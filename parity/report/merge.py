"""One run folder from several (``python -m parity merge OUT DIR [DIR ...]``, :mod:`parity.cli.merge`).

For sweeps sharded over machines or processes (one folder per GPU runner, per sys.path
group, per resumed part) that a reviewer wants as one report. What is merged:

=====================  ==========================================================================
``results.csv``        rows of every folder; a (backend, case) pair present twice is an error
                       unless both rows are identical (``--prefer-last`` keeps the later folder's)
``masks.jsonl``,       lines concatenated, exact duplicates dropped
``shrunk.jsonl``
``consistency.csv``    rows concatenated (also from ``DIR/*/consistency.csv``)
``decode/``            ``decode.csv`` / ``decode_steps.csv`` from ``DIR/decode.csv`` or
                       ``DIR/*/decode.csv``; the noise-calibration ``baseline`` rows kept once
``environment.json``   the first folder's, with ``backends`` united and ``merged_from`` listing
                       every folder's date, command, wall time and partial flag
=====================  ==========================================================================

The command then writes ``report.html``, ``summary.md`` and ``junit.xml`` for OUT; it exits 0, 2 on
bad input (a folder without results.csv, mismatched columns, conflicting rows).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .. import runfolder, runfolder_decode
from ..errors import UserError


def _lines(dirs: list[Path], name: str) -> list[str]:
    seen: dict[str, None] = {}
    for d in dirs:
        for line in runfolder.read_lines(d, name):
            if line.strip():
                seen.setdefault(line, None)
    return list(seen)


def _concat(paths: list[Path], key=None) -> tuple[list[str], list[dict[str, str]]]:
    """Rows of several CSVs with the union of their columns; ``key(row)``: drop later repeats of it."""
    fields: list[str] = []
    rows: list[dict[str, str]] = []
    seen: set = set()
    for p in paths:
        f, rs = runfolder.read_table(p)
        fields.extend(c for c in f if c not in fields)
        for r in rs:
            k = key(r) if key else None
            if k is not None:
                if k in seen:
                    continue
                seen.add(k)
            rows.append(r)
    return fields, rows


def merge(
    out: Path, dirs: list[Path], prefer_last: bool = False, extra: list[Path] | None = None, check_shards: bool = True
) -> dict[str, Any]:
    """Merge ``dirs`` into ``out``; returns counts. Raises ``ValueError`` naming what is wrong,
    a shard set with a shard missing or repeated included (``check_shards``: :mod:`parity.shard`)."""
    from ..results import COLUMNS
    from ..shard import check_shard_folders

    dirs = [Path(d) for d in dirs]
    extra = [Path(d) for d in extra or []]
    out = Path(out)
    if any(out.resolve() == d.resolve() for d in dirs + extra):
        raise ValueError(f"OUT {out} is one of the input folders; merge into a new folder")
    if out.exists() and not out.is_dir():
        raise ValueError(f"OUT {out}: not a folder (the merged folder is created there)")
    for d in extra:  # one that is not there would fold in nothing, silently
        if not d.is_dir():
            raise ValueError(f"--extra {d}: {'not a folder' if d.exists() else 'no such folder'}")
    shard_set = check_shard_folders(dirs) if check_shards else None
    rows: dict[tuple[str, str], dict[str, str]] = {}
    origin: dict[tuple[str, str], Path] = {}
    for d in dirs:
        res = runfolder.read_results(d)
        if res is None:
            raise ValueError(f"{d}: no results.csv (not a run folder)")
        missing = [c for c in ("backend", "case_id", "verdict") if c not in res.fields]
        if missing:
            raise ValueError(f"{res.path}: not a results.csv of this tool (no {', '.join(missing)} column)")
        for row in res.rows:  # finished rows only: a torn last row of a killed run is none
            r = dict(row)
            k = (r["backend"], r["case_id"])
            if k in rows and rows[k] != r and not prefer_last:
                raise ValueError(
                    f"backend {k[0]} case {k[1]} has different rows in {origin[k]} and {d} (--prefer-last keeps the later folder's)"
                )
            rows[k] = r
            origin[k] = d
    out.mkdir(parents=True, exist_ok=True)
    runfolder.write_table(out / runfolder.RESULTS, COLUMNS, list(rows.values()))
    for name in (runfolder.MASKS, runfolder.SHRUNK):
        lines = _lines(dirs, name)
        if lines:
            runfolder.write_lines(out, name, lines)
    _merge_environment(out, dirs, rows, shard_set)
    _merge_timing(out, dirs)
    sources = dirs + extra
    cons = [p for d in sources for p in runfolder.tables(d, runfolder.CONSISTENCY)]
    n_cons = 0
    if cons:
        fields, crow = _concat(cons)
        runfolder.write_table(out / runfolder.CONSISTENCY, fields, crow)
        n_cons = len(crow)
    dec = [p for d in sources for p in runfolder.tables(d, runfolder_decode.DECODE)]
    n_dec = 0
    if dec:

        def base_key(r: dict[str, str]):
            return ("baseline", r.get("model"), r.get("prompt_id"), r.get("step")) if r.get("backend") == "baseline" else None

        fields, drows = _concat(dec, base_key)
        n_dec = len(drows)
        steps = [s for p in dec if (s := runfolder_decode.decode_steps_path(p)) is not None]
        step_fields, srows = _concat(steps, base_key) if steps else ([], None)
        runfolder_decode.write_merged_decode(out, fields, drows, step_fields, srows)
    return {"rows": len(rows), "folders": len(dirs), "consistency_rows": n_cons, "decode_rows": n_dec}


def _merge_timing(out: Path, dirs: list[Path]) -> None:
    """OUT/timing.json: each merged run's shard, wall time, rows and GPUs (:func:`parity.sweep.timing.merged_timing`)."""
    from ..sweep.timing import merged_timing, write_timing

    timing = merged_timing(dirs)
    if timing:
        write_timing(out, timing)


def _merge_environment(out: Path, dirs: list[Path], rows: dict, shard_set: dict[str, Any] | None) -> None:
    """OUT/environment.json: the first folder's, with every folder's backends and what each run was
    (``shards``: the shard set it completes)."""
    envs: list[tuple[Path, Any]] = []
    for d in dirs:
        try:
            e = runfolder.read_environment(d)
        except UserError:
            continue
        if e is not None:
            envs.append((d, e))
    if envs:
        env = dict(envs[0][1])
        backends: dict[str, Any] = {}
        for _, e in envs:
            for backend, info in (e.get("backends") or {}).items():
                if backend not in backends or (backends[backend].get("unavailable") and not (info or {}).get("unavailable")):
                    backends[backend] = info
        env["backends"] = backends
        keep = ("date_utc", "command", "wall_seconds", "partial", "partial_why", "in_progress", "rows_run", "rows_in_folder", "rows_total")
        env["merged_from"] = [{"folder": str(d), **{k: e.get(k) for k in (*keep, "jobs", "earlier_runs") if k in e}} for d, e in envs]
        for k in ("partial_why", "in_progress", "run_id"):  # the first folder's; the merged run's are below
            env.pop(k, None)
        env["partial"] = any(bool(e.get("partial")) for _, e in envs) and not _complete(rows)
        if env["partial"]:
            cut = [f"{d} ({e.get('partial_why') or 'partial'})" for d, e in envs if e.get("partial")]
            env["partial_why"] = "merged from runs cut short: " + "; ".join(cut) if cut else "the merged runs do not cover every row"
        env["rows_in_folder"] = len(rows)
        walls = [e.get("wall_seconds") for _, e in envs if isinstance(e.get("wall_seconds"), (int, float))]
        env["wall_seconds"] = round(sum(walls), 2)  # summed over the merged runs (shards may have overlapped)
        env.pop("shard", None)
        if shard_set is not None:
            env["shards"] = shard_set
        runfolder.write_environment(out, env)


def _complete(rows: dict[tuple[str, str], dict[str, str]]) -> bool:
    """Every backend has a row for every case seen in the merged rows."""
    backends = {b for b, _ in rows}
    cases = {c for _, c in rows}
    return len(rows) == len(backends) * len(cases)
