"""Loading a run folder (``results.csv``, ``environment.json``, ``masks.jsonl``, decode results).

Used by the reports (:mod:`parity.report`) and :mod:`parity.report.diff`. pandas is imported lazily (it is in the
``report`` and ``test`` extras); bad input raises :class:`parity.errors.UserError` with one line.

Runs older than known divergences (:mod:`parity.expect`) have no ``raw_verdict`` /
``expected_id`` columns: they are added empty, so those runs load, render and diff beside new
ones. :func:`load_run` with ``expectations`` judges the rows that lack a ``raw_verdict``
(or, with ``rejudge``, every row anew from its raw verdict):

=================  ==============  ==========================================================
``expectations``   ``rejudge``     rows judged
=================  ==============  ==========================================================
None               (ignored)       none: the verdicts as written
given              False           rows without ``raw_verdict`` (older runs); the others keep
                                   the verdicts the run gave them
given              True            every row, from ``raw_verdict`` (``--expect`` on report / diff)
=================  ==============  ==========================================================
"""

from __future__ import annotations

import dataclasses
import fnmatch
import math
from pathlib import Path
from typing import Any

from .. import runfolder, runfolder_decode
from ..case import FAMILIES, Case
from ..errors import UserError
from ..expect import Expectations
from ..judge import expect_verdict
from ..results import (
    ADDED_COLUMNS,
    DTYPES,
    LSE_OLD_WORDS,
    NUMERIC,
    RAW_FAIL_VERDICTS,  # noqa: F401 - re-exported for report and diff
    VERDICTS,  # noqa: F401 - re-exported for report and diff
    Verdict,
)
from ..results import FAIL_VERDICTS as FAILING  # noqa: F401 - re-exported for report and diff

#: A results.csv must have at least these columns to be reported on.
REQUIRED = ("backend", "case_id", "family", "dtype", "verdict")


@dataclasses.dataclass
class Run:
    path: Path
    df: Any  # pandas.DataFrame: every column as str ("" = empty), plus NUMERIC as float columns "<name>_f"
    env: dict[str, Any]
    masks: list[dict[str, Any]]
    decode: Any | None  # pandas.DataFrame of decode.csv, or None
    decode_path: Path | None
    decode_steps: Any | None = None  # pandas.DataFrame of decode_steps.csv beside decode.csv (per step), or None
    shrunk: list[dict[str, Any]] = dataclasses.field(default_factory=list)  # shrunk.jsonl: smaller failing cases
    consistency: list[dict[str, str]] = dataclasses.field(default_factory=list)  # consistency.csv (parity.consistency)
    expectations: Expectations | None = None  # the known divergences the verdicts were judged with (explanations)
    results_path: Path | None = None  # results.csv or results.csv.gz
    timing: dict[str, Any] = dataclasses.field(default_factory=dict)  # timing.json (how the work was split), or {}

    @property
    def columns(self) -> list[str]:
        return [c for c in self.df.columns if not c.endswith("_f")]

    def rows(self) -> list[runfolder.ResultRow]:
        """The rows as typed rows (:class:`parity.runfolder.ResultRow`): their text cells as read, and as judged
        when the run was judged here; the float copies of NUMERIC (``*_f``) are the DataFrame's only."""
        return [runfolder.ResultRow.of(r) for r in self.df[self.columns].to_dict("records")]

    def backends(self) -> list[str]:
        """Backends in the order the run asked for them (environment.json), then any others as they appear."""
        present = list(dict.fromkeys(self.df["backend"]))
        asked = [b for b in (self.env.get("backends") or {}) if b in set(present)]
        return asked + [b for b in present if b not in set(asked)]


def _pandas():
    try:
        import pandas as pd
    except ImportError:  # pragma: no cover - pandas is in the report/test extras
        raise UserError("reports need pandas: pip install 'attn-parity[report]'") from None
    return pd


def read_results(path: Path):
    """``results.csv`` (or a .csv.gz) as a DataFrame of strings, checked for the required columns."""
    if not path.exists():
        raise UserError(f"{path}: no such file (is this a parity run folder?)")
    return frame(runfolder.read_results_file(path))


def frame(results: runfolder.Results):
    """A folder's rows, read once (:func:`parity.runfolder.read_results`), as a DataFrame of strings
    checked for the required columns; older runs' missing columns added empty, NUMERIC as floats."""
    pd = _pandas()
    missing = [c for c in REQUIRED if c not in results.fields]
    if missing:
        raise UserError(f"{results.path}: not a parity results.csv (missing columns: {', '.join(missing)})")
    df = pd.DataFrame([r.cells for r in results.rows], columns=list(dict.fromkeys(results.fields)), dtype=str)  # a repeated column once
    for c in ADDED_COLUMNS:
        if c not in df.columns:
            df[c] = ""
    df["lse_check"] = df["lse_check"].replace(LSE_OLD_WORDS)  # an older run's pass / fail
    for c in NUMERIC:
        df[c + "_f"] = pd.to_numeric(df[c], errors="coerce") if c in df.columns else float("nan")
    return df


def load_run(
    folder: Path | str, expectations: Expectations | None = None, rejudge: bool = False, results: runfolder.Results | None = None
) -> Run:
    """The run in ``folder``; ``expectations`` / ``rejudge``: see the module docstring; ``results``:
    its rows when already read (``parity run`` reads them once)."""
    folder = Path(folder)
    if not folder.exists():
        raise UserError(f"{folder}: no such folder")
    if not folder.is_dir():
        raise UserError(f"{folder}: not a folder (give the run folder that holds results.csv)")
    if results is None:
        results = runfolder.read_results(folder)
    if results is None:
        raise UserError(f"{folder / runfolder.RESULTS}: no such file (is this a parity run folder?)")
    df = frame(results)
    env = runfolder.read_environment(folder)
    timing = runfolder.read_timing(folder)
    env = _mark_partial(env, timing)
    decode, decode_path, steps = _decode(folder)
    consistency = runfolder.read_consistency(folder)
    run = Run(
        folder,
        df,
        env,
        runfolder.read_jsonl(folder / runfolder.MASKS),
        decode,
        decode_path,
        steps,
        runfolder.read_jsonl(folder / runfolder.SHRUNK),
        consistency,
        results_path=results.path,
        timing=timing,
    )
    return judge_run(run, expectations, rejudge) if expectations is not None else run


def _decode(folder: Path) -> tuple[Any, Path | None, Any]:
    """decode.csv (beside the rows or in decode/), its path, and decode_steps.csv beside it (None when absent)."""
    found = runfolder_decode.read_decode(folder)
    if found is None:
        return None, None, None
    decode_path, text, steps = found
    return _csv_frame(text), decode_path, None if steps is None else _csv_frame(steps)


def _csv_frame(text: str) -> Any:
    """A CSV's text as a DataFrame of strings; None when pandas cannot parse it."""
    import io

    pd = _pandas()
    try:
        return pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError):
        return None


def _mark_partial(env: dict[str, Any] | None, timing: dict[str, Any]) -> dict[str, Any]:
    """``env["partial"]`` also for a run cut short before it wrote environment.json (Ctrl-C, a crash):
    timing.json, rewritten after every case, says ``partial`` until the sweep ends. ``env["missing"]``:
    no environment.json (its words replace "torch ? · GPU: unknown")."""
    env_found = env is not None
    env = {} if env is None else env
    if not env_found:
        env["missing"] = True
    if timing.get("partial") and not env.get("partial"):
        env["partial"], env["partial_why"] = True, "interrupted (Ctrl-C or a crash) before the sweep ended"
    elif not env_found and not timing:
        env["partial"], env["partial_why"] = True, "no environment.json nor timing.json: the run did not finish"
    return env


def partial_words(run: Run) -> str:
    """One line for a partial run: how much ran and how to resume ('' for a complete run)."""
    env = run.env
    if not env.get("partial"):
        return ""
    why = env.get("partial_why") or "stopped by --time-limit or --fail-fast"
    total = env.get("rows_total")
    ran = f"{len(run.df)} of {total} rows ran" if total else f"{len(run.df)} rows ran"
    return f"PARTIAL: {why}; {ran}; resume: parity run --resume --out {run.path}"


def judge_run(run: Run, expectations: Expectations, rejudge: bool = False) -> Run:
    """``run`` with its rows judged against ``expectations`` (the module docstring's table) by the one
    judge (:func:`parity.judge.expect_verdict`), using the backend versions and torch version its
    ``environment.json`` recorded. Each row judged is parsed once into a :class:`parity.results.Verdict`."""
    pd = _pandas()
    versions = runfolder.backend_versions(run.env)
    torch_version = runfolder.torch_version(run.env)
    cases: dict[str, Case] = {}
    recs = run.df.to_dict("records")
    for r in recs:  # only the verdict columns change: the rest stays the text the run wrote
        if rejudge or not r.get("raw_verdict"):
            v = expect_verdict(
                Verdict.from_row(r),
                expectations,
                r["backend"],
                _case(r, expectations, cases),
                r.get("case_json", ""),
                versions.get(r["backend"], ""),
                torch_version,
            )
            r.update(verdict=v.verdict, raw_verdict=v.raw_verdict or "", expected_id=v.expected_id, unconfirmed_id=v.unconfirmed_id)
    df = pd.DataFrame(recs, columns=run.df.columns) if recs else run.df
    return dataclasses.replace(run, df=df, expectations=expectations)


def _case(row: dict[str, Any], expectations: Expectations, cases: dict[str, Case]) -> Case | None:
    """The row's case, parsed once per case_json, where an entry's backend glob names the row's backend."""
    key = str(row.get("case_json", ""))
    if key not in cases and key and any(fnmatch.fnmatchcase(str(row["backend"]), e.backend) for e in expectations.entries):
        cases[key] = Case.from_json(key)
    return cases.get(key)


def save_results(run: Run) -> Path:
    """Write ``run``'s rows (verdicts as judged now) back over its results.csv (or .csv.gz)."""
    return runfolder.rewrite_results(run.path, run.results_path, run.df[run.columns])


def num(v: Any) -> float:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return math.nan
    return f


def family_order(values) -> list[str]:
    vals = list(dict.fromkeys(values))
    return [f for f in FAMILIES if f in vals] + sorted(v for v in vals if v not in FAMILIES)


def dtype_order(values) -> list[str]:
    vals = list(dict.fromkeys(values))
    return [d for d in DTYPES if d in vals] + sorted(v for v in vals if v not in DTYPES)


def case_text(row: dict[str, Any]) -> str:
    """A short human description of a case from its results row."""
    bits = [row.get("family", ""), row.get("dtype", "")]
    if row.get("q_lens"):
        bits.append(f"Sq={row['q_lens'].replace(' ', ',')} Sk={row.get('k_lens', '').replace(' ', ',')}")
    if row.get("hq"):
        bits.append(f"h={row['hq']}/{row.get('hkv', '')} d={row.get('head_dim', '')}")
    left = row.get("window_left", "")
    right = row.get("window_right", "")
    if "window_left" in row:
        bits.append(f"window({left or 'None'},{right or 'None'}{',' + row['align'] if row.get('align') == 'top_left' else ''})")
    for k in ("softcap", "page_size"):
        if row.get(k):
            bits.append(f"{k}={row[k]}")
    if row.get("model"):
        bits.append(f"[{row['model']}{'/' + row['layer'] if row.get('layer') else ''}]")
    return " ".join(b for b in bits if b)
