"""The data layer of a run's reports: counts, worst rows, status, coverage and the text of a cell.

Shared by the renderers (:mod:`parity.report.html` for HTML, :mod:`parity.report.text` for
Markdown and JUnit); neither renderer imports the other, both import this.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import math
from typing import Any

from .. import coverage, runfolder
from ..backends import marker_for
from ..expect import CHECK_COLUMN, CHECK_RAN, GRAD_CHECKED, entry_ids
from ..results import Outcome
from .runs import FAILING, Run, case_text, partial_words

WORST_PER_BACKEND = 5


def records(run: Run) -> list[dict[str, Any]]:
    return run.df.to_dict("records")


def counts_by(run: Run, *keys: str) -> dict[tuple, dict[str, int]]:
    out: dict[tuple, dict[str, int]] = {}
    for r in records(run):
        k = tuple(r[x] for x in keys)
        out.setdefault(k, {}).setdefault(r["verdict"], 0)
        out[k][r["verdict"]] += 1
    return out


def worst_rows(run: Run, per_backend: int = WORST_PER_BACKEND) -> dict[str, list[dict[str, Any]]]:
    """Failing rows per backend, worst first: error / crash / timeout (no numbers to rank), then
    the largest budget fraction. Rows failing with the same error message are shown once, with
    ``_same`` = how many more rows failed that way."""
    out: dict[str, list[dict[str, Any]]] = {}
    for r in records(run):
        if r["verdict"] in FAILING:
            out.setdefault(r["backend"], []).append(r)
    for b, rows in out.items():
        rows.sort(key=lambda r: (-_finite_or(r["budget_frac_f"], math.inf),))
        kept: list[dict[str, Any]] = []
        first: dict[tuple[str, str], dict[str, Any]] = {}
        for r in rows:
            if r["verdict"] != Outcome.FAIL:
                key = (r["verdict"], (r.get("detail") or "").strip().split("\n")[0][:300])
                if key in first:
                    first[key]["_same"] += 1
                    continue
                first[key] = r = {**r, "_same": 0}
            kept.append(r)
        out[b] = kept[:per_backend]
    return out


def status_line(run: Run) -> tuple[str, str]:
    """("fail" | "pass" | "nothing", words) for the top of the reports.

    ======================================  ========  ==========================================
    rows                                    kind      words
    ======================================  ========  ==========================================
    any fail/error/crash/timeout/unexp.     fail      FAIL: n failing of N rows[, k expected ...]
    only pass (and skipped)                 pass      PASS: n rows ran and passed, s skipped ...
    pass and expected                       pass      PASS: n rows ran: p passed, k expected ...
    none ran                                nothing   NOTHING RAN: ...
    a partial run (cut short), none failing partial   PARTIAL: why; n of N rows ran; resume: ...
    ======================================  ========  ==========================================
    """
    total, bad, known = len(run.df), n_failing(run), n_expected(run)
    passed = int((run.df["verdict"] == Outcome.PASS).sum())
    ran = passed + bad + known
    known_text = f", {known} expected (known divergences)" if known else ""
    if partial_words(run):  # a cut-short run is never a green PASS
        return (Outcome.FAIL if bad else "partial"), (f"FAIL: {bad} failing of {total} rows · " if bad else "") + partial_words(run)
    if bad:
        return Outcome.FAIL, f"FAIL: {bad} failing of {total} rows{known_text}"
    if not ran:
        return "nothing", f"NOTHING RAN: {total} rows, none passed or failed (all unsupported / unavailable, or an empty run)"
    if known:
        return Outcome.PASS, f"PASS: {ran} rows ran: {passed} passed{known_text}, {total - ran} skipped with a reason"
    return Outcome.PASS, f"PASS: {ran} rows ran and passed, {total - ran} skipped with a reason"


def n_failing(run: Run) -> int:
    """Rows that make the run fail: raw failures no known divergence explains, and unexpected passes."""
    return int(run.df["verdict"].isin(FAILING).sum())


def n_expected(run: Run) -> int:
    return int((run.df["verdict"] == Outcome.EXPECTED).sum())


def why_text(r: dict[str, Any], run: Run, limit: int = 160) -> str:
    """What a failing row failed with: its reasons, its error's first line, or for an unexpected pass the entry."""
    if r.get("verdict") == Outcome.UNEXPECTED_PASS:
        e = run.expectations.get(r.get("expected_id", "")) if run.expectations else None
        return f"passed, but strict known divergence {r.get('expected_id')} expects {e.verdict if e else 'a failure'}"
    return r.get("reasons") or (r.get("detail") or "").split("\n")[0][:limit]


def known_rows(run: Run) -> list[dict[str, Any]]:
    """Per known divergence: ``{"id", "entry" (or None: not in the loaded files), "expected", "unexpected"}``;
    every loaded entry, then ids only the rows name. A row explained jointly (``expected_id`` ``a+b``) counts for
    each of its entries, so the counts of several entries may hold one row twice (:func:`n_expected` counts rows)."""
    out: dict[str, dict[str, Any]] = {}
    for e in run.expectations.entries if run.expectations else ():
        out[e.id] = {"id": e.id, "entry": e, "expected": 0, "unexpected": 0}
    for r in records(run):
        if r["verdict"] in (Outcome.EXPECTED, Outcome.UNEXPECTED_PASS):
            for k in entry_ids(r.get("expected_id")) or ["?"]:
                d = out.setdefault(k, {"id": k, "entry": None, "expected": 0, "unexpected": 0})
                d["expected" if r["verdict"] == Outcome.EXPECTED else "unexpected"] += 1
    return list(out.values())


def unmatched_entries(run: Run) -> tuple[int, list[dict[str, Any]]]:
    """How many loaded entries are for this run, and those of them that matched no row: ``{"entry", "why"}``
    each, in file order. An entry is for the run when its backend glob names a backend with a row that ran
    (a backward entry: one whose backward was checked); it matched when a row names it in ``expected_id``
    (expected, alone or jointly: ``a+b``; unexpected pass) or ``unconfirmed_id``. ``why`` says where the run's version of every such
    backend lies outside the entry's range ("" otherwise: in range, the failure did not show).

    ======================================  ==============  ==============================
    entry                                   rows naming it  listed
    ======================================  ==============  ==============================
    for no backend that ran here            any             no (another run's backends)
    backward, no backward checked here      any             no
    engine check, that check not run here   any             no
    for a backend that ran here             one or more     no
    for a backend that ran here             none            yes
    ======================================  ==============  ==============================
    """
    if not run.expectations:
        return 0, []
    df = run.df
    ran = df[df["verdict"].isin(coverage.RAN)]
    backends = set(ran["backend"])
    graded = set(ran.loc[ran["grad_check"].isin(GRAD_CHECKED), "backend"])
    checked = {r: set(ran.loc[ran[f"{col}_check"].isin(CHECK_RAN), "backend"]) for r, col in CHECK_COLUMN.items()}
    named = {i for col in ("expected_id", "unconfirmed_id") for text in set(df[col]) for i in entry_ids(text)}
    versions = runfolder.backend_versions(run.env)
    torch_version = runfolder.torch_version(run.env)
    out, n = [], 0
    for e in run.expectations.entries:
        pool = set.intersection(graded if e.backward else backends, *(checked[r] for r in e.checks))
        mine = [b for b in pool if fnmatch.fnmatchcase(b, e.backend)]
        n += bool(mine)
        if not mine or e.id in named:
            continue
        outside = e.versions is not None and not any(e.versions.admits(versions.get(b, ""), torch_version) for b in mine)
        out.append({"entry": e, "why": f"version outside {e.versions.text}" if outside and e.versions else ""})
    return n, out


def _finite_or(v: float, default: float) -> float:
    return v if isinstance(v, float) and not math.isnan(v) else default


def fmt(v: Any, digits: int = 3) -> str:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return str(v) if v not in (None, "") else "–"
    if math.isnan(f):
        return "–"
    return f"{f:.{digits}g}"


def gpu_text(env: dict[str, Any]) -> str:
    g = env.get("gpu") or {}
    if not g:
        return "unknown"
    if not g.get("available"):
        return "none (CPU only)"
    bits = [f"{g.get('count', 1)} x {g.get('name', '?')}"]
    for k, label in (("memory_gib", "GiB"), ("capability", "sm"), ("cuda", "CUDA"), ("driver", "driver")):
        if g.get(k):
            bits.append(f"{g[k]} GiB" if k == "memory_gib" else f"{label} {g[k]}")
    return ", ".join(bits)


def consistency_counts(run: Run) -> dict[str, dict[str, int]]:
    """Per backend, how many consistency rows got each verdict."""
    out: dict[str, dict[str, int]] = {}
    for r in run.consistency:
        c = out.setdefault(r["backend"], {})
        c[r.get("verdict", "")] = c.get(r.get("verdict", ""), 0) + 1
    return out


#: Names a decode CSV may use for its step axis and its error measure (first match wins).
DECODE_X = ("step", "decode_step", "position", "pos", "token", "t")
DECODE_GROUP = ("backend", "name", "case_id")


def decode_series(df) -> tuple[str, str, list[tuple[str, list[tuple[float, float]]]]] | None:
    """Find (step column, error column, lines per backend) in a decode CSV, or None if it has no such shape."""
    import pandas as pd

    cols = list(df.columns)
    xcol = next((c for c in DECODE_X if c in cols), None)
    errs = [c for c in cols if c != xcol and any(w in c.lower() for w in ("diverg", "err", "diff"))]
    errs = [c for c in errs if pd.to_numeric(df[c], errors="coerce").notna().any()]
    if xcol is None or not errs:
        return None
    ycol = errs[0]
    group = next((c for c in DECODE_GROUP if c in cols), None)
    x = pd.to_numeric(df[xcol], errors="coerce")
    y = pd.to_numeric(df[ycol], errors="coerce")
    series: list[tuple[str, list[tuple[float, float]]]] = []
    keys = list(dict.fromkeys(df[group])) if group else ["all"]
    for k in keys[:8]:
        sel = (df[group] == k) if group else pd.Series(True, index=df.index)
        worst: dict[float, float] = {}  # the largest value per step (over models and prompts)
        for a, b in zip(x[sel], y[sel]):
            if not (math.isnan(a) or math.isnan(b)):
                worst[float(a)] = max(worst.get(float(a), -math.inf), float(b))
        if worst:
            series.append((str(k), sorted(worst.items())))
    return (xcol, ycol, series) if series else None


@dataclasses.dataclass
class CoverageData:
    backends: list[str]
    tally: coverage.Tally
    grid: dict[str, int]  # backend -> window-grid cells run (of 100)
    never: dict[str, list[coverage.Cell]]  # backend -> model values (not grid) it ran none of
    gaps: dict[str, dict[str, list[coverage.Cell]]]  # backend -> family member -> cells only the member ran
    note: str  # the long-case cap, when the run had one


def coverage_data(run: Run) -> CoverageData:
    """Which cells of the coverage model (:mod:`parity.coverage`) each backend ran; gaps within a family."""
    t = coverage.tally(run.df.to_dict("records"))
    ran_any = [b for b in run.backends() if any(n["ran"] for n in t.get(b, {}).values())]
    never = {}
    for b in ran_any:
        per = t.get(b, {})
        never[b] = [(d, v) for d, vs in coverage.DIMENSIONS.items() for v in vs if not per.get((d, v), {}).get("ran")]
    design = run.env.get("design") or {}
    return CoverageData(
        run.backends(),
        t,
        {b: coverage.grid_count(t, b) for b in run.backends()},
        never,
        coverage.gaps(t, marker_for),
        str(design.get("long_cap_why") or ""),
    )


def model_counts(run: Run) -> dict[tuple[str, str], dict[str, dict[str, int]]]:
    """Rows of models-profile cases: ``(model, layer) -> backend -> verdict -> count`` (empty: none in the run)."""
    if "model" not in run.df.columns:
        return {}
    out: dict[tuple[str, str], dict[str, dict[str, int]]] = {}
    for r in records(run):
        if r.get("model"):
            per = out.setdefault((r["model"], r.get("layer") or ""), {}).setdefault(r["backend"], {})
            per[r["verdict"]] = per.get(r["verdict"], 0) + 1
    return out


def verdict_words(c: dict[str, int]) -> str:
    """``{"pass": 9, "fail": 1}`` as ``pass 9, fail 1`` (verdicts in report order)."""
    from ..results import VERDICTS

    return ", ".join(f"{v} {c[v]}" for v in VERDICTS if c.get(v))


def peak_memory(run: Run) -> dict[str, tuple[float, float, int]]:
    """Per backend, the ``peak_mem_mb`` of its rows: (max, median, rows with a number); {} when the run has no such column."""
    if "peak_mem_mb" not in run.df.columns:
        return {}
    import pandas as pd

    out = {}
    mem = pd.to_numeric(run.df["peak_mem_mb"], errors="coerce")
    for b in run.backends():
        vals = mem[run.df["backend"] == b].dropna()
        if len(vals):
            out[b] = (float(vals.max()), float(vals.median()), int(len(vals)))
    return out


def reduced_note(run: Run) -> str:
    """Why a models run ran at reduced lengths ("" when it did not)."""
    return str((run.env.get("design") or {}).get("reduced_why") or "")


def shared_note(run: Run) -> str:
    """A models run's layer kinds run once for two models (``design["shared_calls"]``, :func:`parity.models.shared_calls`),
    in words ("" when none)."""
    shared = (run.env.get("design") or {}).get("shared_calls") or {}
    return "; ".join(f"{k} ran as {v} (the same calls)" for k, v in shared.items())


def work_split(run: Run) -> str:
    """How the run's work was split (shard, lanes, GPUs; merged shards), from its timing.json: one
    line, or "" for one lane on no GPU (:func:`parity.sweep.timing.split_line`)."""
    if not run.timing:
        return ""
    from ..sweep.timing import split_line

    return split_line(run.timing)


def gate_note(run: Run) -> str:
    """The run's memory gates in one line (rows that ran alone, the lanes' waits), from its timing.json; "" where it
    records none (:func:`parity.sweep.timing.gate_line`)."""
    if not run.timing:
        return ""
    from ..sweep.timing import gate_line

    return gate_line(run.timing)


def stage_rows(run: Run) -> tuple[list[str], list[list[str]]]:
    """Where each backend's seconds went (its timing.json's ``stages``): a header and rows of cells,
    no rows when the run recorded none (:func:`parity.sweep.timing.stage_table`)."""
    if not run.timing:
        return [], []
    from ..sweep.timing import stage_table

    return stage_table(run.timing)


def case_dict_text(case: dict[str, Any]) -> str:
    """A shrunk.jsonl case (Case.to_dict) in the words of case_text."""
    if not case:
        return ""
    w = case.get("window") or {}
    lens = lambda k: " ".join(str(x) for x in case.get(k) or [])  # noqa: E731
    row = {
        "family": "",
        "dtype": case.get("dtype", ""),
        "q_lens": lens("q_lens"),
        "k_lens": lens("k_lens"),
        "hq": str(case.get("hq", "")),
        "hkv": str(case.get("hkv", "")),
        "head_dim": str(case.get("head_dim", "")),
        "window_left": "" if w.get("left") is None else str(w["left"]),
        "window_right": "" if w.get("right") is None else str(w["right"]),
        "align": w.get("align", ""),
        "softcap": case.get("softcap") or "",
        "page_size": case.get("page_size") or "",
    }
    return case_text(row)


def _case_size(case: dict[str, Any]) -> tuple[int, int]:
    """(query x key elements x heads, head dim) of a case dict (Case.to_dict / a row's case_json)."""
    q, k = sum(case.get("q_lens") or [0]), sum(case.get("k_lens") or [0])
    return (q * k * int(case.get("hq") or 1), int(case.get("head_dim") or 0))


def smallest_failing(run: Run) -> dict[str, dict[str, Any]]:
    """Per backend, the smallest failing case of the run (by query x key elements x heads, then head
    dim) among its failing rows and its shrunk cases: ``{size, text, verdict, why, repro, source}``
    (``source``: "row CASE_ID" or "shrunk from case CASE_ID")."""
    found: dict[str, list[tuple[tuple[int, int], dict[str, Any]]]] = {}
    for r in records(run):
        if r["verdict"] not in FAILING or not r.get("case_json"):
            continue
        try:
            case = json.loads(r["case_json"])
        except (TypeError, ValueError):
            continue
        item = {
            "text": case_text(r),
            "verdict": r["verdict"],
            "why": why_text(r, run),
            "repro": r.get("repro") or "",
            "source": f"row {r['case_id']}",
        }
        found.setdefault(r["backend"], []).append((_case_size(case), item))
    for s in run.shrunk:
        case = s.get("case") if isinstance(s.get("case"), dict) else None
        if case and s.get("backend"):
            item = {
                "text": case_dict_text(case),
                "verdict": s.get("verdict", ""),
                "why": s.get("reasons", ""),
                "repro": s.get("repro", ""),
                "source": f"shrunk from case {s.get('from')}",
            }
            found.setdefault(s["backend"], []).append((_case_size(case), item))
    out = {}
    for b, items in found.items():
        size, item = min(items, key=lambda x: x[0])
        out[b] = {**item, "size": size[0]}
    return out


#: The engine checks' columns and their names in the reports.
CHECK_NAMES = {"invariance": "batch invariance", "graph": "graph replay"}


def engine_checks(run: Run) -> dict[str, dict[str, dict[str, int]]]:
    """Per backend, per engine check (:data:`CHECK_NAMES`), its rows by ``*_check`` value; empty where no row of
    the run ran either check (``ok`` / ``close`` / ``mismatch`` / ``error``: a run without ``--invariance`` or
    ``--graph-replay`` has only ``not_run`` there, or nothing, and no section)."""
    df = run.df
    ran = [c for c in CHECK_NAMES if (df[f"{c}_check"].isin(CHECK_RAN) | (df[f"{c}_check"] == "error")).any()]
    if not ran:
        return {}
    out: dict[str, dict[str, dict[str, int]]] = {}
    for r in records(run):
        for c in CHECK_NAMES:
            value = str(r.get(f"{c}_check") or "")
            if value:
                cell = out.setdefault(r["backend"], {}).setdefault(c, {})
                cell[value] = cell.get(value, 0) + 1
    return out


def check_words(cell: dict[str, int] | None) -> str:
    """One engine check's counts for a backend: ``ok 12 · mismatch 2 · not_run 5``; ``–`` for none."""
    order = ("mismatch", "error", "close", "ok", "not_run")
    return " · ".join(f"{k} {cell[k]}" for k in sorted(cell, key=lambda k: (order.index(k) if k in order else 9, k))) if cell else "–"
