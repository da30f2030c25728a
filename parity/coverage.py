"""The coverage model: the dimensions of a case that decide a fast kernel's control flow.

A case has, in each dimension, a set of values (a varlen batch can hold several length
relations at once). :func:`case_cells` computes them; the case generator
(:mod:`parity.design`) builds cases from chosen values, and the reports count, per
backend, which values it actually ran (:func:`coverage_table`).

=============  ========================================================================
dimension      values
=============  ========================================================================
``left``       ``unbounded``; ``0``; ``narrow`` (1 .. 63: the window is narrower than one
               64-key tile); ``inside`` (64 .. Sk-2); ``sk-1`` (exactly Sk-1); ``>=sk``
``right``      ``unbounded``; ``0``; ``inside`` (1 .. Sk-2); ``sk-1``; ``>=sk``
``length``     ``decode`` (Sq = 1); ``sq<sk``; ``sq=sk``; ``sq>sk``  (per sequence)
``batch``      ``single``; ``uniform`` (B > 1, one shape); ``varlen`` (mixed shapes)
``tile``       a query / key length or a left window width (``left + 1``) at ``t-1``, ``t``
               or ``t+1`` for a tile size ``t`` in 64, 128, 256 (``63`` .. ``257``); else
               ``none``
``align``      ``bottom_right``; ``top_left`` (only where some Sq != Sk; else the two agree)
``layout``     ``MHA``; ``GQA-pow2`` (ratio 2, 4, 8, ...); ``GQA-other`` (3, 6, ...); ``MQA``
``head_dim``   ``d<=32``; ``d64``; ``d128``; ``d256``; ``odd8`` (other multiples of 8);
               ``irregular`` (not a multiple of 8)
``dtype``      ``float16``; ``bfloat16``; ``float32``
``softcap``    ``none``; ``on``
``scale``      ``default`` (1/sqrt(d)); ``explicit``
``paged``      ``no``; ``yes``
``regime``     :data:`parity.regimes.REGIMES`
``empty_rows`` ``no``; ``yes`` (some query row sees no key)
``long``       ``no``; ``yes`` (a visible key range of 1024 keys or more in one row)
``fp8``        ``no``; ``kv`` (an fp8 KV cache, ``Case.kv_dtype``); ``qkv`` (and an fp8 query, ``q_fp8``)
``fp8_format`` ``none``; ``e4m3``; ``e5m2`` (the fp8 cache's format)
``fp8_scales`` ``none``; ``tensor`` (one descale); ``kv_head`` (one per kv head); ``batch_kv_head`` (one per
               sequence and kv head), as ``Case.fp8_scales`` lays them out
``sinks``      ``no``; ``yes`` (learned sink logits, ``Case.sinks``)
``chunk``      ``none``; ``on`` (chunked local attention, ``Case.chunk``)
=============  ========================================================================

The **window grid** is the product ``left x right x length`` with the five side classes
of the issue that introduced it (``narrow`` counted as ``inside``): 5 x 5 x 4 = 100 cells,
counted on bottom-right sequences in float16 / bfloat16 (the cases a flash kernel takes).
A cell is written ``"left/right/length"``, e.g. ``"inside/0/sq<sk"``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from . import runfolder
from .case import FP8_SCALES, Case
from .regimes import REGIMES
from .results import HALF_DTYPES, RAN_VERDICTS, Outcome

TILE = 64
TILES = (64, 128, 256)
TILE_VALUES = tuple(str(t + o) for t in TILES for o in (-1, 0, 1))
LONG_SPAN = 1024

DIMENSIONS: dict[str, tuple[str, ...]] = {
    "left": ("unbounded", "0", "narrow", "inside", "sk-1", ">=sk"),
    "right": ("unbounded", "0", "inside", "sk-1", ">=sk"),
    "length": ("decode", "sq<sk", "sq=sk", "sq>sk"),
    "batch": ("single", "uniform", "varlen"),
    "tile": (*TILE_VALUES, "none"),
    "align": ("bottom_right", "top_left"),
    "layout": ("MHA", "GQA-pow2", "GQA-other", "MQA"),
    "head_dim": ("d<=32", "d64", "d128", "d256", "odd8", "irregular"),
    "dtype": (*HALF_DTYPES, "float32"),
    "softcap": ("none", "on"),
    "scale": ("default", "explicit"),
    "paged": ("no", "yes"),
    "regime": REGIMES,
    "empty_rows": ("no", "yes"),
    "long": ("no", "yes"),
    "fp8": ("no", "kv", "qkv"),
    "fp8_format": ("none", "e4m3", "e5m2"),
    "fp8_scales": ("none", *FP8_SCALES),
    "sinks": ("no", "yes"),
    "chunk": ("none", "on"),
}
GRID_SIDES = ("unbounded", "0", "inside", "sk-1", ">=sk")
GRID_LENGTHS = DIMENSIONS["length"]
GRID_CELLS = tuple(f"{a}/{b}/{n}" for a in GRID_SIDES for b in GRID_SIDES for n in GRID_LENGTHS)
HALF = HALF_DTYPES


def side_class(value: int | None, sk: int, left: bool) -> str:
    """The class of one window side for a sequence of ``sk`` keys (see the module table)."""
    if value is None:
        return "unbounded"
    if value == 0:
        return "0"
    if value >= sk:
        return ">=sk"
    if value == sk - 1:
        return "sk-1"
    return "narrow" if left and value < TILE else "inside"


def length_class(sq: int, sk: int) -> str:
    if sq == 1:
        return "decode"
    return "sq<sk" if sq < sk else ("sq=sk" if sq == sk else "sq>sk")


def layout_class(hq: int, hkv: int) -> str:
    if hq == hkv:
        return "MHA"
    if hkv == 1:
        return "MQA"
    g = hq // hkv
    return "GQA-pow2" if g & (g - 1) == 0 else "GQA-other"


def head_dim_class(d: int) -> str:
    if d % 8:
        return "irregular"
    if d <= 32:
        return "d<=32"
    return {64: "d64", 128: "d128", 256: "d256"}.get(d, "odd8")


def _tiles(case: Case) -> set[str]:
    near = set(case.q_lens) | set(case.k_lens)
    if case.window.left is not None:
        near.add(case.window.left + 1)
    hits = {str(n) for n in near if str(n) in TILE_VALUES}
    return hits or {"none"}


def _sequences(case: Case) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {"left": set(), "right": set(), "length": set(), "empty_rows": set(), "long": set(), "grid": set()}
    w = case.window
    for sq, sk in zip(case.q_lens, case.k_lens):
        lo, hi = case.band(sq, sk)
        left, right, rel = side_class(w.left, sk, True), side_class(w.right, sk, False), length_class(sq, sk)
        out["left"].add(left)
        out["right"].add(right)
        out["length"].add(rel)
        out["empty_rows"].add("yes" if bool((lo > hi).any()) else "no")
        out["long"].add("yes" if int((hi - lo + 1).max()) >= LONG_SPAN else "no")
        if w.align == "bottom_right" and case.dtype in HALF:
            out["grid"].add(f"{'inside' if left == 'narrow' else left}/{right}/{rel}")
    out["empty_rows"] = {"yes"} if "yes" in out["empty_rows"] else {"no"}
    out["long"] = {"yes"} if "yes" in out["long"] else {"no"}
    return out


def case_cells(case: Case) -> dict[str, frozenset[str]]:
    """Every dimension's values for ``case``, plus ``grid``: its window-grid cells (may be empty)."""
    cells = {k: frozenset(v) for k, v in _sequences(case).items()}
    same = all(q == k for q, k in zip(case.q_lens, case.k_lens))
    batch = "single" if case.batch == 1 else ("uniform" if case.is_uniform else "varlen")
    cells.update(
        batch=frozenset({batch}),
        tile=frozenset(_tiles(case)),
        align=frozenset({"bottom_right" if same else case.window.align}),
        layout=frozenset({layout_class(case.hq, case.hkv)}),
        head_dim=frozenset({head_dim_class(case.head_dim)}),
        dtype=frozenset({case.dtype}),
        softcap=frozenset({"none" if case.softcap is None else "on"}),
        scale=frozenset({"default" if case.scale is None else "explicit"}),
        paged=frozenset({"no" if case.page_size is None else "yes"}),
        regime=frozenset({case.regime}),
        fp8=frozenset({"no" if case.kv_dtype is None else ("qkv" if case.q_fp8 else "kv")}),
        fp8_format=frozenset({"none" if case.kv_dtype is None else ("e5m2" if "e5m2" in case.kv_dtype else "e4m3")}),
        fp8_scales=frozenset({"none" if case.kv_dtype is None else case.fp8_scales}),
        sinks=frozenset({"yes" if case.sinks else "no"}),
        chunk=frozenset({"none" if case.chunk is None else "on"}),
    )
    return cells


def uncovered(cases: Iterable[Case], dimensions: Mapping[str, Iterable[str]] | None = None) -> list[Cell]:
    """The cells no case of ``cases`` holds: every value of ``dimensions`` (default: the whole model,
    :data:`DIMENSIONS`) and every window-grid cell, in the model's order; ``[]`` when every trap is held."""
    held: set[Cell] = set()
    for case in cases:
        held |= {(d, v) for d, values in case_cells(case).items() for v in values}
    wanted = [(d, v) for d, values in (dimensions or DIMENSIONS).items() for v in values]
    return [c for c in [*wanted, *(("grid", g) for g in GRID_CELLS)] if c not in held]


def matches(case: Case, condition: dict[str, Iterable[str] | str]) -> bool:
    """Does ``case`` hold, in every dimension named, at least one of the given values?

    ``{"dtype": ["float32"], "length": "sq>sk"}``: float32 and some sequence with Sq > Sk.
    Unknown dimensions or values raise ``ValueError`` (a condition that can never match
    is a typo, not a rule).
    """
    cells = case_cells(case)
    for dim, want in condition.items():
        values = {want} if isinstance(want, str) else set(want)
        known = set(GRID_CELLS) if dim == "grid" else set(DIMENSIONS.get(dim, ()))
        if not known:
            raise ValueError(f"unknown coverage dimension {dim!r}; known: {', '.join([*DIMENSIONS, 'grid'])}")
        if values - known:
            raise ValueError(f"coverage dimension {dim!r} has no value(s) {sorted(values - known)}; known: {', '.join(sorted(known))}")
        if not values & cells[dim]:
            return False
    return True


# -- what each backend ran -----------------------------------------------------------------------

#: Verdicts of a row whose backend ran the case (whatever the outcome).
RAN = RAN_VERDICTS
Cell = tuple[str, str]  # (dimension, value); dimension "grid" for window-grid cells
#: Suffix of a backend's backward in a tally (``parity run --grad``): ``"sdpa (backward)"`` counts the cells its
#: backward ran (``grad_check`` ok / mismatch / error) or refused; compared only with other backwards.
BACKWARD = " (backward)"
Tally = dict[str, dict[Cell, dict[str, int]]]  # backend -> cell -> {"ran": n, "unsupported": n, "unavailable": n}


def tally(rows: Iterable[Mapping[str, object]]) -> Tally:
    """Per backend and cell, how many rows ran, were unsupported, unavailable (rows: results.csv dicts)."""
    cells_of: dict[str, dict[str, frozenset[str]]] = {}
    out: Tally = {}
    for r in rows:
        text = str(r.get("case_json") or "")
        if not text:
            continue
        if text not in cells_of:
            try:
                cells_of[text] = case_cells(Case.from_json(text))
            except ValueError:
                cells_of[text] = {}
        verdict = str(r.get("verdict", ""))
        kind = "ran" if verdict in RAN else ("unsupported" if verdict == Outcome.UNSUPPORTED else "unavailable")
        _count(out, str(r.get("backend", "")), cells_of[text], kind)
        grad_check = str(r.get("grad_check") or "")
        if grad_check:  # --grad: the backward's cells, under "<backend> (backward)"
            kind = "unsupported" if grad_check == "unsupported" else "ran"
            _count(out, str(r.get("backend", "")) + BACKWARD, cells_of[text], kind)
    return out


def _count(out: Tally, backend: str, cells: Mapping[str, frozenset[str]], kind: str) -> None:
    per = out.setdefault(backend, {})
    for dim, values in cells.items():
        for v in values:
            slot = per.setdefault((dim, v), {"ran": 0, "unsupported": 0, "unavailable": 0})
            slot[kind] += 1


def ran_cells(t: Tally, backend: str, dim: str | None = None) -> set[Cell]:
    return {c for c, n in t.get(backend, {}).items() if n["ran"] and (dim is None or c[0] == dim)}


def grid_count(t: Tally, backend: str) -> int:
    """How many of the 100 window-grid cells ``backend`` ran."""
    return len(ran_cells(t, backend, "grid"))


def gaps(t: Tally, family: Callable[[str], str]) -> dict[str, dict[str, list[Cell]]]:
    """Per backend, the cells it ran none of that another backend of its ``family`` ran:
    ``{backend: {other: [cells]}}`` (grid cells included). A backward (:data:`BACKWARD`) is compared with
    the backwards of its family only."""

    def fam(b: str) -> str:
        return "backward " + family(b[: -len(BACKWARD)]) if b.endswith(BACKWARD) else family(b)

    out: dict[str, dict[str, list[Cell]]] = {}
    for b in t:
        mine = ran_cells(t, b)
        if not any(n["ran"] for n in t[b].values()):
            continue  # unavailable here: nothing to compare
        for o in t:
            if o == b or fam(o) != fam(b):
                continue
            missing = sorted(ran_cells(t, o) - mine)
            if missing:
                out.setdefault(b, {})[o] = missing
    return out


def describe_gap(backend: str, others: Mapping[str, list[Cell]]) -> str:
    """One line: what ``backend`` never ran that its family ran (dimension values first, grid counted)."""
    cells = sorted({c for cs in others.values() for c in cs})
    values = [f"{d}={v}" for d, v in cells if d != "grid"]
    grid = [v for d, v in cells if d == "grid"]
    parts = values[:12] + ([f"... {len(values) - 12} more"] if len(values) > 12 else [])
    if grid:
        parts.append(f"{len(grid)} window-grid cell(s) such as {grid[0]}")
    return f"{backend} ran none of: {', '.join(parts)} (which {', '.join(sorted(others))} ran)"


def csv_rows(t: Tally) -> list[dict[str, object]]:
    """``coverage.csv``: one row per backend x cell, in the model's order."""
    order = {d: i for i, d in enumerate([*DIMENSIONS, "grid"])}
    out = []
    for b, per in t.items():
        for (dim, v), n in sorted(per.items(), key=lambda kv: (order.get(kv[0][0], 99), kv[0][1])):
            out.append({"backend": b, "dimension": dim, "value": v, **n})
    return out


def read_rows(out_dir: Path) -> list[runfolder.ResultRow]:
    """The rows of ``OUT/results.csv`` (or ``results.csv.gz``), typed; ``[]`` when there is none."""
    return runfolder.read_rows(out_dir)


def write_csv(out_dir: Path, dest: Path | None = None, rows: Iterable[Mapping[str, object]] | None = None) -> Path:
    """``coverage.csv`` from the folder's results (``rows``: those already read), into ``dest``
    (default: the folder); its path."""
    fields = ["backend", "dimension", "value", "ran", "unsupported", "unavailable"]
    table = csv_rows(tally(runfolder.read_rows(out_dir) if rows is None else rows))
    return runfolder.write_table((dest or out_dir) / runfolder.COVERAGE, fields, table)
