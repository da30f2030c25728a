"""Planted bugs: one backend per class of sliding-window bug seen in public attention code.

Every bug is a small change to :class:`EagerAttention`, a plain eager kernel of the kind
model code and engine fallbacks contain: it translates the canonical window into
flash-attn 2's native ``window_size=(left, right)`` (``-1`` = unbounded), builds a
boolean mask from it, and has three code paths like a real engine - prefill (one
sequence at a time), decode (``Sq == 1`` for the whole batch: one query per sequence
against a padded cache) and paged (``case.page_size`` set: K/V read through
``inputs.paged()``'s block table). :class:`EagerAttention` itself is honest and is
checked as such by the self-test.

Each subclass overrides the one method where its bug lives, and its docstring says
where that bug has been seen. :data:`BUGS` lists them with their bug class.
"""

from __future__ import annotations

import dataclasses
import math

import torch

from ..backends.base import Backend
from ..backends.torch_fa2 import TorchFa2Backend
from ..case import FP8_DTYPES, FP8_SCALES, Case, Inputs, descale_rows

NEG_INF = float("-inf")


class EagerAttention(Backend):
    """Honest eager attention in float32 with prefill, decode and paged paths."""

    name = "selftest-eager"
    device = "cpu"
    description = "self-test: eager float32 attention with prefill/decode/paged paths (honest base of the planted bugs)"
    supports_paged = True
    kv_dtypes = tuple(FP8_DTYPES)  # fp8 K/V (and q): dequantized on load, as an engine's fallback does
    fp8_scale_layouts = FP8_SCALES  # every descale layout: per element (Inputs.dequantized)
    fp8_queries = True
    supports_sinks = True
    supports_chunk = True
    #: the case's learned sink logits ``(hq,)`` of the call in progress (set by :meth:`run`)
    _sinks: torch.Tensor | None = None
    supports_grad = True  # the backward: autograd through run (every path is differentiable)
    grad_sinks = True

    # -- the window, as the kernel sees it ----------------------------------------------------
    def window_size(self, case: Case) -> tuple[int, int]:
        """flash-attn 2's ``window_size``: ``-1`` means unbounded."""
        w = case.window
        return (-1 if w.left is None else w.left, -1 if w.right is None else w.right)

    def bounded(self, side: int) -> bool:
        """Does a native window side bound the band? (``-1`` does not.)"""
        return side >= 0

    def offset(self, case: Case, sq: int, sk: int) -> int:
        return sk - sq if case.window.align == "bottom_right" else 0

    def use_sliding_window(self, case: Case, sq: int, sk: int) -> bool:
        return True

    def visible(self, case: Case, i: torch.Tensor, j: torch.Tensor, d: int, sliding: bool = True) -> torch.Tensor:
        """``i``: ``(Sq, 1)`` query rows, ``j``: ``(1, Sk)`` keys -> ``(Sq, Sk)`` bool."""
        wl, wr = self.window_size(case)
        ok = torch.ones(i.shape[0], j.shape[1], dtype=torch.bool)
        if sliding and self.bounded(wl):
            ok &= j >= i + d - wl
        if self.bounded(wr):
            ok &= j <= i + d + wr
        return ok

    def chunk_position(self, i: torch.Tensor, sq, sk) -> torch.Tensor:
        """The position that picks query row ``i``'s chunk: its absolute position ``i + Sk - Sq``."""
        return i + sk - sq

    def chunk_ok(self, case: Case, i: torch.Tensor, j: torch.Tensor, sq, sk) -> torch.Tensor | bool:
        """Chunked local attention: key ``j`` ``(1, Sk)`` in the chunk of row ``i`` ``(Sq, 1)`` (``sk``:
        an int or a ``(B, 1)`` tensor); True without a chunk."""
        if case.chunk is None:
            return True
        p = self.chunk_position(i, sq, sk)
        return torch.div(j, case.chunk, rounding_mode="floor") == torch.div(p, case.chunk, rounding_mode="floor")

    # -- numerics ---------------------------------------------------------------------------------
    def scale(self, case: Case) -> float:
        return case.softmax_scale

    def sink_logits(self, case: Case, sinks: torch.Tensor) -> torch.Tensor:
        """The learned sinks as the softmax sees them: natural-log units, unscaled. ``(hq,)``."""
        return sinks.float()

    def expand_kv(self, case: Case, k: torch.Tensor) -> torch.Tensor:
        """``(Sk, hkv, D)`` -> ``(Sk, hq, D)``: query head ``h`` reads kv head ``h // group``."""
        return k.repeat_interleave(case.group, dim=1)

    def mask_and_cap(self, case: Case, s: torch.Tensor, ok: torch.Tensor) -> torch.Tensor:
        """Softcap the raw scores, then mask: ``s`` ``(hq, Sq, Sk)``, ``ok`` ``(Sq, Sk)``."""
        if case.softcap is not None:
            s = case.softcap * torch.tanh(s / case.softcap)
        return s.masked_fill(~ok, NEG_INF)

    def softmax(self, s: torch.Tensor) -> torch.Tensor:
        """Row softmax; a row with no finite score gets all-zero weights (output 0)."""
        m = s.amax(dim=-1, keepdim=True)  # (hq, Sq, 1)
        m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
        e = torch.exp(s - m)  # (hq, Sq, Sk)
        den = e.sum(dim=-1, keepdim=True)  # (hq, Sq, 1)
        return e / torch.where(den > 0, den, torch.ones_like(den))

    def attend(self, case: Case, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, ok: torch.Tensor) -> torch.Tensor:
        """``q`` ``(Sq, hq, D)``, ``k``/``v`` ``(Sk, hkv, D)``, ``ok`` ``(Sq, Sk)`` -> ``(Sq, hq, D)`` float32."""
        kx = self.expand_kv(case, k).float()  # (Sk, hq, D)
        vx = self.expand_kv(case, v).float()  # (Sk, hq, D)
        s = torch.einsum("qhd,khd->hqk", q.float(), kx) * self.scale(case)  # (hq, Sq, Sk)
        s = self.mask_and_cap(case, s, ok)  # (hq, Sq, Sk)
        if self._sinks is not None:  # one more column per row, the sink's, dropped after the softmax
            col = self.sink_logits(case, self._sinks.to(s.device))[:, None, None].expand(-1, s.shape[1], 1)  # (hq, Sq, 1)
            p = self.softmax(torch.cat([s, col], dim=-1))[..., :-1]  # (hq, Sq, Sk)
        else:
            p = self.softmax(s)  # (hq, Sq, Sk)
        return self.pv(case, p, vx)  # (Sq, hq, D)

    def pv(self, case: Case, p: torch.Tensor, vx: torch.Tensor) -> torch.Tensor:
        """``P @ V``: ``p`` ``(hq, Sq, Sk)``, ``vx`` ``(Sk, hq, D)`` -> ``(Sq, hq, D)`` float32."""
        return torch.einsum("hqk,khd->qhd", p, vx)  # (Sq, hq, D)

    def dequantize(self, case: Case, inputs: Inputs) -> Inputs:
        """fp8 inputs as the values they stand for, in the case's dtype (each tensor times its descale)."""
        return inputs.dequantized(case.torch_dtype) if inputs.k_descale is not None else inputs

    # -- the three paths ----------------------------------------------------------------------------
    def run(self, case: Case, inputs: Inputs, out: torch.Tensor) -> torch.Tensor:
        inputs = self.dequantize(case, inputs)
        self._sinks = inputs.sinks  # (hq,) or None
        if case.page_size is not None:
            return self.run_paged(case, inputs, out)
        if max(case.q_lens) == 1:
            return self.run_decode(case, inputs, out)
        return self.run_prefill(case, inputs, out)

    def prefill_mask(self, case: Case, sq: int, sk: int) -> torch.Tensor:
        i = torch.arange(sq)[:, None]  # (Sq, 1)
        j = torch.arange(sk)[None, :]  # (1, Sk)
        ok = self.visible(case, i, j, self.offset(case, sq, sk), self.use_sliding_window(case, sq, sk))  # (Sq, Sk)
        return ok & self.chunk_ok(case, i, j, sq, sk)

    def run_prefill(self, case: Case, inputs: Inputs, out: torch.Tensor) -> torch.Tensor:
        for _, q, k, v, qs in inputs.sequences():
            ok = self.prefill_mask(case, q.shape[0], k.shape[0])  # (Sq, Sk)
            out[qs] = self.attend(case, q, k, v, ok).to(out.dtype)
        return out

    def decode_mask(self, case: Case, seqlens: torch.Tensor, sk_max: int) -> torch.Tensor:
        """One query per sequence against a cache padded to ``sk_max``: ``(B, sk_max)`` bool."""
        wl, wr = self.window_size(case)
        j = torch.arange(sk_max)[None, :]  # (1, Sk)
        n = seqlens[:, None]  # (B, 1)
        pos = n - 1 if case.window.align == "bottom_right" else torch.zeros_like(n)  # the query's aligned key
        ok = j < n  # (B, Sk): inside the cache
        sliding = [self.use_sliding_window(case, 1, int(s)) for s in seqlens.tolist()]
        if self.bounded(wl):
            ok &= (j >= pos - wl) | ~torch.tensor(sliding)[:, None]
        if self.bounded(wr):
            ok &= j <= pos + wr
        return ok & self.chunk_ok(case, torch.zeros_like(n), j, 1, n)

    def padded_kv(self, case: Case) -> bool:
        return case.page_size is None and max(case.q_lens) == 1  # the decode path's padded cache

    def decode_keys(self, used: int, capacity: int) -> int:
        """How many slots of a sequence's padded cache the decode path loads: its used length."""
        return used

    def run_decode(self, case: Case, inputs: Inputs, out: torch.Tensor) -> torch.Tensor:
        cache = inputs.padded()  # (B, capacity, hkv, D) x2, used lengths (B,)
        kc, vc = cache.k_cache, cache.v_cache
        ok = self.decode_mask(case, cache.seqlens_k.long(), kc.shape[1])  # (B, capacity)
        for n, used in enumerate(cache.seqlens_k.tolist()):
            m = self.decode_keys(used, kc.shape[1])
            out[n : n + 1] = self.attend(case, inputs.q[n : n + 1], kc[n, :m], vc[n, :m], ok[n : n + 1, :m]).to(out.dtype)
        return out

    def paged_mask(self, case: Case, sq: int, sk: int) -> torch.Tensor:
        return self.prefill_mask(case, sq, sk)

    def pages_to_load(self, ok: torch.Tensor, ps: int) -> torch.Tensor:
        """Which logical pages to load, from the kernel's own mask ``ok`` ``(Sq, Sk)``: those where it
        sees a key (a windowed kernel skips the rest; engines free or reuse them) -> bool ``(pages,)``."""
        sk = ok.shape[1]
        padded = torch.zeros(ok.shape[0], -(-sk // ps) * ps, dtype=torch.bool)  # (Sq, pages*ps)
        padded[:, :sk] = ok
        return padded.view(ok.shape[0], -1, ps).any(-1).any(0)

    def run_paged(self, case: Case, inputs: Inputs, out: torch.Tensor) -> torch.Tensor:
        cache = inputs.paged()
        ps = cache.page_size
        for b, q, _, _, qs in inputs.sequences():
            sk = int(cache.seqlens_k[b])
            ok = self.paged_mask(case, q.shape[0], sk)  # (Sq, Sk)
            pages = cache.block_table[b, : -(-sk // ps)].long()  # logical -> physical page
            load = self.pages_to_load(ok, ps)  # (pages,) bool
            k = torch.zeros(len(pages), ps, case.hkv, case.head_dim, dtype=cache.k_cache.dtype)  # (pages, ps, hkv, D)
            v = torch.zeros_like(k)  # (pages, ps, hkv, D)
            k[load], v[load] = cache.k_cache[pages[load]], cache.v_cache[pages[load]]
            k, v = k.flatten(0, 1)[:sk], v.flatten(0, 1)[:sk]  # (Sk, hkv, D) each
            out[qs] = self.attend(case, q, k, v, ok).to(out.dtype)
        return out


# -- window width ---------------------------------------------------------------------------------


class EagerWithLse(EagerAttention):
    """:class:`EagerAttention` that also returns its log-sum-exp (``run_lse``): natural log of the
    scaled, softcapped scores over the keys its own mask lets in, ``-inf`` on rows that see none.
    Honest; the base of the LSE bugs."""

    name = "selftest-eager-lse"
    description = "self-test: eager float32 attention returning its log-sum-exp (honest base of the LSE bugs)"
    returns_lse = True
    lse_empty = ("-inf",)

    def lse_of(self, s: torch.Tensor) -> torch.Tensor:
        """Masked scores ``(hq, Sq, Sk)`` -> ``(Sq, hq)`` natural-log LSE (``-inf`` where no key)."""
        return torch.logsumexp(s, dim=-1).transpose(0, 1)  # (Sq, hq)

    def run_lse(self, case: Case, inputs: Inputs, out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.run(case, inputs, out)
        inputs = self.dequantize(case, inputs)  # fp8: the values the kernel computed on
        lse = torch.empty(inputs.q.shape[:2], dtype=torch.float32)  # (total_q, hq)
        for _, q, k, _, qs in inputs.sequences():
            ok = self.prefill_mask(case, q.shape[0], k.shape[0])  # (Sq, Sk)
            s = torch.einsum("qhd,khd->hqk", q.float(), self.expand_kv(case, k).float()) * self.scale(case)  # (hq, Sq, Sk)
            s = self.mask_and_cap(case, s, ok)  # (hq, Sq, Sk)
            if inputs.sinks is not None:  # the sink's term in the normaliser: one more column
                col = self.sink_logits(case, inputs.sinks)[:, None, None].expand(-1, s.shape[1], 1)  # (hq, Sq, 1)
                s = torch.cat([s, col], dim=-1)  # (hq, Sq, Sk + 1)
            lse[qs] = self.lse_of(s)
        return out, lse


class LseInLog2(EagerWithLse):
    """The log-sum-exp returned in base 2: ``m * log2(e) + log2(l)``, the value a kernel that folds
    ``log2(e)`` into the scale and runs ``exp2`` keeps internally. FlashInfer returns exactly that
    (``return_lse``: "log2-based"); code that reads it as natural log (split-KV merges, the sink and
    prefix-cache merges of engines) weights the parts wrongly. The output itself is right."""

    name = "bug-lse-in-log2"

    def lse_of(self, s):
        return super().lse_of(s) / math.log(2.0)


class WindowOneWider(EagerAttention):
    """``W = left + 1`` tokens, then ``i - j <= W`` where it must be ``i - j < W``.

    The off-by-one of converting vLLM/HF's "W tokens" to flash-attn's ``left``: the
    band gets ``W + 1`` keys.
    """

    name = "bug-window-one-wider"

    def visible(self, case, i, j, d, sliding=True):
        wl, wr = self.window_size(case)
        ok = torch.ones(i.shape[0], j.shape[1], dtype=torch.bool)
        if sliding and self.bounded(wl):
            w_tokens = wl + 1
            ok &= (i + d) - j <= w_tokens
        if self.bounded(wr):
            ok &= j <= i + d + wr
        return ok


class WindowOneNarrower(EagerAttention):
    """``left`` used as a token count: ``i - j < left`` keeps ``left`` keys, not ``left + 1``."""

    name = "bug-window-one-narrower"

    def visible(self, case, i, j, d, sliding=True):
        wl, wr = self.window_size(case)
        ok = torch.ones(i.shape[0], j.shape[1], dtype=torch.bool)
        if sliding and self.bounded(wl):
            ok &= (i + d) - j < wl
        if self.bounded(wr):
            ok &= j <= i + d + wr
        return ok


class SymmetricWindowUnderCausal(EagerAttention):
    """``window_size=(W, W)`` passed for a causal sliding window.

    As in model code that passes ``(sliding_window, sliding_window)`` and counts on the
    causal flag: a kernel whose window replaces the causal mask then looks ``W`` keys
    into the future.
    """

    name = "bug-symmetric-window-causal"

    def window_size(self, case):
        wl, wr = super().window_size(case)
        return (wl, wl) if wl >= 0 else (wl, wr)


# -- alignment ---------------------------------------------------------------------------------------


class TopLeftAlignment(EagerAttention):
    """The band is aligned top-left (``d = 0``) whatever ``Sq`` and ``Sk``.

    SDPA's ``is_causal`` and xformers' non-``FromBottomRight`` masks; flash-attn < 2.1.
    Wrong for decode and chunked prefill.
    """

    name = "bug-top-left-alignment"

    def offset(self, case, sq, sk):
        return 0

    def decode_mask(self, case, seqlens, sk_max):
        wl, wr = self.window_size(case)
        j = torch.arange(sk_max)[None, :]
        n = seqlens[:, None]
        pos = torch.zeros_like(n)  # query 0 lines up with key 0
        ok = j < n
        if self.bounded(wl):
            ok &= j >= pos - wl
        if self.bounded(wr):
            ok &= j <= pos + wr
        return ok


# -- window dropped on a code path ---------------------------------------------------------------------


class DecodeDropsWindow(EagerAttention):
    """The decode path (``Sq == 1``) masks only the cache length: the window never reaches it."""

    name = "bug-decode-drops-window"

    def decode_mask(self, case, seqlens, sk_max):
        _, wr = self.window_size(case)
        j = torch.arange(sk_max)[None, :]
        n = seqlens[:, None]
        pos = n - 1 if case.window.align == "bottom_right" else torch.zeros_like(n)
        ok = j < n
        if self.bounded(wr):
            ok &= j <= pos + wr
        return ok


class PagedDropsWindow(EagerAttention):
    """The paged-KV path gets only the causal side from the sequence lengths; ``left`` is not plumbed."""

    name = "bug-paged-drops-window"

    def paged_mask(self, case, sq, sk):
        i = torch.arange(sq)[:, None]
        j = torch.arange(sk)[None, :]
        return self.visible(case, i, j, self.offset(case, sq, sk), sliding=False)


class PagedReadsEveryPage(EagerAttention):
    """The paged path loads K and V of every page of the block table, the pages outside the window
    included, and lets the mask zero their probability.

    Exact with finite caches (``0 x v = 0``), but engines free or reuse pages that slid out of
    the window: there the load returns garbage or NaN, and ``NaN x 0 = NaN``. As in decode
    kernels that walk the whole block table and mask late, and split-KV schemes whose splits
    cover pages no row sees.
    """

    name = "bug-paged-reads-every-page"

    def pages_to_load(self, ok, ps):
        return torch.ones(-(-ok.shape[1] // ps), dtype=torch.bool)


#: Keys above which :class:`PagedLongPathReadsFromPageZero` switches to its long-context path.
LONG_PATH_KEYS = 1024


class PagedLongPathReadsFromPageZero(EagerAttention):
    """Above :data:`LONG_PATH_KEYS` keys a sequence goes down a long-context path that loads every page
    of its block table from page 0, those outside the window included, and lets the mask zero them.

    Every paged case under 1k keys passes; an engine's long cache has freed or reused the pages that
    slid out of the window, and ``NaN x 0 = NaN``. As in split-KV and long-context decode paths chosen
    by length that stream the whole table.
    """

    name = "bug-paged-long-path-reads-from-page-0"

    def pages_to_load(self, ok, ps):
        if ok.shape[1] > LONG_PATH_KEYS:
            return torch.ones(-(-ok.shape[1] // ps), dtype=torch.bool)
        return super().pages_to_load(ok, ps)


class PagedWalksLongestTable(EagerAttention):
    """Every sequence walks as many block-table slots as the longest sequence has pages (vllm#641,
    #936: a loop bound of ``max_num_blocks_per_seq``), loading the page each slot names and masking
    the keys past its own length by a zero probability.

    Exact while unused slots name a live page (the harness used to point them at page 0); an engine
    points them at a null block of garbage, and ``NaN x 0 = NaN``.
    """

    name = "bug-paged-walks-longest-table"

    def run_paged(self, case: Case, inputs: Inputs, out: torch.Tensor) -> torch.Tensor:
        out = super().run_paged(case, inputs, out)  # its own pages, as the honest path reads them
        cache = inputs.paged()
        ps, width = cache.page_size, cache.block_table.shape[1]
        for b, q, _, _, qs in inputs.sequences():
            sk = int(cache.seqlens_k[b])
            spare = cache.block_table[b, -(-sk // ps) : width].long()  # (n,) the slots past its own pages
            if len(spare):
                k = cache.k_cache[spare].flatten(0, 1)  # (n * ps, hkv, D): keys past its length, masked
                v = cache.v_cache[spare].flatten(0, 1)  # (n * ps, hkv, D)
                none = torch.zeros(q.shape[0], k.shape[0], dtype=torch.bool)  # (Sq, n * ps): no key visible
                nan = self.attend(case, q, k, v, none).isnan()  # (Sq, hq, D): what loading them leaks (NaN x 0)
                out[qs] = torch.where(nan, torch.full_like(out[qs], float("nan")), out[qs])
        return out


class DecodeReadsCacheCapacity(EagerAttention):
    """The decode path loads the whole preallocated cache and masks the slots past each
    sequence's used length (``cache_seqlens`` / ``seqused_k``) by a zero probability.

    Exact while the spare slots hold zeros, but in an engine they hold another request's or
    stale keys, garbage or NaN, and ``NaN x 0 = NaN``: decode kernels that let padding lanes
    into the softmax, or split-KV schemes with splits past the used length.
    """

    name = "bug-decode-reads-cache-capacity"

    def decode_keys(self, used, capacity):
        return capacity


# -- split-KV decode ---------------------------------------------------------------------------------------

#: Keys above which :class:`SplitKvDecode` splits a decode query's cache (a long-context decode path).
SPLIT_KV_KEYS = 1024
#: The splits :class:`SplitKvDecode` cuts each sequence's cache into (``num_splits`` forced, as engines force it).
SPLIT_KV_SPLITS = 16


class SplitKvDecode(EagerAttention):
    """Split-KV (flash-decoding) on the decode path above :data:`SPLIT_KV_KEYS` keys, honest: each sequence's cache
    cut into :data:`SPLIT_KV_SPLITS` equal key ranges over its whole length, as flash-attn 2's ``num_splits`` cuts
    it (the window does not move the splits, so most lie outside a small window), each split normalised on its own,
    the parts merged by their log-sum-exp. A split where the query sees no key is empty: log-sum-exp
    :attr:`empty_lse` (``-inf``), output 0, no weight in the merge. A learned sink is one more part (its logit, output
    0). The honest twin of ``bug-split-kv-merge-weighs-empty-splits``; listed with the honest variants."""

    name = "honest-split-kv-decode"
    description = "self-test: split-KV decode above 1k keys (16 splits over the cache, log-sum-exp merge, empty splits -inf)"
    #: the log-sum-exp an empty split reports
    empty_lse = NEG_INF

    def split_ranges(self, used: int) -> list[tuple[int, int]]:
        """The ``[j0, j1)`` key ranges of a cache of ``used`` keys, :data:`SPLIT_KV_SPLITS` of them (empty past the end)."""
        n = -(-used // SPLIT_KV_SPLITS)
        return [(min(j0, used), min(j0 + n, used)) for j0 in range(0, SPLIT_KV_SPLITS * n, n)]

    def run_decode(self, case: Case, inputs: Inputs, out: torch.Tensor) -> torch.Tensor:
        if max(case.k_lens) <= SPLIT_KV_KEYS:
            return super().run_decode(case, inputs, out)
        cache = inputs.padded()  # (B, capacity, hkv, D) x2, used lengths (B,)
        kc, vc = cache.k_cache, cache.v_cache
        ok = self.decode_mask(case, cache.seqlens_k.long(), kc.shape[1])  # (B, capacity)
        for n, used in enumerate(cache.seqlens_k.tolist()):
            q = inputs.q[n : n + 1]  # (1, hq, D)
            parts: list[tuple[torch.Tensor, torch.Tensor]] = [
                self.split_part(case, q, kc[n, j0:j1], vc[n, j0:j1], ok[n : n + 1, j0:j1]) for j0, j1 in self.split_ranges(used)
            ]
            if self._sinks is not None:  # the sink: one more part, its logit as log-sum-exp, output 0
                sink = self.sink_logits(case, self._sinks)[:, None, None]  # (hq, 1, 1)
                parts.append((torch.zeros(case.hq, 1, case.head_dim), sink))
            out[n : n + 1] = merge_splits(parts).transpose(0, 1).to(out.dtype)  # (1, hq, D)
        return out

    def split_part(
        self, case: Case, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, ok: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One split: ``q`` ``(1, hq, D)``, ``k``/``v`` ``(n, hkv, D)``, ``ok`` ``(1, n)`` -> its normalised output
        ``(hq, 1, D)`` and log-sum-exp ``(hq, 1, 1)``; an empty split (no key visible) :attr:`empty_lse` and 0."""
        if not bool(ok.any()):
            return torch.zeros(case.hq, 1, case.head_dim), torch.full((case.hq, 1, 1), self.empty_lse)
        kx, vx = self.expand_kv(case, k).float(), self.expand_kv(case, v).float()  # (n, hq, D) each
        s = self.mask_and_cap(case, torch.einsum("qhd,khd->hqk", q.float(), kx) * self.scale(case), ok)  # (hq, 1, n)
        m = s.amax(-1, keepdim=True)  # (hq, 1, 1): finite, some key is visible
        p = torch.exp(s - m)  # (hq, 1, n)
        den = p.sum(-1, keepdim=True)  # (hq, 1, 1)
        return torch.einsum("hqk,khd->hqd", p, vx) / den, m + torch.log(den)


def merge_splits(parts: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
    """Split-KV's merge: parts ``(output (hq, Sq, D), log-sum-exp (hq, Sq, 1))``, each part weighted by
    ``exp(lse - max lse)`` (0 for ``-inf``) -> ``(hq, Sq, D)``; 0 where no part has weight."""
    lse = torch.stack([lse for _, lse in parts])  # (splits, hq, Sq, 1)
    top = lse.amax(0)  # (hq, Sq, 1)
    top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    w = torch.exp(lse - top)  # (splits, hq, Sq, 1)
    tot = w.sum(0)  # (hq, Sq, 1)
    return (w * torch.stack([o for o, _ in parts])).sum(0) / torch.where(tot > 0, tot, torch.ones_like(tot))


class SplitKvMergeWeighsEmptySplits(SplitKvDecode):
    """Split-KV decode whose empty splits (no key of the split inside the window) report log-sum-exp 0, not
    ``-inf``: a split kernel that returns early for a split with nothing to do and leaves its zero-initialised
    log-sum-exp slot (and output 0) to the merge, which then weighs it by ``exp(0 - lse)`` (vllm#47188). The
    output shrinks by ``1 / (1 + n_empty x exp(-lse))``: about 0.5% with a 1k-key window on 2k keys (LSE near
    7.4), under bfloat16's rounding of a 1k-key average, far over float32's. Only caches above
    :data:`SPLIT_KV_KEYS` keys are split; shorter decode and every prefill are right."""

    name = "bug-split-kv-merge-weighs-empty-splits"
    empty_lse = 0.0


class WindowOnlyWhenLonger(EagerAttention):
    """``use_sliding_windows = query_length > sliding_window``.

    The check meant to skip the window when it cannot matter looks at the new tokens'
    length, so decode and chunked prefill against a long cache attend to everything.
    """

    name = "bug-window-only-when-longer"

    def use_sliding_window(self, case, sq, sk):
        wl, _ = self.window_size(case)
        return sq > wl + 1


# -- sentinels -------------------------------------------------------------------------------------------


class SentinelZeroIsUnbounded(EagerAttention):
    """``left = window if window else -1``: a truthiness test turns ``left = 0`` (self only) into unbounded."""

    name = "bug-sentinel-zero-unbounded"

    def window_size(self, case):
        w = case.window
        return (w.left if w.left else -1, -1 if w.right is None else w.right)


class SentinelNoneIsZero(EagerAttention):
    """``left = window or 0``: unbounded (``None``) becomes ``0``, a self-only window."""

    name = "bug-sentinel-none-zero"

    def window_size(self, case):
        w = case.window
        return (w.left or 0, -1 if w.right is None else w.right)


class SentinelMinusOneLiteral(EagerAttention):
    """flash-attn 2's ``-1`` handed to a kernel that reads negative sides literally (as FA4 does)."""

    name = "bug-sentinel-minus-one-literal"

    def bounded(self, side):
        return True


# -- rows that see no key -------------------------------------------------------------------------------


class NanOnEmptyRows(EagerAttention):
    """Plain ``softmax`` over a row of ``-inf``: ``0 / 0`` = NaN in rows that see no key."""

    name = "bug-empty-rows-nan"

    def softmax(self, s):
        return torch.softmax(s, dim=-1)


class MeanOfVOnEmptyRows(EagerAttention):
    """Masked scores filled with ``finfo.min`` instead of ``-inf`` (HF-style).

    A row that sees no key gets a uniform softmax over *all* keys: the mean of V,
    where the contract says 0.
    """

    name = "bug-empty-rows-mean-v"

    def mask_and_cap(self, case, s, ok):
        if case.softcap is not None:
            s = case.softcap * torch.tanh(s / case.softcap)
        return s.masked_fill(~ok, torch.finfo(s.dtype).min)


# -- heads, softcap, scale --------------------------------------------------------------------------------


class GqaRepeatNotInterleave(EagerAttention):
    """``k.repeat(1, group, 1)`` where ``repeat_interleave`` is meant: query head h reads kv head ``h % hkv``."""

    name = "bug-gqa-head-mapping"

    def expand_kv(self, case, k):
        return k.repeat(1, case.group, 1)


class SoftcapDropped(EagerAttention):
    """The ``softcap`` argument is accepted and never applied."""

    name = "bug-softcap-dropped"

    def mask_and_cap(self, case, s, ok):
        return s.masked_fill(~ok, NEG_INF)


class SoftcapAfterMask(EagerAttention):
    """Mask first, then ``tanh`` softcap: ``c * tanh(-inf) = -c``, so masked keys get weight."""

    name = "bug-softcap-after-mask"

    def mask_and_cap(self, case, s, ok):
        s = s.masked_fill(~ok, NEG_INF)
        if case.softcap is not None:
            s = case.softcap * torch.tanh(s / case.softcap)
        return s


class ScaleIgnored(EagerAttention):
    """The explicit ``softmax_scale`` is dropped; ``1 / sqrt(head_dim)`` always."""

    name = "bug-scale-ignored"

    def scale(self, case):
        return 1.0 / math.sqrt(case.head_dim)


class ScaleFromPaddedHeadDim(EagerAttention):
    """Default scale computed after padding the head dim to the kernel's size (multiple of 32)."""

    name = "bug-scale-padded-head-dim"

    def scale(self, case):
        if case.scale is not None:
            return case.scale
        padded = -(-case.head_dim // 32) * 32
        return 1.0 / math.sqrt(padded)


# -- numerics that only break off the standard normal path ------------------------------------------


class SoftmaxWithoutRunningMax(EagerAttention):
    """``exp(s) / sum(exp(s))`` with no max subtracted: right while logits stay small, and
    ``inf / inf = NaN`` once a logit passes ~88 (float32's ``exp`` overflows): only large logits show it."""

    name = "bug-softmax-no-running-max"

    def softmax(self, s):
        e = torch.exp(s)  # (hq, Sq, Sk); exp(-inf) = 0, exp(> 88.7) = inf
        den = e.sum(dim=-1, keepdim=True)
        return torch.where(den > 0, e / den, torch.zeros_like(e))


class PvAccumulatedInInputDtype(EagerAttention):
    """P @ V summed 16 keys at a time into an accumulator kept in the input dtype (bf16/fp16):
    a rounding per step, so the error grows with the key range; float32 inputs are unaffected."""

    name = "bug-pv-input-dtype-accumulator"
    step = 16

    def attend(self, case, q, k, v, ok):
        kx = self.expand_kv(case, k).float()  # (Sk, hq, D)
        vx = self.expand_kv(case, v).float()  # (Sk, hq, D)
        s = torch.einsum("qhd,khd->hqk", q.float(), kx) * self.scale(case)  # (hq, Sq, Sk)
        p = self.softmax(self.mask_and_cap(case, s, ok))  # (hq, Sq, Sk)
        acc = torch.zeros(q.shape[0], case.hq, case.head_dim, dtype=v.dtype)  # (Sq, hq, D), the input dtype
        for j0 in range(0, kx.shape[0], self.step):
            part = torch.einsum("hqk,khd->qhd", p[..., j0 : j0 + self.step], vx[j0 : j0 + self.step])  # (Sq, hq, D)
            acc = (acc.float() + part).to(v.dtype)
        return acc.float()


class EdgeWrongFromSecondTile(EagerAttention):
    """The left window edge one key too wide, but only for query rows 128 and up: a kernel whose
    per-tile mask offset is right for its first 128-row tile and off by one after it."""

    name = "bug-edge-wrong-after-first-tile"
    tile = 128

    def visible(self, case, i, j, d, sliding=True):
        wl, wr = self.window_size(case)
        ok = torch.ones(i.shape[0], j.shape[1], dtype=torch.bool)
        if sliding and self.bounded(wl):
            ok &= j >= i + d - wl - (i >= self.tile).long()
        if self.bounded(wr):
            ok &= j <= i + d + wr
        return ok


class Fa2RightSideClampedToSk(EagerAttention):
    """flash-attn 2's host-side window clamp (``flash_api.cpp``; Dao-AILab/flash-attention#895),
    found in torch's vendored FA2, xformers' fa2F and vLLM's FA2 build: a side ``>= Sk`` (the
    batch's longest) becomes ``-1``, then a lone unbounded side becomes ``Sk``. Harmless while
    ``Sq <= Sk``; bottom-right with ``Sq > Sk`` shifts the diagonal left by ``Sq - Sk``, so:

    =======================  ==============  ==============================================
    spec ``(left, right)``   kernel's sides  rows with ``Sq > Sk``, bottom-right
    =======================  ==============  ==============================================
    ``(L < Sk, None)``       ``(L, Sk)``     early rows lose keys on the right
    ``(L < Sk, R >= Sk)``    ``(L, Sk)``     the same
    ``(None, R >= Sk)``      ``(-1, -1)``    no window: every row sees every key, empty rows too
    ``(None, R < Sk)``       ``(Sk, R)``     right (``Sk`` on the left reaches key 0)
    =======================  ==============  ==============================================
    """

    name = "bug-fa2-right-side-clamped-to-sk"

    def window_size(self, case):
        sk = max(case.k_lens)
        wl, wr = (-1 if side >= sk else side for side in super().window_size(case))
        if wl < 0 <= wr:
            wl = sk
        elif wr < 0 <= wl:
            wr = sk
        return wl, wr


# -- fp8 KV caches -----------------------------------------------------------------------------------


class Fp8DescaleTwice(EagerAttention):
    """The V descale applied twice: once where the kernel dequantizes the fp8 cache, once more on the
    output, as a wrapper does that multiplies the output by ``v_scale`` after the kernel (FlashInfer's
    Python wrappers do exactly that, ``out *= v_scale``, for kernels that leave it out): harmless while
    the scale is 1 (vLLM's fp8 tests use descale 1), the output off by the scale factor otherwise."""

    name = "bug-fp8-descale-twice"

    def dequantize(self, case, inputs):
        out = super().dequantize(case, inputs)
        if inputs.v_descale is None:
            return out
        again = descale_rows(inputs.v_descale.double(), case.k_lens, case.hkv)  # (), (1, hkv, 1) or (total_k, hkv, 1)
        v = (out.v.double() * again).to(out.v.dtype)  # (total_k, hkv, D): descaled again
        return out.with_tensors(out.q, out.k, v)


class Fp8DescaleHeadStrideZero(EagerAttention):
    """The descales' kv-head stride taken as 0: every kv head dequantized with kv head 0's descale. A kernel
    (or its launcher) written for the per-tensor scales engines pass expanded to ``(B, hkv)`` with stride 0
    (vLLM's ``layer._k_scale.expand(...)``) computes the same while every head's descale is equal, and
    scales each other kv head's keys and values by the ratio of the two descales once they differ (an
    engine or checkpoint with per-head KV scales, FA3's ``(B, hkv)`` descales)."""

    name = "bug-fp8-descale-head-stride-0"

    def dequantize(self, case, inputs):
        def first_head(d):
            return d if d is None or d.dim() == 0 else d[..., :1].expand_as(d)  # (hkv,) / (B, hkv): head 0's

        wrong = dataclasses.replace(inputs, **{f"{n}_descale": first_head(getattr(inputs, f"{n}_descale")) for n in "qkv"})
        return super().dequantize(case, wrong)


class Fp8DescaleBatchStrideZero(EagerAttention):
    """The descales' batch stride taken as 0: every sequence dequantized with sequence 0's descales. The
    same blind spot as :class:`Fp8DescaleHeadStrideZero`, along the batch: right for per-tensor and
    per-kv-head descales (the same for every sequence), wrong for FA3's per-(sequence, kv head) ones."""

    name = "bug-fp8-descale-batch-stride-0"

    def dequantize(self, case, inputs):
        def first_seq(d):
            return d[:1].expand_as(d) if d is not None and d.dim() == 2 else d  # (B, hkv): sequence 0's row

        wrong = dataclasses.replace(inputs, **{f"{n}_descale": first_seq(getattr(inputs, f"{n}_descale")) for n in "qkv"})
        return super().dequantize(case, wrong)


# -- learned sinks and chunked local attention -------------------------------------------------------


class SinkTimesScale(EagerAttention):
    """The learned sink multiplied by the softmax scale, as if it were one more score ``q . k``.

    The sink is a logit in natural-log units added to the denominator as ``exp(sink_h)`` (FA4's
    ``learnable_sink``, vLLM's ``s_aux``, FlashInfer's ``sinks``); a kernel that folds it into the
    scaled score tile (or into ``log2(e) x scale`` for ``exp2``) scales it by ``1 / sqrt(d)``.
    """

    name = "bug-sink-times-scale"

    def sink_logits(self, case, sinks):
        return sinks.float() * self.scale(case)


class ChunkTopLeft(EagerAttention):
    """Chunked local attention with the chunk boundary aligned top-left: the chunk of query ``i``
    taken from ``i``, not from its absolute position ``i + Sk - Sq``. Right when ``Sq == Sk``
    (a whole prompt), wrong for decode and chunked prefill: the query reads the chunk of the
    prompt's first tokens."""

    name = "bug-chunk-top-left"

    def chunk_position(self, i, sq, sk):
        return i


class BatchDependentReduction(EagerAttention):
    """``P @ V`` summed over key splits whose number depends on the batch size (4 splits alone, 2 in a batch of
    two, 1 from three on): a split-KV heuristic that picks ``num_splits`` from batch x heads to fill the GPU
    (flash-attn's ``num_splits_heuristic``, FlashInfer's decode split choice), which vLLM's batch-invariant
    mode and SGLang's deterministic mode switch off. Each split's partial sum is exact float32; only the order
    of the summation moves with the batch, so every output stays inside the error budget, but a sequence's
    output alone differs from its output in a batch in the last bits. Caught only by ``--invariance``
    (:attr:`PlantedBug.checks`)."""

    name = "bug-batch-dependent-reduction"

    def pv(self, case: Case, p: torch.Tensor, vx: torch.Tensor) -> torch.Tensor:
        splits = max(1, 4 // case.batch)
        out = torch.zeros(p.shape[1], p.shape[0], vx.shape[-1], dtype=torch.float32)  # (Sq, hq, D)
        for keys in torch.tensor_split(torch.arange(vx.shape[0]), splits):
            out = out + torch.einsum("hqk,khd->qhd", p[..., keys], vx[keys])  # (Sq, hq, D)
        return out


@dataclasses.dataclass(frozen=True)
class PlantedBug:
    name: str  # the backend's registry-style name
    klass: str  # the bug class of window-semantics.md
    backend: type[EagerAttention]
    #: the engine checks it is run with (parity.results.ENGINE_CHECKS): a bug only they can catch
    checks: tuple[str, ...] = ()

    @property
    def backend_name(self) -> str:
        return f"{__name__}:{self.backend.__name__}"


BUGS: tuple[PlantedBug, ...] = (
    PlantedBug("bug-window-one-wider", "window one token wider", WindowOneWider),
    PlantedBug("bug-window-one-narrower", "window one token narrower", WindowOneNarrower),
    PlantedBug("bug-symmetric-window-causal", "(W, W) under causal", SymmetricWindowUnderCausal),
    PlantedBug("bug-top-left-alignment", "top-left alignment when Sq != Sk", TopLeftAlignment),
    PlantedBug("bug-decode-drops-window", "window dropped in decode path", DecodeDropsWindow),
    PlantedBug("bug-paged-drops-window", "window dropped in paged path", PagedDropsWindow),
    PlantedBug("bug-paged-reads-every-page", "paged path reads pages outside the window (x 0)", PagedReadsEveryPage),
    PlantedBug("bug-paged-long-path-reads-from-page-0", "long paged path reads all pages from 0 (x 0)", PagedLongPathReadsFromPageZero),
    PlantedBug("bug-paged-walks-longest-table", "paged path walks the longest sequence's block-table slots (x 0)", PagedWalksLongestTable),
    PlantedBug("bug-decode-reads-cache-capacity", "decode reads slots past the used length (x 0)", DecodeReadsCacheCapacity),
    PlantedBug("bug-split-kv-merge-weighs-empty-splits", "split-KV merge weighs empty splits (LSE 0)", SplitKvMergeWeighsEmptySplits),
    PlantedBug("bug-window-only-when-longer", "window only when sequence exceeds W", WindowOnlyWhenLonger),
    PlantedBug("bug-sentinel-zero-unbounded", "sentinel: 0 read as unbounded", SentinelZeroIsUnbounded),
    PlantedBug("bug-sentinel-none-zero", "sentinel: None read as 0", SentinelNoneIsZero),
    PlantedBug("bug-sentinel-minus-one-literal", "sentinel: -1 read literally", SentinelMinusOneLiteral),
    PlantedBug("bug-empty-rows-nan", "fully masked rows give NaN", NanOnEmptyRows),
    PlantedBug("bug-empty-rows-mean-v", "fully masked rows give mean of V", MeanOfVOnEmptyRows),
    PlantedBug("bug-gqa-head-mapping", "wrong GQA head mapping", GqaRepeatNotInterleave),
    PlantedBug("bug-softcap-dropped", "softcap dropped", SoftcapDropped),
    PlantedBug("bug-softcap-after-mask", "softcap applied after masking", SoftcapAfterMask),
    PlantedBug("bug-scale-ignored", "wrong softmax scale: explicit scale ignored", ScaleIgnored),
    PlantedBug("bug-scale-padded-head-dim", "wrong softmax scale: padded head dim", ScaleFromPaddedHeadDim),
    PlantedBug("bug-softmax-no-running-max", "softmax without a running max (overflows on large logits)", SoftmaxWithoutRunningMax),
    PlantedBug("bug-pv-input-dtype-accumulator", "P @ V accumulated in the input dtype, 16 keys a step", PvAccumulatedInInputDtype),
    PlantedBug("bug-edge-wrong-after-first-tile", "window edge wrong from the second 128-row tile on", EdgeWrongFromSecondTile),
    PlantedBug("bug-lse-in-log2", "log-sum-exp returned in base 2", LseInLog2),
    PlantedBug("bug-fa2-right-side-clamped-to-sk", "Sq > Sk: a side >= Sk (or unbounded) clamped to Sk (FA2)", Fa2RightSideClampedToSk),
    PlantedBug("bug-fp8-descale-twice", "fp8 KV: the V descale applied twice", Fp8DescaleTwice),
    PlantedBug("bug-fp8-descale-head-stride-0", "fp8 KV: kv head 0's descale for every kv head", Fp8DescaleHeadStrideZero),
    PlantedBug("bug-fp8-descale-batch-stride-0", "fp8 KV: sequence 0's descales for every sequence", Fp8DescaleBatchStrideZero),
    PlantedBug("bug-sink-times-scale", "learned sink multiplied by the softmax scale", SinkTimesScale),
    PlantedBug("bug-chunk-top-left", "chunk boundary aligned top-left (chunk of i, not i + Sk - Sq)", ChunkTopLeft),
    PlantedBug(
        "bug-batch-dependent-reduction",
        "split-KV count from the batch size: not batch invariant (--invariance)",
        BatchDependentReduction,
        checks=("invariance",),
    ),
)


# ---------------------------------------------------------------- in the backward only (--grad)


class BackwardOf(EagerAttention):
    """An honest forward whose backward differentiates another forward, :attr:`backward_forward`: a
    kernel whose backward recomputes the mask (or the scores) its own way, as flash-style backward
    kernels do, instead of reusing the forward's."""

    backward_forward: type[EagerAttention] = EagerAttention

    def backward(self, case: Case, inputs: Inputs, dout: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self.backward_forward().backward(case, inputs, dout)


class BackwardMaskTopLeft(BackwardOf):
    """The backward rebuilds the causal / window mask top-left aligned while the forward is bottom-right:
    xformers' bottom-right local mask is excluded from its own backward tests ("infs/nans in the BW pass
    for local + causal"); a backward kernel written for Sq == Sk only."""

    name = "bug-grad-mask-top-left"
    backward_forward = TopLeftAlignment


class BackwardRightOffByOne(BackwardOf):
    """The backward's right window side one key too wide (``j <= i + d + right + 1``): the forward and
    backward kernels of one library translating ``window_size_right`` each on their own."""

    name = "bug-grad-right-off-by-one"

    class backward_forward(EagerAttention):  # noqa: N801 - the forward the backward differentiates
        def window_size(self, case: Case) -> tuple[int, int]:
            wl, wr = super().window_size(case)
            return wl, wr + 1 if wr >= 0 else wr


class BackwardEdgeWrongFromSecondTile(BackwardOf):
    """The backward's left window edge one key too wide from its second 128-row tile on (the forward
    is right): a per-tile mask offset of the backward kernel's own loop."""

    name = "bug-grad-edge-after-first-tile"
    backward_forward = EdgeWrongFromSecondTile


class BackwardGqaNotSummed(EagerAttention):
    """``dk`` / ``dv`` of a kv head taken from the first query head of its group only, not summed over
    the group: a GQA backward that expands K/V to ``hq`` heads and then slices instead of reducing."""

    name = "bug-grad-gqa-not-summed"

    def backward(self, case: Case, inputs: Inputs, dout: torch.Tensor) -> tuple[torch.Tensor, ...]:
        g = case.group
        mha = dataclasses.replace(case, hkv=case.hq)
        k, v = inputs.k.repeat_interleave(g, dim=1), inputs.v.repeat_interleave(g, dim=1)  # (total_k, hq, D)
        dq, dk, dv, *dsinks = super().backward(mha, dataclasses.replace(inputs, case=mha, k=k, v=v), dout)  # dk, dv (total_k, hq, D)
        return dq, dk[:, ::g].contiguous(), dv[:, ::g].contiguous(), *dsinks  # (total_k, hkv, D): one head of each group


class BackwardNanOnEmptyRows(EagerAttention):
    """``dq`` NaN on rows that see no key: the backward divides by the row's softmax sum (0 there)
    where the forward guarded it, as cuDNN SDPA's NaN in dQ with a mask (pytorch/pytorch#196678)."""

    name = "bug-grad-empty-rows-nan"

    def backward(self, case: Case, inputs: Inputs, dout: torch.Tensor) -> tuple[torch.Tensor, ...]:
        dq, dk, dv, *dsinks = super().backward(case, inputs, dout)
        for _, q, k, _, qs in inputs.sequences():
            empty = ~self.prefill_mask(case, q.shape[0], k.shape[0]).any(-1)  # (Sq,) rows with no visible key
            dq[qs][empty] = float("nan")
        return dq, dk, dv, *dsinks


class BackwardDropsSink(EagerAttention):
    """The backward recomputes ``P`` without the learned sink (``exp(s) / sum exp(s)``) while the forward divided by
    ``exp(sink) + sum exp(s)``: a backward kernel that rebuilds the softmax from the scores alone instead of from
    the forward's saved log-sum-exp, which holds the sink's term."""

    name = "bug-grad-sink-dropped"

    def backward(self, case: Case, inputs: Inputs, dout: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if inputs.sinks is None:
            return super().backward(case, inputs, dout)
        no_sink = dataclasses.replace(case, sinks=False)
        return super().backward(no_sink, dataclasses.replace(inputs, case=no_sink, sinks=None), dout)


class BackwardSinkGradSignFlipped(EagerAttention):
    """``dsinks`` with its sign flipped (``+p_sink x rowsum(P dP)``): the sink's score gradient written as a key's
    ``p (dp - rowsum)`` with the sink's ``dp`` taken as ``2 x rowsum`` instead of 0; dq / dk / dv are right."""

    name = "bug-grad-dsinks-sign"

    def backward(self, case: Case, inputs: Inputs, dout: torch.Tensor) -> tuple[torch.Tensor, ...]:
        grads = super().backward(case, inputs, dout)
        return (*grads[:3], -grads[3]) if len(grads) == 4 else grads


#: The planted backward bugs: each forward is honest (``parity selftest --grad`` runs them).
GRAD_BUGS: tuple[PlantedBug, ...] = (
    PlantedBug("bug-grad-mask-top-left", "backward recomputes the mask top-left (forward bottom-right)", BackwardMaskTopLeft),
    PlantedBug("bug-grad-right-off-by-one", "backward's right window side one key too wide", BackwardRightOffByOne),
    PlantedBug("bug-grad-edge-after-first-tile", "backward's left edge wrong from 128-row tile 2 on", BackwardEdgeWrongFromSecondTile),
    PlantedBug("bug-grad-gqa-not-summed", "dk/dv of a GQA group: first query head's only, not summed", BackwardGqaNotSummed),
    PlantedBug("bug-grad-empty-rows-nan", "rows that see no key: NaN in dq", BackwardNanOnEmptyRows),
    PlantedBug("bug-grad-sink-dropped", "backward's softmax without the learned sink", BackwardDropsSink),
    PlantedBug("bug-grad-dsinks-sign", "the sinks' own gradient with its sign flipped", BackwardSinkGradSignFlipped),
)


# ---------------------------------------------------------------- on a GPU


class Fa2CudaWindowOneWider(TorchFa2Backend):
    """A real CUDA kernel (PyTorch's vendored FlashAttention-2) handed a left window one token
    wider than the case asks: the off-by-one of passing vLLM's / HF's ``sliding_window = W``
    as flash-attn's ``left`` (``W`` instead of ``W - 1``). Not in :data:`BUGS` (the CPU
    self-test); it proves on a GPU that the gate turns red:
    ``PARITY_GPU_BACKENDS=parity.selftest.bugs:Fa2CudaWindowOneWider nox -s gpu``."""

    name = "bug-fa2-cuda-window-one-wider"
    description = "torch's FA2 with window_size_left one too large (planted bug)"

    def run(self, case: Case, inputs: Inputs, out: torch.Tensor) -> torch.Tensor:
        w = case.window
        if w.left is not None:
            case = dataclasses.replace(case, window=dataclasses.replace(w, left=w.left + 1))
        return super().run(case, inputs, out)
