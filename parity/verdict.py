"""Error budget and the numeric comparison of one backend output with the reference.

The budget follows flash-attn's test suite: the same naive computation run in the
case's own dtype (the *baseline*) shows how much error that dtype costs an honest
implementation. A backend passes the numeric part when

    max_abs_err  <= k_max  * baseline_max_abs  + floor_max
    mean_abs_err <= k_mean * baseline_mean_abs + floor_mean

with ``floor_max = max(abs_floor, 2 * rounding)``, ``rounding`` being the largest
error of the float64 reference merely rounded to the dtype (no backend can beat
that). ``k_max``, ``k_mean`` and the floors live in :data:`BUDGETS`, one row per
dtype, and can be overridden (``--budget bfloat16.k_max=3``).

Failure reasons a comparison can give (several may hold at once):

=====================  ==========================================================
``max_err``            max-abs error over budget
``mean_err``           mean-abs error over budget
``nan`` / ``inf``      non-finite values where the reference is finite
``nan_masked_rows``    NaN in rows that see no key (the contract says 0)
``unwritten``          elements of the poisoned output buffer left untouched
``mask``               the exact mask probe saw other keys than the spec allows
``gqa``                a query head read another kv head than ``h // (hq // hkv)``
``reads_outside_window``  NaN/Inf in the read probe: a paged kernel read KV positions a
                       real engine holds garbage in (pages outside every window, the
                       tail past a sequence's end, the null page padding block-table
                       slots name) and multiplied them by zero probability
``lse``                the backend's log-sum-exp (where it returns one) misses the
                       reference's on a row that sees keys by more than its own budget
                       (:func:`compare_lse`), is not finite there, or is not the
                       library's documented value on a row that sees no key
=====================  ==========================================================

The LSE budget follows the same rule on the ``(total_q, hq)`` LSE: ``k_max`` times the
same-dtype baseline's max LSE error plus ``max(abs_floor, 2 * rounding)``, ``rounding`` the
float64 reference LSE rounded to float32 (the canonical LSE dtype).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch

from .case import Case

#: Poison written into output buffers before a backend runs; no attention output can
#: equal it (outputs are convex combinations of V, and V is standard normal).
POISON = -30000.0


@dataclasses.dataclass(frozen=True)
class Budget:
    k_max: float = 2.0
    k_mean: float = 1.5
    abs_floor: float = 1e-5
    mean_floor: float = 1e-6
    rel_floor: float = 1e-2  # denominator floor for the relative error

    def replace(self, **kw: float) -> Budget:
        return dataclasses.replace(self, **kw)


BUDGETS: dict[str, Budget] = {
    "float32": Budget(k_max=2.0, k_mean=1.5, abs_floor=1e-5, mean_floor=1e-6, rel_floor=1e-3),
    "float16": Budget(k_max=2.0, k_mean=1.5, abs_floor=1e-4, mean_floor=1e-5, rel_floor=1e-2),
    "bfloat16": Budget(k_max=2.0, k_mean=1.5, abs_floor=1e-3, mean_floor=1e-4, rel_floor=1e-2),
}


def budgets_with(overrides: list[str] | None) -> dict[str, Budget]:
    """Apply ``dtype.field=value`` overrides to a copy of :data:`BUDGETS`."""
    table = dict(BUDGETS)
    fields = {f.name for f in dataclasses.fields(Budget)}
    for item in overrides or []:
        key, sep, value = item.partition("=")
        dtype, dot, field = key.partition(".")
        if not sep or not dot:
            raise ValueError(f"--budget wants DTYPE.FIELD=VALUE, got {item!r}")
        if dtype not in table:
            raise ValueError(f"--budget: unknown dtype {dtype!r}; known: {sorted(table)}")
        if field not in fields:
            raise ValueError(f"--budget: unknown field {field!r}; known: {sorted(fields)}")
        try:
            number = float(value)
        except ValueError:
            raise ValueError(f"--budget: {item!r}: {value!r} is not a number") from None
        if not math.isfinite(number) or number < 0:
            raise ValueError(f"--budget: {item!r}: value must be a finite number >= 0")
        table[dtype] = table[dtype].replace(**{field: number})
    return table


@dataclasses.dataclass
class Baseline:
    """Per-case figures shared by every backend: computed once per case."""

    ref: torch.Tensor  # (total_q, hq, d) float64
    baseline_max: float
    baseline_mean: float
    rounding_max: float
    empty_rows: torch.Tensor  # (total_q,) bool: rows that see no key
    ref_lse: torch.Tensor | None = None  # (total_q, hq) float64 reference LSE; -inf on empty rows
    lse_baseline_max: float = 0.0  # max |same-dtype LSE - reference LSE| over rows that see keys
    lse_rounding: float = 0.0  # max |reference LSE rounded to float32 - reference LSE|
    unjudgeable: str = ""  # why no budget exists (a non-finite same-dtype baseline); "" when one does


#: Elements of one row chunk of the comparison and the baseline (float64 temporaries of that size):
#: their memory grows with this, never with the whole output (``(total_q, hq, d)`` float64 several times).
CHUNK_ELEMENTS = 1 << 22


def row_chunks(total_q: int, row_elements: int, chunk_elements: int | None = None) -> list[tuple[int, int]]:
    """``[r0, r1)`` row ranges of at most ``chunk_elements`` elements each (at least one row)."""
    rows = max(1, (chunk_elements or CHUNK_ELEMENTS) // max(row_elements, 1))
    return [(r0, min(total_q, r0 + rows)) for r0 in range(0, total_q, rows)]


def empty_rows(case: Case) -> torch.Tensor:
    """``(total_q,)`` bool: the packed query rows that see no key."""
    empty = []
    for sq, sk in zip(case.q_lens, case.k_lens):
        lo, hi = case.band(sq, sk)
        empty.append(lo > hi)
    return torch.cat(empty)


def make_baseline(
    case: Case, ref: torch.Tensor, same_dtype: torch.Tensor, ref_lse: torch.Tensor | None = None, same_lse: torch.Tensor | None = None
) -> Baseline:
    """The budget's figures from the reference and the same-dtype baseline, row chunk by row chunk."""
    base_max = base_sum = rounding = 0.0
    nonfinite = 0
    for r0, r1 in row_chunks(ref.shape[0], ref[0].numel() if ref.shape[0] else 1):
        r = ref[r0:r1]  # (C, hq, d) float64
        base_err = (same_dtype[r0:r1].to(device=r.device, dtype=torch.float64) - r).abs()  # (C, hq, d)
        nonfinite += int((~torch.isfinite(base_err)).sum())  # Python's max() would drop a NaN: counted instead
        base_max = max(base_max, float(base_err.max()) if base_err.numel() else 0.0)
        base_sum += float(base_err.sum())
        rnd = (r.to(case.torch_dtype).to(torch.float64) - r).abs()  # (C, hq, d)
        rounding = max(rounding, float(rnd.max()) if rnd.numel() else 0.0)
    n = ref.numel()
    empty = empty_rows(case).to(ref.device)
    lse_base = lse_round = 0.0
    if ref_lse is not None and same_lse is not None:
        seen = ~empty[:, None].expand_as(ref_lse)  # (total_q, hq): rows that see keys
        if bool(seen.any()):
            lse_base = float((same_lse.to(ref_lse) - ref_lse).abs()[seen].max())
            lse_round = float((ref_lse.float().double() - ref_lse).abs()[seen].max())
    return Baseline(
        ref=ref,
        baseline_max=base_max,
        baseline_mean=base_sum / n if n else 0.0,
        rounding_max=rounding,
        empty_rows=empty,
        ref_lse=ref_lse,
        lse_baseline_max=lse_base,
        lse_rounding=lse_round,
        unjudgeable=baseline_overflow(case, nonfinite),
    )


def baseline_overflow(case: Case, nonfinite: int, tensor: str = "") -> str:
    """Why ``case`` has no budget in its dtype, or ``""``: a same-dtype baseline (of the output, or of gradient
    ``tensor``) with ``nonfinite`` NaN or Inf values gives a NaN mean budget (no error exceeds NaN: a check that
    could not fail), so it is not judged."""
    if not nonfinite:
        return ""
    whose = f"the same-dtype baseline's {tensor}" if tensor else "the same-dtype baseline"
    return f"{whose} overflows {case.dtype} ({nonfinite} non-finite values; no finite budget)"


def locate(case: Case, flat_row: int) -> dict[str, Any]:
    """Where a packed query row sits: sequence, row, its band and the window edges."""
    cq, _ = case.cu_seqlens()
    b = max(i for i in range(case.batch) if cq[i] <= flat_row)
    i = flat_row - cq[b]
    sq, sk = case.q_lens[b], case.k_lens[b]
    w = case.window
    d = w.offset(sq, sk)
    lo, hi = case.band(sq, sk)
    left_edge = None if w.left is None else i + d - w.left
    right_edge = None if w.right is None else i + d + w.right
    return {
        "seq": b,
        "row": i,
        "sq": sq,
        "sk": sk,
        "lo": int(lo[i]),
        "hi": int(hi[i]),
        "left_edge": left_edge,
        "right_edge": right_edge,
    }


def describe_position(case: Case, flat_row: int) -> str:
    p = locate(case, flat_row)
    n = p["hi"] - p["lo"] + 1
    band = f"keys {p['lo']}..{p['hi']} visible" if n > 0 else "no key visible"
    if p["left_edge"] is None:
        edge = "left side unbounded"
    elif p["left_edge"] < 0:
        edge = f"window still filling ({-p['left_edge']} key(s) short of full, left edge clipped at 0)"
    else:
        edge = f"window full, left edge at key {p['left_edge']}"
    return f"seq {p['seq']} row {p['row']} (Sq={p['sq']}, Sk={p['sk']}): {band}; {edge}"


@dataclasses.dataclass
class Comparison:
    max_abs_err: float
    max_rel_err: float
    mean_abs_err: float
    err_ratio: float  # max_abs_err / max(baseline_max, abs_floor)
    budget_frac: float  # max_abs_err / its threshold; <= 1 passes
    mismatch_pct: float  # % of elements whose error exceeds the max-abs threshold
    threshold_max: float
    threshold_mean: float
    baseline_max: float
    baseline_mean: float
    nan_count: int
    inf_count: int
    nan_masked_rows: int
    unwritten: int | None  # None: the backend returned its own buffer
    worst: dict[str, Any]
    reasons: list[str]
    elements: int = 0  # output elements (unwritten ones included)

    @property
    def passed(self) -> bool:
        return not self.reasons

    def worst_text(self) -> str:
        w = self.worst
        if not w:
            return "no element written to compare" if self.unwritten and self.unwritten == self.elements else "no finite element to compare"
        return f"worst |err| {w['err']:.3g} at head {w['head']} dim {w['dim']}, {w['where']}: got {w['got']:.6g}, want {w['want']:.6g}"


@dataclasses.dataclass
class _Tally:
    """What :func:`compare` sums over the row chunks."""

    nan: int = 0
    inf: int = 0
    nan_masked: int = 0
    written: int = 0
    max_abs: float = 0.0
    err_sum: float = 0.0
    max_rel: float = 0.0
    over: int = 0
    worst_val: float = -math.inf
    worst_idx: int = -1


def _tally_written_finite(t: _Tally, r0: int, got: torch.Tensor, ref: torch.Tensor, budget: Budget, thr_max: float) -> bool:
    """:func:`_tally_chunk` of a chunk whose every element is written and finite (the common one): the same sums,
    with no mask (each would select every element), in half the passes over the chunk and one read back from its
    device. False, adding nothing, where the errors' sum is not finite: a NaN or an Inf in ``got`` (or ``ref``), or
    finite errors whose sum overflows; the masks judge that chunk."""
    err = torch.sub(got, ref).abs_()  # (C, hq, d)
    rel = ref.abs().clamp_(min=budget.rel_floor)  # (C, hq, d): the relative error's denominator, then the error
    torch.div(err, rel, out=rel)
    i = err.view(-1).argmax().view(1)  # (1,)
    over = (err > thr_max).sum().to(err.dtype)
    stats = torch.stack([err.sum(), over, err.max(), rel.max(), err.view(-1).index_select(0, i)[0], i[0].to(err.dtype)])
    err_sum, n_over, max_abs, max_rel, v, idx = stats.tolist()
    if not math.isfinite(err_sum):
        return False
    t.written += got.numel()
    t.err_sum += err_sum
    t.over += int(n_over)
    t.max_abs, t.max_rel = max(t.max_abs, max_abs), max(t.max_rel, max_rel)
    if v > t.worst_val:  # strictly: the first occurrence of the maximum wins, as one argmax would
        t.worst_val, t.worst_idx = v, r0 * got[0].numel() + int(idx)
    return True


def _tally_chunk(
    t: _Tally,
    r0: int,
    got: torch.Tensor,
    ref: torch.Tensor,
    written: torch.Tensor | None,
    empty: torch.Tensor,
    budget: Budget,
    thr_max: float,
) -> None:
    """Add one row chunk (``got``, ``ref`` ``(C, hq, d)`` float64, ``written`` same shape bool or None: every
    element, ``empty`` ``(C,)``) to ``t``."""
    if written is None:
        if got.numel() and _tally_written_finite(t, r0, got, ref, budget, thr_max):
            return
        written = torch.ones(got.shape, dtype=torch.bool, device=got.device)  # (C, hq, d)
    got = torch.where(written, got, ref)  # (C, hq, d)
    finite = torch.isfinite(got)
    nan = torch.isnan(got)
    t.nan += int(nan.sum())
    t.inf += int((~finite & ~nan).sum())
    t.nan_masked += int((nan & empty[:, None, None]).sum())
    err = torch.where(finite, (got - ref).abs(), torch.zeros_like(ref))  # (C, hq, d)
    n = int(written.sum())
    t.written += n
    t.err_sum += float(err.sum())
    t.over += int((err > thr_max).sum())
    if n:
        t.max_abs = max(t.max_abs, float(err.max()))
        t.max_rel = max(t.max_rel, float((err / ref.abs().clamp(min=budget.rel_floor)).max()))
        masked = torch.where(written, err, -1.0)  # (C, hq, d)
        i = int(masked.argmax())
        v = float(masked.view(-1)[i])
        if v > t.worst_val:  # strictly: the first occurrence of the maximum wins, as one argmax would
            t.worst_val, t.worst_idx = v, r0 * got[0].numel() + i


def compare(
    case: Case,
    out: torch.Tensor,
    base: Baseline,
    budget: Budget,
    unwritten: int | None = None,
) -> Comparison:
    """Measure ``out`` (any float dtype, packed layout) against the float64 reference, in row chunks of
    :data:`CHUNK_ELEMENTS` (memory: a few chunks of float64, never the whole output several times)."""
    ref = base.ref
    floor_max = max(budget.abs_floor, 2.0 * base.rounding_max)
    thr_max = budget.k_max * base.baseline_max + floor_max
    thr_mean = budget.k_mean * base.baseline_mean + budget.mean_floor
    t = _Tally()
    empty = base.empty_rows.to(ref.device)
    for r0, r1 in row_chunks(ref.shape[0], ref[0].numel() if ref.shape[0] else 1):
        o = out[r0:r1]  # (C, hq, d), the output's dtype and device
        # elements left as the poison are the `unwritten` reason alone: the errors measure written elements only
        written = (o != POISON).to(ref.device) if unwritten else None  # (C, hq, d) bool; None: every element
        _tally_chunk(t, r0, o.to(device=ref.device, dtype=torch.float64), ref[r0:r1], written, empty[r0:r1], budget, thr_max)
    n = t.written
    mean_abs = t.err_sum / n if n else 0.0
    worst: dict[str, Any] = {}
    if n:
        idx = t.worst_idx
        th, h, c = idx // (case.hq * case.head_dim), (idx // case.head_dim) % case.hq, idx % case.head_dim
        got_v = float(out[th, h, c].to(torch.float64))
        worst = {
            **locate(case, th),
            "head": h,
            "dim": c,
            "err": t.worst_val,
            "got": got_v,
            "want": float(ref[th, h, c]),
            "where": describe_position(case, th),
        }
    reasons = ["unwritten"] if unwritten else []  # first: an unwritten output explains what follows
    if t.max_abs > thr_max:
        reasons.append("max_err")
    if mean_abs > thr_mean:
        reasons.append("mean_err")
    if t.nan_masked:
        reasons.append("nan_masked_rows")
    if t.nan > t.nan_masked:
        reasons.append("nan")
    if t.inf:
        reasons.append("inf")
    return Comparison(
        max_abs_err=t.max_abs if n else 0.0,
        max_rel_err=t.max_rel if n else 0.0,
        mean_abs_err=mean_abs,
        err_ratio=(t.max_abs if n else 0.0) / max(base.baseline_max, budget.abs_floor),
        budget_frac=(t.max_abs if n else 0.0) / thr_max if thr_max > 0 else math.inf,
        mismatch_pct=t.over / max(n, 1) * 100.0,
        threshold_max=thr_max,
        threshold_mean=thr_mean,
        baseline_max=base.baseline_max,
        baseline_mean=base.baseline_mean,
        nan_count=t.nan,
        inf_count=t.inf,
        nan_masked_rows=t.nan_masked,
        unwritten=unwritten,
        worst=worst,
        reasons=reasons,
        elements=out.numel(),
    )


@dataclasses.dataclass
class LseComparison:
    """A backend's LSE ``(total_q, hq)`` against the reference's (:func:`compare_lse`)."""

    check: str  # ok / mismatch
    max_abs_err: float  # over rows that see keys
    budget: float  # the allowed max-abs error
    detail: str


#: What a library may document as the LSE of a row that sees no key, and the test for it.
LSE_EMPTY = {
    "-inf": lambda x: torch.isneginf(x),
    "+inf": lambda x: torch.isposinf(x),
    "0": lambda x: x == 0,
    "nan": lambda x: torch.isnan(x),
    "any": lambda x: torch.ones_like(x, dtype=torch.bool),  # undocumented: recorded in the detail, not judged
}


def _value_name(x: float) -> str:
    return "nan" if math.isnan(x) else ("+inf" if x == math.inf else ("-inf" if x == -math.inf else f"{x:.6g}"))


def _rows_text(case: Case, rows: torch.Tensor, heads: torch.Tensor) -> str:
    """``seq 0 rows 3..7, seq 1 row 0; heads 0,2`` for the packed ``rows`` (with their ``heads``)."""
    cq, _ = case.cu_seqlens()
    parts = []
    for b in range(case.batch):
        sel = rows[(rows >= cq[b]) & (rows < cq[b + 1])] - cq[b]
        if sel.numel():
            lo, hi = int(sel.min()), int(sel.max())
            parts.append(f"seq {b} row {lo}" if lo == hi else f"seq {b} rows {lo}..{hi} ({int(sel.unique().numel())} rows)")
    hs = sorted(set(heads.tolist()))
    head_text = ",".join(map(str, hs[:8])) + (f",... ({len(hs)} heads)" if len(hs) > 8 else "")
    return f"{', '.join(parts[:4])}{', ...' if len(parts) > 4 else ''}; heads {head_text}"


def _empty_rows_text(case: Case, got: torch.Tensor, empty: torch.Tensor, conventions: tuple[str, ...]) -> tuple[str, bool]:
    """What the LSE holds on rows that see no key, and whether that is the library's convention."""
    if not bool(empty.any()):
        return "", True
    vals = got[empty]  # (E, hq)
    ok = torch.zeros_like(vals, dtype=torch.bool)
    for name in conventions:
        ok |= LSE_EMPTY[name](vals)
    seen = sorted({_value_name(float(x)) for x in vals.flatten()[:4096].tolist()})
    shown = ", ".join(seen[:4]) + (", ..." if len(seen) > 4 else "")
    rows = int(empty.sum())
    if bool(ok.all()):
        return f"{rows} row(s) see no key: LSE {shown} (the library's convention: {' or '.join(conventions)})", True
    bad = (~ok).nonzero()  # (n, 2): index into the empty rows, head
    flat = empty.nonzero()[:, 0][bad[:, 0]]  # (n,) packed rows
    where = _rows_text(case, flat, bad[:, 1])
    return (
        f"{int((~ok).sum())} LSE value(s) on rows that see no key are {shown}, not the library's documented "
        f"{' or '.join(conventions)}: {where}"
    ), False


def compare_lse(case: Case, lse: torch.Tensor, base: Baseline, budget: Budget, conventions: tuple[str, ...] = ("-inf",)) -> LseComparison:
    """A backend's LSE ``(total_q, hq)`` (natural log) against the reference's, per row and head: on rows
    that see keys, within ``k_max x`` the baseline's LSE error plus the floor and finite; on rows that see
    none, one of the library's documented ``conventions``."""
    assert base.ref_lse is not None
    ref = base.ref_lse.to("cpu", torch.float64)  # (total_q, hq)
    got = lse.to("cpu", torch.float64)  # (total_q, hq)
    empty = base.empty_rows.to("cpu")  # (total_q,)
    if case.sinks:  # with a learned sink every row has a normaliser: empty rows' LSE is the sink, compared as any
        empty = torch.zeros_like(empty)
    thr = budget.k_max * base.lse_baseline_max + max(budget.abs_floor, 2.0 * base.lse_rounding)
    seen = ~empty[:, None].expand_as(ref)  # (total_q, hq)
    err = torch.where(seen, (got - ref).abs(), torch.zeros_like(ref)).nan_to_num(nan=math.inf)  # (total_q, hq)
    bad = seen & ~(err <= thr)  # over budget or not finite
    max_err = float(err.max()) if err.numel() else 0.0
    parts = []
    if bool(bad.any()):
        idx = bad.nonzero()  # (n, 2): row, head
        i = int(err.argmax())
        r, h = i // case.hq, i % case.hq
        parts.append(
            f"{int(bad.sum())} of {int(seen.sum())} (row, head) LSE values over budget {thr:.3g} or not finite: "
            f"{_rows_text(case, idx[:, 0], idx[:, 1])}; worst |err| {max_err:.3g} at head {h}, {describe_position(case, r)}: "
            f"got {_value_name(float(got[r, h]))}, want {float(ref[r, h]):.6g}"
        )
    empty_text, empty_ok = _empty_rows_text(case, got, empty, conventions)
    if empty_text:
        parts.append(empty_text)
    ok = not bool(bad.any()) and empty_ok
    if ok:
        within = f"max |err| {max_err:.3g} within budget {thr:.3g}"
        parts.insert(0, f"{within} (k x same-dtype LSE baseline {base.lse_baseline_max:.3g} + floor)")
    return LseComparison("ok" if ok else "mismatch", max_err, thr, "; ".join(parts))
