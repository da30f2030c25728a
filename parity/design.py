"""Coverage-directed case design: cases built from chosen values of the coverage model.

:mod:`parity.coverage` names the dimensions that decide a kernel's control flow; this
module builds cases from them, in three ways that share one builder (:func:`concretize`):

* :func:`grid_rows` - one case per window-grid cell (left x right x length, 100 cells),
  each in float16 / bfloat16, bottom-right, no softcap, contiguous KV, a head dim every
  flash kernel takes: the cases fast kernels accept;
* :func:`pairwise_rows` - a greedy covering array (AETG-style): every pair of values of
  two design dimensions appears in some case (pairs no case can hold are dropped, e.g.
  top-left alignment with ``Sq == Sk``), continuing from the pairs the grid already holds;
* :func:`design_cases` - a hypothesis strategy drawing one value per dimension, for the
  pytest property tests (``pytest -k BACKEND`` sees the same model);
* :func:`long_rows` - long key ranges (windows of 1k-4k keys, ``Sk`` up to the profile's
  ``long_len``) in half precision, where accumulation error grows.

Values a profile cannot hold (a tile length above ``max_len``, an ``inside`` window on
sequences too short for it) are left out of that profile's design.
"""

from __future__ import annotations

import dataclasses
import itertools
import random
from collections.abc import Mapping, Sequence

from hypothesis import assume
from hypothesis import strategies as st

from .backends.base import refusal_reason
from .case import Case
from .coverage import DIMENSIONS, GRID_LENGTHS, GRID_SIDES, TILE, TILE_VALUES
from .results import HALF_DTYPES
from .window import SpecError, Window

DESIGN_DIMS = (
    "left", "right", "length", "batch", "tile", "align", "layout", "head_dim", "dtype", "softcap", "scale", "paged", "regime",
    "sinks", "chunk",
)  # fmt: skip
#: Dimensions a design row leaves at their first value unless it names them (features most backends lack)
OFF_UNLESS_NAMED = ("sinks", "chunk")
SOFTCAPS = (1.0, 5.0, 30.0)
SCALES = (0.5, 0.05)
PAGES = (16, 64)
HEADS = {
    "MHA": ((1, 1), (2, 2), (4, 4), (8, 8)),
    "GQA-pow2": ((4, 2), (8, 2), (8, 4), (16, 2)),
    "GQA-other": ((6, 2), (12, 4), (9, 3), (12, 2)),
    "MQA": ((2, 1), (4, 1), (6, 1), (8, 1)),
}
DIMS_OF = {"d<=32": (16, 32), "d64": (64,), "d128": (128,), "d256": (256,), "odd8": (40, 72, 80, 96), "irregular": (20, 33)}
#: What a flash kernel takes: the grid's fixed values.
FLASH_FIXED = {"align": "bottom_right", "softcap": "none", "paged": "no", "sinks": "no", "chunk": "none"}
FLASH_HEAD_DIMS = ("d<=32", "d64", "d128", "odd8", "d256")
INSIDE_MIN_SK = TILE + 2  # an "inside" left side (64 .. Sk-2) needs Sk >= 66


@dataclasses.dataclass(frozen=True)
class Limits:
    """Sizes a profile allows: the longest drawn sequence, the batch, the longest key range."""

    max_len: int
    max_batch: int
    long_len: int = 0
    dtypes: tuple[str, ...] = DIMENSIONS["dtype"]


def design_values(limits: Limits) -> dict[str, tuple[str, ...]]:
    """Each design dimension's values that cases within ``limits`` can hold."""
    values = {d: DIMENSIONS[d] for d in DESIGN_DIMS}
    values["dtype"] = tuple(d for d in values["dtype"] if d in limits.dtypes)
    values["tile"] = (*(t for t in TILE_VALUES if int(t) <= limits.max_len), "none")
    if limits.max_len < INSIDE_MIN_SK:
        values["left"] = tuple(v for v in values["left"] if v != "inside")
    if limits.max_batch < 2:
        values["batch"] = ("single",)
    return values


# -- the builder ---------------------------------------------------------------------------------


def _need_sk(left: str, right: str) -> int:
    """The fewest keys a sequence needs for these side classes."""
    need = {"narrow": 3, "inside": INSIDE_MIN_SK, "sk-1": 2}
    return max(need.get(left, 1), {"inside": 3, "sk-1": 2}.get(right, 1))


def _side(cls: str, sk: int, rng: random.Random, left: bool) -> int | None:
    if cls == "unbounded":
        return None
    if cls == "0":
        return 0
    if cls == "sk-1":
        return sk - 1
    if cls == ">=sk":
        return rng.choice([sk, sk + 1, rng.randint(sk, 2 * sk + 2)])
    if cls == "narrow":
        top = min(TILE - 1, sk - 2)
        return rng.choice([1, top, rng.randint(1, top)])
    lo = INSIDE_MIN_SK - 2 if left else 1  # "inside": 64 .. Sk-2 on the left, 1 .. Sk-2 on the right
    edges = [e for e in (63, 64, 127, 128, 255, 256) if lo <= e <= sk - 2]
    return rng.choice([*edges, rng.randint(lo, sk - 2)])


def _main_lengths(rel: str, tile: str, need: int, limits: Limits, rng: random.Random) -> tuple[int, int] | None:
    """``(Sq, Sk)`` of the designed sequence: ``rel`` holds, a tile length sits on Sq or Sk."""
    top = limits.max_len
    t = None if tile == "none" else int(tile)
    if rel == "decode":
        sk = t if t is not None else rng.randint(need, max(need, top))
        return (1, sk) if sk >= need else None
    if rel == "sq=sk":
        s = t if t is not None else rng.randint(max(2, need), max(2, need, top))
        return (s, s) if s >= max(2, need) else None
    if rel == "sq<sk":
        if t is not None and t >= max(3, need) and (t > top - 1 or rng.random() < 0.5):
            return rng.randint(2, t - 1), t  # the tile on Sk
        if t is not None and t >= 2 and t + 1 <= top:
            return t, rng.randint(max(t + 1, need), max(t + 1, need, top))  # on Sq: row tiles
        if t is not None:
            return None
        sk = rng.randint(max(3, need), max(3, need, top))
        return rng.randint(2, sk - 1), sk
    # sq > sk: the tile on Sq (row tiles), keys fewer
    sq = t if t is not None else rng.randint(max(3, need + 1), max(3, need + 1, top))
    if sq - 1 < need:
        return None
    return sq, rng.randint(need, sq - 1)


def _batch(kind: str, main: tuple[int, int], limits: Limits, rng: random.Random) -> tuple[tuple[int, ...], tuple[int, ...]]:
    if kind == "single" or limits.max_batch < 2:
        return (main[0],), (main[1],)
    b = rng.randint(2, limits.max_batch)
    if kind == "uniform":
        return (main[0],) * b, (main[1],) * b
    qs, ks = [main[0]], [main[1]]
    for _ in range(b - 1):  # other shapes, other relations
        sk = rng.randint(1, limits.max_len)
        qs.append(rng.choice([1, sk, rng.randint(1, sk), rng.randint(1, limits.max_len)]))
        ks.append(sk)
    return tuple(qs), tuple(ks)


def concretize(row: Mapping[str, str], rng: random.Random, limits: Limits) -> Case | None:
    """A case holding every value of ``row`` (dimension -> value), the rest drawn from ``rng``;
    None where the values cannot hold together (the design drops that row)."""
    pick = {d: row.get(d) or (v[0] if d in OFF_UNLESS_NAMED else rng.choice(v)) for d, v in design_values(limits).items()}
    main = _main_lengths(pick["length"], pick["tile"], _need_sk(pick["left"], pick["right"]), limits, rng)
    if main is None or (pick["align"] == "top_left" and main[0] == main[1]):
        return None
    q_lens, k_lens = _batch(pick["batch"], main, limits, rng)
    sk = main[1]
    hq, hkv = rng.choice(HEADS[pick["layout"]])
    try:
        window = Window(_side(pick["left"], sk, rng, True), _side(pick["right"], sk, rng, False), pick["align"])  # type: ignore[arg-type]
        return Case(
            q_lens=q_lens,
            k_lens=k_lens,
            hq=hq,
            hkv=hkv,
            head_dim=rng.choice(DIMS_OF[pick["head_dim"]]),
            dtype=pick["dtype"],
            window=window,
            scale=None if pick["scale"] == "default" else rng.choice(SCALES),
            softcap=None if pick["softcap"] == "none" else rng.choice(SOFTCAPS),
            page_size=None if pick["paged"] == "no" else rng.choice(PAGES),
            seed=rng.randrange(2**31),
            regime=pick["regime"],
            sinks=pick["sinks"] == "yes",
            chunk=None if pick["chunk"] == "none" else _chunk(sk, rng),
        )
    except SpecError:
        return None


def _chunk(sk: int, rng: random.Random) -> int:
    """A chunk size that splits ``sk`` keys (at least two chunks where ``sk >= 2``)."""
    return max(1, rng.choice((sk // 3, sk // 2, 16, 64)) if sk >= 4 else 1)


# -- covering designs ----------------------------------------------------------------------------

Pair = tuple[tuple[str, str], tuple[str, str]]


def all_pairs(values: Mapping[str, Sequence[str]]) -> set[Pair]:
    """Every pair of values of two dimensions, minus those no case can hold."""
    out: set[Pair] = set()
    for d1, d2 in itertools.combinations(DESIGN_DIMS, 2):
        for v1, v2 in itertools.product(values[d1], values[d2]):
            out.add(((d1, v1), (d2, v2)))
    out.discard((("length", "sq=sk"), ("align", "top_left")))  # top-left equals bottom-right there
    return out


def row_pairs(row: Mapping[str, str]) -> set[Pair]:
    items = [(d, row[d]) for d in DESIGN_DIMS if d in row]
    return {(a, b) for a, b in itertools.combinations(items, 2)}


def _fill(preset: Mapping[str, str], values: Mapping[str, Sequence[str]], open_pairs: set[Pair], rng: random.Random) -> dict[str, str]:
    """Complete ``preset`` dimension by dimension, each time with the value that closes most open pairs."""
    row = dict(preset)
    rest = [d for d in DESIGN_DIMS if d not in row]
    rng.shuffle(rest)
    for d in rest:

        def gain(v: str, d: str = d) -> tuple[int, float]:
            new = sum(1 for e, x in row.items() if _pair((e, x), (d, v)) in open_pairs)
            return new, rng.random()

        row[d] = max(values[d], key=gain)
    return row


def _pair(a: tuple[str, str], b: tuple[str, str]) -> Pair:
    return (a, b) if DESIGN_DIMS.index(a[0]) < DESIGN_DIMS.index(b[0]) else (b, a)


def _build(preset: Mapping[str, str], values, open_pairs: set[Pair], rng: random.Random, limits: Limits, tries: int):
    """The best of ``tries`` completions of ``preset`` that concretise: (row, case, pairs it closes)."""
    best = None
    for _ in range(tries):
        row = _fill(preset, values, open_pairs, rng)
        case = concretize(row, random.Random(rng.randrange(2**63)), limits)
        if case is None:
            continue
        closed = row_pairs(row) & open_pairs
        if best is None or len(closed) > len(best[2]):
            best = (row, case, closed)
    return best


def grid_rows(limits: Limits, rng: random.Random, open_pairs: set[Pair], tries: int = 8) -> list[Case]:
    """One flash-acceptable case per window-grid cell (see the module docstring)."""
    values = design_values(limits)
    half = tuple(d for d in HALF_DTYPES if d in values["dtype"]) or values["dtype"]
    values = {**values, "dtype": half, "head_dim": FLASH_HEAD_DIMS, **{d: (v,) for d, v in FLASH_FIXED.items()}}
    out = []
    for n, (left, right, rel) in enumerate(itertools.product(GRID_SIDES, GRID_SIDES, GRID_LENGTHS)):
        wanted: tuple[str, ...] = ("narrow", "inside") if left == "inside" else (left,)
        lefts = tuple(x for x in wanted if x in values["left"]) or ("narrow",)
        preset = {"left": lefts[n % len(lefts)], "right": right, "length": rel, "dtype": half[n % len(half)], **FLASH_FIXED}
        got = _build(preset, values, open_pairs, rng, limits, tries)
        if got is not None:
            out.append(got[1])
            open_pairs -= got[2]
    return out


def pairwise_rows(limits: Limits, rng: random.Random, open_pairs: set[Pair], tries: int = 12) -> list[Case]:
    """Cases until every open pair is held by one (a pair no completion can hold is dropped)."""
    values = design_values(limits)
    out = []
    while open_pairs:
        seed = min(open_pairs) if rng.random() < 0.5 else rng.choice(sorted(open_pairs))
        got = _build(dict(seed), values, open_pairs, rng, limits, tries)
        if got is None:
            open_pairs.discard(seed)
            continue
        out.append(got[1])
        open_pairs -= got[2]
    return out


#: (Sk, Sq) of the long cases, in order, each clipped to the profile's ``long_len``: decode and
#: chunked prefill first (cheap on a CPU), then full prefills up to 16k keys.
LONG_SHAPES = ((16384, 1), (8192, 256), (16384, 16384), (4096, 4096), (16384, 1024), (8192, 8192), (2048, 2048), (4096, 1))


def long_rows(limits: Limits, rng: random.Random, count: int) -> list[Case]:
    """``count`` half-precision cases whose rows see 1k-4k keys, ``Sk`` up to ``limits.long_len``."""
    if limits.long_len < 2 * 1024 or count <= 0:
        return []
    half = tuple(d for d in ("bfloat16", "float16") if d in limits.dtypes) or limits.dtypes
    out = []
    for n in range(count):
        sk, sq = LONG_SHAPES[n % len(LONG_SHAPES)]
        sk = min(sk, limits.long_len)
        sq = min(sq, sk)
        left = min(rng.choice((1023, 2047, 4095)), sk - 2)
        b = 4 if sq == 1 else 1
        hq, hkv = ((8, 2), (8, 1), (4, 4), (16, 2))[n % 4]
        out.append(
            Case(
                q_lens=(sq,) * b,
                k_lens=(sk,) * b,
                hq=hq,
                hkv=hkv,
                head_dim=(128, 64)[n % 2],
                dtype=half[n % len(half)],
                window=Window(left, 0),
                seed=rng.randrange(2**31),
                regime=("normal", "large_logits", "outliers", "normal")[n % 4],
            )
        )
    return out


def covering_cases(limits: Limits, seed: int, grid: bool = True, long_count: int = 0) -> list[Case]:
    """The profile's designed cases: the window grid (if ``grid``), then pairwise, then long ones."""
    rng = random.Random(seed * 7919 + 17)
    open_pairs = all_pairs(design_values(limits))
    out = grid_rows(limits, rng, open_pairs) if grid else []
    out += pairwise_rows(limits, rng, open_pairs)
    out += long_rows(limits, rng, long_count)
    seen: set[str] = set()
    return [c for c in out if not (c.case_id in seen or seen.add(c.case_id))]  # type: ignore[func-returns-value]


@st.composite
def design_cases(draw: st.DrawFn, max_len: int = 48, max_batch: int = 2, dtypes: Sequence[str] | None = None) -> Case:
    """A hypothesis strategy over the coverage model: one drawn value per design dimension."""
    limits = Limits(max_len, max_batch)
    values = design_values(limits)
    if dtypes:
        values["dtype"] = tuple(dtypes)
    row = {d: draw(st.sampled_from(list(v))) for d, v in values.items()}
    case = concretize(row, random.Random(draw(st.integers(0, 2**32 - 1))), limits)
    assume(case is not None)
    assert case is not None
    return case


# -- backend-aware placement ---------------------------------------------------------------------


def _half(case: Case) -> str:
    return "bfloat16" if case.seed % 2 else "float16"


def _round8(d: int) -> int:
    return min(256, -(-d // 8) * 8)


#: What a sibling changes, one step after another, until the backend takes it: features that do
#: not change which keys a query sees (the window and the layout stay; the lengths too, but for
#: the last step, which keeps the first sequence of a varlen batch and its own lengths).
LADDER: tuple[tuple[str, object], ...] = (
    ("softcap", lambda c: dataclasses.replace(c, softcap=None)),
    ("sinks", lambda c: dataclasses.replace(c, sinks=False)),
    ("dtype", lambda c: dataclasses.replace(c, dtype=_half(c)) if c.dtype == "float32" else c),
    # e5m2 -> e4m3 (FA3 takes no e5m2); descales per head or sequence -> per tensor (FlashInfer's k_scale / v_scale)
    ("fp8_dtype", lambda c: dataclasses.replace(c, kv_dtype="float8_e4m3fn") if c.kv_dtype not in (None, "float8_e4m3fn") else c),
    ("fp8_scales", lambda c: dataclasses.replace(c, fp8_scales="tensor")),
    # an fp8 KV cache with the query in float16 / bfloat16: the form FA3 takes (fp8 query, bfloat16 output)
    ("fp8", lambda c: dataclasses.replace(c, q_fp8=True, dtype="bfloat16") if c.kv_dtype is not None and not c.q_fp8 else c),
    ("align", lambda c: dataclasses.replace(c, window=Window(c.window.left, c.window.right))),
    ("head_dim", lambda c: dataclasses.replace(c, head_dim=_round8(c.head_dim))),
    ("paged", lambda c: dataclasses.replace(c, page_size=None)),
    # a varlen batch whose mask the backend cannot express for mixed shapes: its first sequence alone
    ("batch", lambda c: dataclasses.replace(c, q_lens=c.q_lens[:1], k_lens=c.k_lens[:1]) if not c.is_uniform else c),
)


def takes(backend: object, case: Case) -> bool:
    """Would ``backend`` run ``case`` (:func:`parity.backends.base.refusal_reason`)?"""
    try:
        return refusal_reason(backend, case) is None  # type: ignore[arg-type]
    except Exception:  # noqa: BLE001 - a backend whose check raises gets no siblings
        return False


def siblings(case: Case, backend: object, have: Sequence[Case]) -> Case | None:
    """The nearest case ``backend`` takes that differs from ``case`` only along :data:`LADDER`;
    None when one of ``have`` already serves, or when the refusal is about the window itself."""
    if any(takes(backend, h) for h in have):
        return None
    cur = case
    for _, step in LADDER:
        nxt = step(cur)  # type: ignore[operator]
        if nxt == cur:
            continue
        try:
            cur = Case.from_dict(nxt.to_dict())  # re-validated
        except SpecError:
            return None
        if takes(backend, cur):
            return cur
    return None


def place(cases: Sequence[Case], backends: Mapping[str, object]) -> tuple[list[Case], dict[str, int]]:
    """``cases`` plus, for every backend, a sibling of each case it refuses for a reason that
    does not change the window logic (:func:`siblings`); and per backend how many it caused."""
    order = sorted(backends, key=lambda s: -sum(not takes(backends[s], c) for c in cases))  # strictest first
    known = {c.case_id for c in cases}
    out, added = list(cases), {s: 0 for s in backends}
    for case in cases:
        family = [case]
        for backend in order:
            be = backends[backend]
            if takes(be, case):
                continue
            sib = siblings(case, be, family)
            if sib is not None and sib.case_id not in known:
                known.add(sib.case_id)
                family.append(sib)
                out.append(sib)
                added[backend] += 1
            elif sib is not None:
                family.append(sib)
    return out, added
