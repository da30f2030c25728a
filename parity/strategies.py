"""hypothesis strategies for attention cases, and the curated edge cases every sweep runs.

Public entry points:

* :func:`cases` - a strategy of :class:`parity.Case` (lengths including decode ``Sq = 1``,
  chunked prefill ``Sq < Sk``, ``Sq > Sk``, lengths just below / at / above the window,
  window edges ``0, 1, S-1, S, S+1``, unbounded, one- and two-sided, top-left alignment,
  MHA / GQA / MQA with non-power-of-two ratios, odd head dims, softcap on and off; learned sinks
  and chunked local attention come from the edge cases and the covering design);
* :func:`edge_cases` - a fixed list, one case per known trap
  (see ``shared/design/window-semantics.md``);
* :data:`PROFILES` and :func:`profile` - quick (CI) / default / thorough, chosen by
  ``--profile`` or the ``PARITY_PROFILE`` environment variable;
* :func:`generate` - what ``python -m parity run`` sweeps: the edge cases, the profile's
  coverage-directed design (:mod:`parity.design`: the window grid, pairwise, long key
  ranges), then hypothesis-drawn cases for the profile and seed, then fp8 KV variants of
  some of them (:func:`fp8_variants`), and the long paged caches (:func:`long_paged_cases`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Sequence
from typing import Any

from hypothesis import HealthCheck, Phase, assume, given, settings
from hypothesis import seed as hyp_seed
from hypothesis import strategies as st

from .case import Case
from .design import Limits, covering_cases
from .results import DTYPES
from .window import Align, SpecError, Window

ALL_DTYPES = DTYPES
HEAD_DIMS = (16, 32, 64, 128)
ODD_HEAD_DIMS = (24, 40, 72, 80, 96, 33)
SOFTCAPS = (1.0, 5.0, 30.0)
PAGE_SIZES = (16, 64)  # drawn paged caches (flash-attn's kv-cache API wants multiples of 256: it reports the rest unsupported)
CASE_FAMILIES = ("dense", "varlen", "decode", "chunked", "prefill_long_q")


@dataclasses.dataclass(frozen=True)
class Profile:
    name: str
    examples: int  # hypothesis-drawn cases per sweep (``generate``)
    max_len: int  # longest sequence drawn
    max_batch: int
    odd_head_dims: bool
    deadline_ms: int | None = None
    grid: bool = False  # one case per window-grid cell (parity.coverage), flash-acceptable
    long_len: int = 0  # longest Sk of the long-key-range cases (0: none)
    long_count: int = 0
    test_examples: int = 40  # max_examples of a ``@given`` property test (the pytest plugin's hypothesis profile)
    edge_once: bool = False  # each curated edge case in one dtype (cycling through them), not in every dtype

    def limits(self, dtypes: Sequence[str] = ALL_DTYPES, long_len: int | None = None) -> Limits:
        return Limits(self.max_len, self.max_batch, self.long_len if long_len is None else long_len, tuple(dtypes))


#: The one profile table: the sweep's cases (``python -m parity run --profile``, the pytest plugin's
#: ``parity_case``) and the hypothesis settings of property tests (``--parity-profile``).
PROFILES: dict[str, Profile] = {
    # the first run on a machine without a GPU (``parity run`` with no --profile there): every trap, CPU sizes
    "first": Profile(
        "first",
        examples=4,
        max_len=130,
        max_batch=2,
        odd_head_dims=True,
        grid=True,
        long_len=2048,
        long_count=1,
        test_examples=12,
        edge_once=True,
    ),
    "quick": Profile("quick", examples=16, max_len=160, max_batch=3, odd_head_dims=True, long_len=2048, long_count=2, test_examples=12),
    "default": Profile(
        "default", examples=80, max_len=600, max_batch=4, odd_head_dims=True, grid=True, long_len=16384, long_count=8, test_examples=40
    ),
    "thorough": Profile(
        "thorough", examples=800, max_len=2048, max_batch=6, odd_head_dims=True, grid=True, long_len=16384, long_count=16, test_examples=300
    ),
}
#: Longest key range of the long cases when no backend of the run is on a GPU (the CPU reference
#: and CPU backends would take minutes per case beyond it); environment.json records the cap.
CPU_LONG_CAP = 2048

ENV_VAR = "PARITY_PROFILE"


def profile(name: str | None = None) -> Profile:
    """The named profile, else ``$PARITY_PROFILE``, else ``default``."""
    chosen = name or os.environ.get(ENV_VAR) or "default"
    if chosen not in PROFILES:
        raise ValueError(f"unknown profile {chosen!r}; choose one of {sorted(PROFILES)} (--profile or ${ENV_VAR})")
    return PROFILES[chosen]


def _edge_values(s: int) -> st.SearchStrategy[int]:
    """Window sides clustered on the values where off-by-one bugs live."""
    specials = sorted({0, 1, max(s - 1, 0), s, s + 1})
    return st.one_of(st.sampled_from(specials), st.integers(0, 2 * s + 2))


WINDOW_KINDS = ("local", "local", "local", "two_sided", "causal", "right_only", "full", "tokens")


@st.composite
def windows(draw: st.DrawFn, s: int, kinds: Sequence[str] = WINDOW_KINDS) -> Window:
    """A window whose edges sit near a length ``s`` of the case."""
    kind = draw(st.sampled_from(list(kinds)))
    align: Align = draw(st.sampled_from(["bottom_right"] * 5 + ["top_left"]))  # type: ignore[assignment]
    if kind == "local":
        return Window(draw(_edge_values(s)), 0, align)
    if kind == "tokens":
        return Window.tokens(draw(_edge_values(s)) + 1, align)
    if kind == "two_sided":
        return Window(draw(_edge_values(s)), draw(_edge_values(s)), align)
    if kind == "causal":
        return Window.causal(align)
    if kind == "right_only":
        return Window(None, draw(_edge_values(s)), align)
    return Window.full()


@st.composite
def head_layouts(draw: st.DrawFn) -> tuple[int, int]:
    """``(hq, hkv)``: MHA, GQA (including ratios 3 and 6) and MQA."""
    hkv = draw(st.sampled_from([1, 1, 2, 2, 3, 4]))
    group = draw(st.sampled_from([1, 2, 3, 4, 6, 8]))
    return hkv * group, hkv


@st.composite
def lengths(draw: st.DrawFn, family: str, max_len: int, max_batch: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    size = st.integers(1, max_len)
    if family == "dense":
        b = draw(st.integers(1, max_batch))
        s = draw(size)
        return (s,) * b, (s,) * b
    if family == "varlen":
        b = draw(st.integers(2, max_batch))
        ks = [draw(size) for _ in range(b)]
        qs = [k if draw(st.booleans()) else draw(st.integers(1, k)) for k in ks]
        return tuple(qs), tuple(ks)
    if family == "decode":
        b = draw(st.integers(1, max_batch))
        sq = draw(st.sampled_from([1, 1, 1, 2, 4]))
        sk = draw(st.integers(sq, max(sq, max_len)))
        return (sq,) * b, (sk,) * b
    if family == "chunked":
        b = draw(st.integers(1, max_batch))
        sk = draw(st.integers(2, max(2, max_len)))
        sq = draw(st.integers(1, sk - 1))
        return (sq,) * b, (sk,) * b
    # prefill_long_q: more queries than keys (leading rows can be fully masked)
    b = draw(st.integers(1, max_batch))
    sq = draw(st.integers(2, max(2, max_len)))
    sk = draw(st.integers(1, sq - 1))
    return (sq,) * b, (sk,) * b


@st.composite
def cases(
    draw: st.DrawFn,
    dtypes: Sequence[str] = ALL_DTYPES,
    families: Sequence[str] = CASE_FAMILIES,
    max_len: int = 160,
    max_batch: int = 3,
    head_dims: Sequence[int] = HEAD_DIMS + ODD_HEAD_DIMS,
    softcap: bool = True,
    page_sizes: Sequence[int] = (),
    window_kinds: Sequence[str] = WINDOW_KINDS,
) -> Case:
    """A random valid :class:`Case` (see the module docstring for what is covered)."""
    family = draw(st.sampled_from(list(families)))
    q_lens, k_lens = draw(lengths(family, max_len, max_batch))
    hq, hkv = draw(head_layouts())
    near = draw(st.sampled_from([max(k_lens), min(k_lens), max(q_lens), min(q_lens)]))
    window = draw(windows(near, window_kinds))
    cap = draw(st.sampled_from([None] * 6 + list(SOFTCAPS))) if softcap else None
    scale = draw(st.sampled_from([None, None, None, 0.5, 0.05]))
    # about one case in eight is paged: most backends have no paged path and report those unsupported
    page = draw(st.sampled_from([None] * (7 * len(page_sizes)) + list(page_sizes))) if page_sizes else None
    try:
        return Case(
            q_lens=q_lens,
            k_lens=k_lens,
            hq=hq,
            hkv=hkv,
            head_dim=draw(st.sampled_from(list(head_dims))),
            dtype=draw(st.sampled_from([d for d in ("float16", "bfloat16", "float16", "bfloat16", "float32") if d in dtypes])),
            window=window,
            scale=scale,
            softcap=cap,
            page_size=page,
            seed=draw(st.integers(0, 2**31 - 1)),
        )
    except SpecError:
        assume(False)
        raise  # unreachable: assume(False) aborts the example


def edge_cases(dtypes: Sequence[str] = ALL_DTYPES, once: bool = False) -> list[Case]:
    """One case per known trap, in every requested dtype (``once``: in one of them, cycling)."""
    W = Window
    templates: list[dict] = [
        # window W tokens on a dense prefill longer than W: W vs W-1 vs W+1
        dict(q_lens=(64,), k_lens=(64,), hq=4, hkv=4, head_dim=64, window=W.tokens(16)),
        # self only, and one key back
        dict(q_lens=(33,), k_lens=(33,), hq=2, hkv=2, head_dim=32, window=W(0, 0)),
        dict(q_lens=(33,), k_lens=(33,), hq=2, hkv=1, head_dim=32, window=W(1, 0)),
        # (W, W) bidirectional vs causal
        dict(q_lens=(48,), k_lens=(48,), hq=4, hkv=2, head_dim=64, window=W(8, 8)),
        # decode against a cache longer than the window: window dropped in decode
        dict(q_lens=(1, 1), k_lens=(100, 37), hq=8, hkv=2, head_dim=64, window=W.tokens(16)),
        # small-Sq decode (speculative / multi-token)
        dict(q_lens=(4,), k_lens=(90,), hq=6, hkv=2, head_dim=64, window=W(20, 0)),
        # chunked prefill, bottom-right alignment matters
        dict(q_lens=(16,), k_lens=(80,), hq=4, hkv=1, head_dim=64, window=W.tokens(24)),
        # top-left alignment with Sq != Sk
        dict(q_lens=(16,), k_lens=(40,), hq=2, hkv=2, head_dim=32, window=W(None, 0, "top_left")),
        dict(q_lens=(16,), k_lens=(40,), hq=2, hkv=2, head_dim=32, window=W(5, 0, "top_left")),
        # Sq > Sk: leading rows see no key (must output 0, not NaN or mean(V))
        dict(q_lens=(40,), k_lens=(24,), hq=4, hkv=4, head_dim=32, window=W.causal()),
        dict(q_lens=(40,), k_lens=(24,), hq=4, hkv=2, head_dim=32, window=W(8, 0)),
        # varlen packed batch
        dict(q_lens=(30, 7, 64), k_lens=(30, 7, 64), hq=4, hkv=2, head_dim=64, window=W(12, 0)),
        dict(q_lens=(5, 17, 1), k_lens=(50, 17, 29), hq=3, hkv=1, head_dim=32, window=W(9, 0)),
        # window edges at S-1, S, S+1 (window wider than the sequence)
        dict(q_lens=(40,), k_lens=(40,), hq=2, hkv=2, head_dim=32, window=W(39, 0)),
        dict(q_lens=(40,), k_lens=(40,), hq=2, hkv=2, head_dim=32, window=W(40, 0)),
        dict(q_lens=(40,), k_lens=(40,), hq=2, hkv=2, head_dim=32, window=W(41, 0)),
        # unbounded sides: sentinel confusion (None vs -1 vs 0)
        dict(q_lens=(40,), k_lens=(40,), hq=2, hkv=2, head_dim=32, window=W.causal()),
        dict(q_lens=(40,), k_lens=(40,), hq=2, hkv=2, head_dim=32, window=W(None, 6)),
        dict(q_lens=(40,), k_lens=(40,), hq=2, hkv=2, head_dim=32, window=W(6, None)),
        dict(q_lens=(40,), k_lens=(40,), hq=2, hkv=2, head_dim=32, window=W.full()),
        # GQA with a non-power-of-two ratio, MQA
        dict(q_lens=(50,), k_lens=(50,), hq=12, hkv=4, head_dim=32, window=W(10, 0)),
        dict(q_lens=(50,), k_lens=(50,), hq=4, hkv=1, head_dim=32, window=W(10, 0)),
        # softcap, small (masking order visible) and Gemma-like
        dict(q_lens=(48,), k_lens=(48,), hq=4, hkv=2, head_dim=64, window=W(10, 0), softcap=1.0),
        dict(q_lens=(48,), k_lens=(48,), hq=4, hkv=2, head_dim=64, window=W(10, 0), softcap=30.0),
        # explicit softmax scale
        dict(q_lens=(48,), k_lens=(48,), hq=4, hkv=2, head_dim=64, window=W(10, 0), scale=0.5),
        # paged KV cache (decode and chunked prefill), pages in permuted physical order
        dict(q_lens=(1, 1), k_lens=(70, 33), hq=4, hkv=2, head_dim=32, window=W.tokens(20), page_size=16),
        dict(q_lens=(12,), k_lens=(45,), hq=4, hkv=1, head_dim=32, window=W(10, 0), page_size=8),
        # odd head dim
        dict(q_lens=(37,), k_lens=(37,), hq=2, hkv=1, head_dim=40, window=W(7, 0)),
        # Sq > Sk, bottom-right, one side unbounded or >= Sk: flash-attn 2's host-side clamp turns
        # such a side into Sk, which no longer reaches the last key once the diagonal is shifted
        # (Dao-AILab/flash-attention#895; every FA2 build: torch's, xformers' fa2F, vLLM's, flash-attn)
        dict(q_lens=(64,), k_lens=(35,), hq=4, hkv=2, head_dim=64, window=W(16, None)),
        dict(q_lens=(63,), k_lens=(17,), hq=4, hkv=1, head_dim=64, window=W(None, 20)),
        # learned sinks (gpt-oss: window 128 with a sink per head): prefill, paged decode, rows with no key
        dict(q_lens=(64,), k_lens=(64,), hq=8, hkv=2, head_dim=64, window=W.tokens(16), sinks=True),
        dict(q_lens=(1, 1), k_lens=(70, 33), hq=4, hkv=2, head_dim=64, window=W.tokens(20), page_size=16, sinks=True),
        dict(q_lens=(16,), k_lens=(80,), hq=4, hkv=1, head_dim=64, window=W.tokens(24), sinks=True),
        dict(q_lens=(40,), k_lens=(24,), hq=4, hkv=2, head_dim=32, window=W(8, 0), sinks=True),
        # chunked local attention (Llama 4's attention_chunk): chunked prefill and decode, where a chunk
        # aligned at the query row instead of its absolute position differs; a chunk inside the window
        dict(q_lens=(24,), k_lens=(80,), hq=4, hkv=1, head_dim=64, window=W.causal(), chunk=32),
        dict(q_lens=(1, 1), k_lens=(70, 33), hq=4, hkv=2, head_dim=64, window=W.causal(), chunk=16),
        dict(q_lens=(48,), k_lens=(48,), hq=4, hkv=2, head_dim=64, window=W.tokens(12), chunk=20),
        dict(q_lens=(12,), k_lens=(45,), hq=4, hkv=1, head_dim=64, window=W.causal(), chunk=16, page_size=16, sinks=True),
    ]
    out = []
    for n, t in enumerate(templates):
        for dt in [dtypes[n % len(dtypes)]] if once else dtypes:
            out.append(Case(dtype=dt, seed=1000 + n, **t))
    return out


@contextlib.contextmanager
def _seed_alone():
    """Draws that depend on the seed alone. Hypothesis (6.131 on) mixes literals of the local
    modules the process has imported into its draws, so the same seed drew other cases after
    another import (10 of the default profile's 318 after importing ``parity.cli``): a sweep's cases,
    and so its shards, would differ between machines and commands. Inside this block its pool of
    local constants is empty (its global constants stay); the cache built from it is cleared on
    the way in and out. Nothing to do on a hypothesis without the feature."""
    try:
        from hypothesis.internal.conjecture import providers

        real, cache = providers._get_local_constants, providers.CONSTANTS_CACHE.cache
        empty = type(providers._local_constants)()
    except (ImportError, AttributeError):
        yield
        return
    providers._get_local_constants = lambda: empty
    cache.clear()
    try:
        yield
    finally:
        providers._get_local_constants = real
        cache.clear()


def draw_cases(strategy: st.SearchStrategy[Case], n: int, seed: int) -> list[Case]:
    """``n`` cases drawn by hypothesis, deterministic for a given ``seed`` (whatever the process
    imported: :func:`_seed_alone`); duplicates dropped."""
    drawn: list[Case] = []

    @settings(
        max_examples=n,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
        deadline=None,
    )
    @hyp_seed(seed)
    @given(strategy)
    def collect(case: Case) -> None:
        drawn.append(case)

    with _seed_alone():
        collect()
    seen: set[str] = set()
    unique = []
    for c in drawn:
        if c.case_id not in seen:
            seen.add(c.case_id)
            unique.append(c)
    return unique


#: Every FP8_EVERY-th float16 / bfloat16 case of a sweep (short ones) also runs with an fp8 KV cache.
FP8_EVERY = 6
#: The longest key range of an fp8 variant (the backends that take fp8 are GPU kernels; the CPU self-test pays for the rest).
FP8_MAX_LEN = 1024


def fp8_variants(cases: Sequence[Case], every: int = FP8_EVERY) -> list[Case]:
    """fp8 copies of every ``every``-th float16 / bfloat16 case of ``cases`` with at most :data:`FP8_MAX_LEN`
    keys a sequence, in order: ``kv_dtype`` e4m3, the query fp8 too (and the dtype bfloat16) on every other
    one (vLLM's FA3 takes fp8 K/V only with an fp8 query and writes bfloat16; FlashInfer takes a query in the
    case's dtype).
    New cases appended after the others: the existing cases and their order stay as they were."""
    half = [c for c in cases if c.dtype in ("float16", "bfloat16") and c.kv_dtype is None and max(c.k_lens) <= FP8_MAX_LEN]
    out = []
    for n, c in enumerate(half[::every]):
        q8 = n % 2 == 0  # fp8 query: in bfloat16 (the only output of FA3's fp8 path)
        out.append(dataclasses.replace(c, kv_dtype="float8_e4m3fn", q_fp8=q8, dtype="bfloat16" if q8 else c.dtype))
    return out


def fp8_edge_cases() -> list[Case]:
    """fp8 KV cases every profile runs: paged decode and chunked prefill against a window, with the query in
    the case's dtype (FlashInfer's batch decode / prefill) and in fp8 (vLLM's FA3); head dims 64 / 128. Then
    descales as engines pass them (``fp8_scales``, GQA so a kv head's descale serves several query heads):
    per kv head in a chunked prefill and per (sequence, kv head) in a paged decode, both in FA3's form (fp8
    query, bfloat16), and an e5m2 cache in FlashInfer's (a float16 query, per-tensor scales)."""
    fp8 = "float8_e4m3fn"
    decode = Case((1, 1, 1), (300, 77, 129), 8, 2, 128, "bfloat16", Window.tokens(64), page_size=16, kv_dtype=fp8, seed=3000)
    chunk = Case((16, 40), (200, 40), 4, 1, 64, "float16", Window(31, 0), kv_dtype=fp8, seed=3002)
    qkv: dict[str, Any] = dict(dtype="bfloat16", kv_dtype=fp8, q_fp8=True)
    return [
        decode,
        dataclasses.replace(decode, q_fp8=True, seed=3001),
        chunk,
        dataclasses.replace(chunk, dtype="bfloat16", q_fp8=True, seed=3003),
        Case((16, 24), (96, 24), 8, 4, 64, window=Window(31, 0), fp8_scales="kv_head", seed=3004, **qkv),
        Case((1, 1, 1), (200, 77, 129), 8, 4, 128, window=Window.tokens(64), page_size=16, fp8_scales="batch_kv_head", seed=3005, **qkv),
        Case((1, 1), (150, 90), 8, 2, 128, "float16", Window.tokens(48), page_size=16, kv_dtype="float8_e5m2", seed=3006),
    ]


#: ``long_len`` from which :func:`long_paged_cases` adds its 4k-key caches (the GPU runs of default and thorough).
LONG_PAGED_4K = 4096


def long_paged_cases(long_len: int) -> list[Case]:
    """Curated long paged caches, ragged block tables (sequences of different page counts, so padding slots) and
    windows that leave whole pages outside them: decode and chunked prefill over 1k-2k keys (every profile whose long
    key ranges reach 2048), 4k keys where ``long_len`` reaches 4096. Small heads, one dtype each: cheap on the CPU."""
    W = Window
    out = [
        # decode, pages of 256 (flash-attn's kv-cache API takes them): 8, 5 and 2 pages, the window 2 pages back
        Case((1, 1, 1), (2048, 1100, 300), 4, 1, 64, "float16", W.tokens(300), page_size=256, seed=3100),
        # chunked prefill, pages of 64: 32 and 24 pages, each last page with a tail, 200 keys back
        Case((32, 16), (2040, 1500), 2, 1, 64, "bfloat16", W(200, 0), page_size=64, seed=3101),
    ]
    if long_len >= LONG_PAGED_4K:
        out += [
            Case((1, 1), (4096, 1024), 4, 2, 64, "bfloat16", W(1023, 0), page_size=128, seed=3102),
            Case((64, 8), (4000, 2500), 2, 1, 64, "float32", W.tokens(512), page_size=16, seed=3103),
        ]
    return [c for c in out if max(c.k_lens) <= long_len]


#: ``long_len`` from which :func:`split_kv_cases` adds its 4k-key decode rows (the GPU runs of default and thorough).
SPLIT_KV_4K = 4096


def split_kv_cases(long_len: int) -> list[Case]:
    """Decode rows for split-KV kernels: one query per sequence over a long ragged contiguous cache (2048 and 1537 keys)
    with a window of 256 keys, so that most of a split-KV kernel's splits (FA2's ``num_splits`` cut the whole cache)
    see no key and its merge must give them no weight; in float16, bfloat16 and float32 (a merge that weighs empty
    splits hides in bfloat16's rounding: vllm#47188). 4k-key caches where ``long_len`` reaches 4096 (GPU runs)."""
    out = [Case((1, 1), (2048, 1537), 8, 2, 128, dt, Window(255, 0), seed=3200 + n) for n, dt in enumerate(ALL_DTYPES)]
    if long_len >= SPLIT_KV_4K:
        half = ("float16", "bfloat16")
        out += [Case((1, 1, 1), (4096, 2900, 1500), 8, 1, 64, dt, Window(127, 0), seed=3210 + n) for n, dt in enumerate(half)]
    return [c for c in out if max(c.k_lens) <= long_len]


def generate(prof: Profile, seed: int = 0, dtypes: Sequence[str] = ALL_DTYPES, long_len: int | None = None) -> list[Case]:
    """The sweep's cases: every edge case, the profile's covering design, then ``prof.examples``
    drawn ones. ``long_len`` caps the long key ranges (default: the profile's)."""
    dims = HEAD_DIMS + (ODD_HEAD_DIMS if prof.odd_head_dims else ())
    strat = cases(dtypes=dtypes, max_len=prof.max_len, max_batch=prof.max_batch, head_dims=dims, page_sizes=PAGE_SIZES)
    fixed = edge_cases(dtypes, prof.edge_once) + covering_cases(prof.limits(dtypes, long_len), seed, prof.grid, prof.long_count)
    out: dict[str, Case] = {}
    for c in fixed + draw_cases(strat, prof.examples, seed):
        out.setdefault(c.case_id, c)
    longest = prof.long_len if long_len is None else long_len
    long_paged = long_paged_cases(longest) + split_kv_cases(longest)
    fp8 = fp8_variants(list(out.values())) + fp8_edge_cases()  # of the cases above, not of the long paged ones
    for c in long_paged + fp8:  # the fp8 cases last (a sweep's order; tests/test_fp8.py)
        if c.dtype in dtypes:  # --dtype holds for the fp8 and long paged cases too
            out.setdefault(c.case_id, c)
    return list(out.values())
