"""Honest variants: the same function by other algorithms. They differ only numerically and must pass.

* :class:`SplitKV` - flash-decoding: keys in splits (fixed-size chunks, or the pages of
  a paged cache read through the block table), each split normalised on its own, the
  partial outputs merged by their log-sum-exp (a learned sink: one more term of that merge);
* :class:`OnlineSoftmaxTiled` - flash-attn 2's forward loop: key tiles, running max and
  sum, rescaled float32 accumulator, ``exp2`` with ``log2(e)`` folded into the scale;
* :class:`LowPrecisionP` - flash-attn's dtype flow: unnormalised probabilities rounded to
  the input dtype (bf16 / fp16) before the PV product, float32 row sum, divide at the end;
* :class:`ReversedKeyOrder` - keys and values processed last to first, so every sum over
  keys runs in the opposite order;
* :class:`LowPrecisionReversed` - no float32 at all: scores, softmax and PV in the input
  dtype, keys reversed (the same-dtype baseline's arithmetic in another order);
* :class:`Fp8TensorCores` - FA3's fp8 forward (fp8 cases only): raw fp8 ``q . k`` times the
  descales, online softmax, ``P * 2**8`` cast to e4m3 for the ``P @ V`` product on raw fp8 ``V``,
  float32 row sum, ``v_descale / l`` at the end;
* :class:`PagedLongPath` - above 1k keys, a paged long-context path walking each sequence's own
  block-table slots page by page, the window's pages only, with an online softmax;
* :class:`parity.selftest.bugs.SplitKvDecode` - split-KV decode above 1k keys: 16 splits over the whole cache
  (most outside a small window), empty splits ``-inf`` in the log-sum-exp merge (the planted
  ``bug-split-kv-merge-weighs-empty-splits`` weighs them);
* :class:`parity.selftest.bugs.EagerAttention` - the eager float32 base of every planted
  bug (listed in :data:`HONEST` too: a bug only counts as caught if its base passes).

The others take fp8 cases by dequantizing the inputs to the case's dtype first.
All of them build the visible band from the canonical window themselves
(``i + d - left <= j <= i + d + right``), never through the reference.
"""

from __future__ import annotations

import dataclasses
import math

import torch

from ..backends.base import Backend
from ..case import FP8_DTYPES, FP8_SCALES, Case, Inputs, pages_seen
from ..reference import P_FP8_OFFSET
from .bugs import LONG_PATH_KEYS, EagerAttention, EagerWithLse, SplitKvDecode

LOG2E = 1.0 / math.log(2.0)


def band_mask(case: Case, sq: int, sk: int) -> torch.Tensor:
    """``(Sq, Sk)`` bool, True = visible, from the canonical window."""
    w = case.window
    d = sk - sq if w.align == "bottom_right" else 0
    i = torch.arange(sq)[:, None]  # (Sq, 1)
    j = torch.arange(sk)[None, :]  # (1, Sk)
    ok = torch.ones(sq, sk, dtype=torch.bool)
    if w.left is not None:
        ok &= j >= i + d - w.left
    if w.right is not None:
        ok &= j <= i + d + w.right
    if case.chunk is not None:  # the query's absolute position i + Sk - Sq and the key in one chunk
        ok &= torch.div(j, case.chunk, rounding_mode="floor") == torch.div(i + sk - sq, case.chunk, rounding_mode="floor")
    return ok


def sequences_kv(case: Case, inputs: Inputs):
    """Per sequence ``(q, k, v, q_slice, pages)``; K/V through the block table when the case is paged.

    ``pages`` is the list of key ranges that live in one physical page (paged cases) or ``None``.
    """
    if case.page_size is None:
        for _, q, k, v, qs in inputs.sequences():
            yield q, k, v, qs, None
        return
    cache = inputs.paged()
    ps = cache.page_size
    for b, q, _, _, qs in inputs.sequences():
        sk = int(cache.seqlens_k[b])
        pages = cache.block_table[b, : -(-sk // ps)].long()
        one = dataclasses.replace(cache, block_table=cache.block_table[b : b + 1], seqlens_k=cache.seqlens_k[b : b + 1])
        k, v = one.gather([pages_seen(case, ps, b)])  # (Sk, hkv, D) each: the pages no row sees are not read
        yield q, k, v, qs, [(p * ps, min(sk, (p + 1) * ps)) for p in range(len(pages))]


class _Honest(Backend):
    device = "cpu"
    supports_paged = True
    kv_dtypes = tuple(FP8_DTYPES)  # fp8 inputs dequantized to the case's dtype (Fp8TensorCores: kept fp8)
    fp8_scale_layouts = FP8_SCALES  # every descale layout: per element (Inputs.dequantized)
    fp8_queries = True
    supports_chunk = True  # band_mask
    #: the case's learned sink logits ``(hq,)`` of the call in progress (set by :meth:`run`; :class:`SplitKV` uses them)
    _sinks: torch.Tensor | None = None
    supports_grad = True  # the backward: autograd through run, i.e. the variant's own algorithm differentiated
    grad_sinks = True  # where a variant takes sinks (supports_sinks), its algorithm with them differentiated

    def logits(self, case: Case, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """``q`` ``(Sq, hq, D)``, ``k`` ``(Sk, hkv, D)`` -> float32 scaled (softcapped) scores ``(hq, Sq, Sk)``."""
        kx = k.repeat_interleave(case.group, dim=1).float()  # (Sk, hq, D)
        s = torch.einsum("qhd,khd->hqk", q.float(), kx) * case.softmax_scale
        if case.softcap is not None:
            s = case.softcap * torch.tanh(s / case.softcap)
        return s

    def attend(self, case: Case, q, k, v, pages) -> torch.Tensor:
        raise NotImplementedError

    def run(self, case: Case, inputs: Inputs, out: torch.Tensor) -> torch.Tensor:
        if inputs.k_descale is not None:
            inputs = inputs.dequantized(case.torch_dtype)
        self._sinks = inputs.sinks  # (hq,) or None
        for q, k, v, qs, pages in sequences_kv(case, inputs):
            out[qs] = self.attend(case, q, k, v, pages).to(out.dtype)
        return out

    def attend_lse(self, case: Case, q, k, v, pages) -> tuple[torch.Tensor, torch.Tensor]:
        """``attend`` and the LSE ``(Sq, hq)``, natural log (variants with ``returns_lse``)."""
        raise NotImplementedError

    def run_lse(self, case: Case, inputs: Inputs, out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        lse = torch.empty(inputs.q.shape[:2], dtype=torch.float32)  # (total_q, hq)
        if inputs.k_descale is not None:
            inputs = inputs.dequantized(case.torch_dtype)
        self._sinks = inputs.sinks  # (hq,) or None
        for q, k, v, qs, pages in sequences_kv(case, inputs):
            o, seq_lse = self.attend_lse(case, q, k, v, pages)
            out[qs], lse[qs] = o.to(out.dtype), seq_lse
        return out, lse


class SplitKV(_Honest):
    """Split-KV (flash-decoding) with a log-sum-exp merge of normalised partial outputs."""

    name = "honest-split-kv"
    description = (
        "self-test: split-KV, per-split softmax, log-sum-exp merge (a learned sink: one more term of the merge); returns the merged LSE"
    )
    split = 24
    supports_sinks = True  # the sink merged as a split of log-sum-exp ``sink_h`` and output 0, as split-KV engines do
    returns_lse = True

    def attend(self, case, q, k, v, pages):
        return self.attend_lse(case, q, k, v, pages)[0]

    def split_ranges(self, sk: int, pages: list[tuple[int, int]] | None) -> list[tuple[int, int]]:
        """The ``[j0, j1)`` key ranges of the splits of a sequence of ``sk`` keys: its pages when paged, else :attr:`split` keys each."""
        return pages or [(j0, min(sk, j0 + self.split)) for j0 in range(0, sk, self.split)]

    def attend_lse(self, case, q, k, v, pages) -> tuple[torch.Tensor, torch.Tensor]:
        """-> output ``(Sq, hq, D)`` and the merged LSE ``(Sq, hq)`` (``-inf`` where no key)."""
        sk = k.shape[0]
        ok = band_mask(case, q.shape[0], sk)  # (Sq, Sk)
        s = self.logits(case, q, k).masked_fill(~ok, float("-inf"))  # (hq, Sq, Sk)
        vx = v.repeat_interleave(case.group, dim=1).float()  # (Sk, hq, D)
        outs, lses = [], []
        for j0, j1 in self.split_ranges(sk, pages):
            sj = s[..., j0:j1]  # (hq, Sq, n)
            m = sj.amax(-1, keepdim=True)  # (hq, Sq, 1)
            m_safe = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
            p = torch.exp(sj - m_safe)
            l = p.sum(-1, keepdim=True)  # noqa: E741
            o = torch.einsum("hqk,khd->hqd", p, vx[j0:j1]) / torch.where(l > 0, l, torch.ones_like(l))
            outs.append(o)
            lses.append(torch.where(l > 0, m_safe + torch.log(l), torch.full_like(l, float("-inf"))))
        if self._sinks is not None:  # the sink: a split whose log-sum-exp is sink_h and whose output is 0
            lses.append(self._sinks.float()[:, None, None].expand(-1, q.shape[0], 1))  # (hq, Sq, 1)
            outs.append(torch.zeros_like(outs[0]))
        lse = torch.stack(lses)  # (splits, hq, Sq, 1)
        top = lse.amax(0)  # (hq, Sq, 1)
        top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
        wts = torch.exp(lse - top)  # (splits, hq, Sq, 1); 0 for empty splits
        tot = wts.sum(0)
        o = (wts * torch.stack(outs)).sum(0) / torch.where(tot > 0, tot, torch.ones_like(tot))  # (hq, Sq, D)
        merged = torch.where(tot > 0, top + torch.log(tot), float("-inf"))[..., 0]  # (hq, Sq)
        return o.transpose(0, 1), merged.transpose(0, 1)  # (Sq, hq, D), (Sq, hq)


class OnlineSoftmaxTiled(_Honest):
    """flash-attn 2's loop: key tiles, running max / sum, exp2 with log2(e) folded into the scale."""

    name = "honest-online-softmax"
    description = "self-test: tiled online softmax, exp2, float32 accumulator"
    tile = 13  # not a divisor of typical lengths: ragged last tiles
    returns_lse = True
    lse_empty = ("+inf",)  # flash-attn 2's convention (softmax.h: an empty row's LSE is +inf)

    def attend(self, case, q, k, v, pages):
        return self.attend_lse(case, q, k, v, pages)[0]

    def attend_lse(self, case, q, k, v, pages):
        """-> ``(Sq, hq, D)`` and ``(Sq, hq)``: the log2-domain ``m + log2(l)`` times ln 2, ``+inf`` where no key."""
        sq, sk = q.shape[0], k.shape[0]
        ok = band_mask(case, sq, sk)
        kx = k.repeat_interleave(case.group, dim=1).float()  # (Sk, hq, D)
        vx = v.repeat_interleave(case.group, dim=1).float()
        qf = q.float().transpose(0, 1)  # (hq, Sq, D)
        c = case.softmax_scale * LOG2E
        m = torch.full((case.hq, sq, 1), float("-inf"))
        l = torch.zeros(case.hq, sq, 1)  # noqa: E741
        acc = torch.zeros(case.hq, sq, case.head_dim)
        for j0 in range(0, sk, self.tile):
            j1 = min(sk, j0 + self.tile)
            if case.softcap is None:
                s = (qf @ kx[j0:j1].transpose(0, 1).transpose(1, 2)) * c  # (hq, Sq, n), log2 units
            else:
                raw = (qf @ kx[j0:j1].transpose(0, 1).transpose(1, 2)) * case.softmax_scale
                s = case.softcap * torch.tanh(raw / case.softcap) * LOG2E
            s = s.masked_fill(~ok[:, j0:j1], float("-inf"))
            m_new = torch.maximum(m, s.amax(-1, keepdim=True))
            m_safe = torch.where(torch.isfinite(m_new), m_new, torch.zeros_like(m_new))
            alpha = torch.exp2(torch.where(torch.isfinite(m), m - m_safe, torch.full_like(m, float("-inf"))))
            p = torch.exp2(s - m_safe)
            l = l * alpha + p.sum(-1, keepdim=True)  # noqa: E741
            acc = acc * alpha + p @ vx[j0:j1].transpose(0, 1)
            m = m_new
        o = acc / torch.where(l > 0, l, torch.ones_like(l))
        lse = torch.where(l > 0, (m + torch.log2(l)) / LOG2E, float("inf"))[..., 0]  # (hq, Sq)
        return o.transpose(0, 1), lse.transpose(0, 1)


class LowPrecisionP(_Honest):
    """Probabilities rounded to the input dtype before PV, float32 row sum, normalise at the end."""

    name = "honest-low-precision-p"
    description = "self-test: P = exp(s - m) rounded to the input dtype (bf16/fp16) before PV"
    supports_grad = False  # autograd of this forward keeps dP in the input dtype: it overflows (fp16, large values)
    no_grad_reason = "a forward-only variant: autograd through it computes dP in the input dtype (overflows in fp16)"

    def attend(self, case, q, k, v, pages):
        ok = band_mask(case, q.shape[0], k.shape[0])
        s = self.logits(case, q, k).masked_fill(~ok, float("-inf"))  # (hq, Sq, Sk)
        m = s.amax(-1, keepdim=True)
        m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
        p = torch.exp(s - m)  # (hq, Sq, Sk) float32
        l = p.sum(-1, keepdim=True)  # noqa: E741
        p_low = p.to(v.dtype)  # the dtype flow of flash-attn: P in bf16/fp16 for the PV matmul
        vx = v.repeat_interleave(case.group, dim=1)  # (Sk, hq, D), input dtype
        o = torch.einsum("hqk,khd->hqd", p_low.float(), vx.float())  # exact products, float32 accumulation
        return (o / torch.where(l > 0, l, torch.ones_like(l))).transpose(0, 1)


class ReversedKeyOrder(_Honest):
    """Every key sum runs from the last key to the first."""

    name = "honest-reversed-keys"
    description = "self-test: keys and values processed in reverse order"

    def attend(self, case, q, k, v, pages):
        ok = band_mask(case, q.shape[0], k.shape[0]).flip(-1)  # (Sq, Sk), key order reversed
        kr, vr = k.flip(0), v.flip(0)
        s = self.logits(case, q, kr).masked_fill(~ok, float("-inf"))  # (hq, Sq, Sk)
        m = s.amax(-1, keepdim=True)
        m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
        p = torch.exp(s - m)
        l = p.cumsum(-1)[..., -1:]  # noqa: E741 - sequential running sum, last key first
        vx = vr.repeat_interleave(case.group, dim=1).float()
        o = torch.einsum("hqk,khd->hqd", p, vx) / torch.where(l > 0, l, torch.ones_like(l))
        return o.transpose(0, 1)


class LowPrecisionReversed(_Honest):
    """Everything in the input dtype (scores, softmax, PV: no float32 at all), keys last to first.

    The same-dtype baseline's arithmetic in another order: the closest an honest kernel
    gets to the budget (``k_max`` x that baseline's error).
    """

    name = "honest-input-dtype-reversed"
    description = "self-test: scores, softmax and PV all in the input dtype, key order reversed"
    supports_grad = False  # its autograd backward overflows in fp16, and softmax over an all -inf row has a NaN gradient
    no_grad_reason = "a forward-only variant: its autograd backward overflows in fp16 and is NaN on rows that see no key"

    def attend(self, case, q, k, v, pages):
        ok = band_mask(case, q.shape[0], k.shape[0]).flip(-1)  # (Sq, Sk), key order reversed
        kr = k.flip(0).repeat_interleave(case.group, dim=1)  # (Sk, hq, D), input dtype
        vr = v.flip(0).repeat_interleave(case.group, dim=1)
        s = torch.einsum("qhd,khd->hqk", q * case.softmax_scale, kr)  # (hq, Sq, Sk), input dtype
        if case.softcap is not None:
            s = torch.tanh(s / case.softcap) * case.softcap
        p = torch.softmax(s.masked_fill(~ok, float("-inf")), dim=-1).nan_to_num(0.0)  # rows with no key: 0
        return torch.einsum("hqk,khd->qhd", p, vr)


class Fp8TensorCores(_Honest):
    """FA3's fp8 forward on the raw fp8 values: ``q . k`` in float32 times ``q_descale * k_descale *
    scale``, key tiles with a running max, ``P~ = exp(s - m) * 2**8`` cast to e4m3 for the ``P @ V``
    product on the raw fp8 ``V`` (FA3's ``Max_offset = 8``), the row sum of the unrounded ``P~`` in
    float32, then ``* v_descale / 2**8 / l``. fp8 cases only."""

    name = "honest-fp8-tensor-cores"
    description = "self-test: fp8 q.k and P @ V on raw fp8 values, P * 2**8 in e4m3, descales applied once"
    tile = 48

    def unsupported_reason(self, case: Case) -> str | None:
        return None if case.kv_dtype is not None else "an fp8 emulation: fp8 cases only (the other variants cover the rest)"

    def run(self, case: Case, inputs: Inputs, out: torch.Tensor) -> torch.Tensor:
        for b, (q, k, v, qs, _) in enumerate(sequences_kv(case, inputs)):
            # descales per query head, folded into the score scale and the output (any layout: Inputs.head_descales)
            kd = inputs.head_descales("k", b).repeat_interleave(case.group)  # (hq,): query head h takes kv head h // group's
            qk = (inputs.head_descales("q", b) * kd * case.softmax_scale).float()[:, None, None]  # (hq, 1, 1)
            vd = inputs.head_descales("v", b).repeat_interleave(case.group).float()[:, None, None]  # (hq, 1, 1)
            out[qs] = self.attend_fp8(case, q, k, v, qk, vd).to(out.dtype)
        return out

    def attend_fp8(self, case: Case, q, k, v, qk: torch.Tensor, v_descale: torch.Tensor) -> torch.Tensor:
        """``qk``: ``q_descale * k_descale * scale`` and ``v_descale`` per query head, ``(hq, 1, 1)`` each."""
        sq, sk = q.shape[0], k.shape[0]
        ok = band_mask(case, sq, sk)  # (Sq, Sk)
        kx = k.repeat_interleave(case.group, dim=1).float().permute(1, 2, 0)  # (hq, D, Sk): raw fp8 values
        vx = v.repeat_interleave(case.group, dim=1).float().transpose(0, 1)  # (hq, Sk, D)
        qf = q.float().transpose(0, 1)  # (hq, Sq, D)
        m = torch.full((case.hq, sq, 1), float("-inf"))
        l = torch.zeros(case.hq, sq, 1)  # noqa: E741
        acc = torch.zeros(case.hq, sq, case.head_dim)
        for j0 in range(0, sk, self.tile):
            j1 = min(sk, j0 + self.tile)
            s = (qf @ kx[..., j0:j1]) * qk  # (hq, Sq, n) float32
            if case.softcap is not None:
                s = case.softcap * torch.tanh(s / case.softcap)
            s = s.masked_fill(~ok[:, j0:j1], float("-inf"))
            m_new = torch.maximum(m, s.amax(-1, keepdim=True))
            m_safe = torch.where(torch.isfinite(m_new), m_new, torch.zeros_like(m_new))
            alpha = torch.exp(torch.where(torch.isfinite(m), m - m_safe, torch.full_like(m, float("-inf"))))
            p = torch.exp(s - m_safe)  # (hq, Sq, n) in [0, 1]
            l = l * alpha + p.sum(-1, keepdim=True)  # noqa: E741
            p8 = (p * P_FP8_OFFSET).to(getattr(torch, case.kv_dtype or "float8_e4m3fn")).float()  # (hq, Sq, n)
            acc = acc * alpha + p8 @ vx[:, j0:j1]
            m = m_new
        o = acc * (v_descale / P_FP8_OFFSET) / torch.where(l > 0, l, torch.ones_like(l))  # (hq, Sq, D)
        return o.transpose(0, 1)  # (Sq, hq, D)


class PagedLongPath(EagerAttention):
    """Above :data:`~parity.selftest.bugs.LONG_PATH_KEYS` keys, a paged long-context path: each sequence walks its own
    block-table slots page by page (never the longest sequence's slot count), skips the pages its window does not
    reach, and keeps an online softmax (running max and sum, a learned sink merged at the end). The honest twin of
    the planted ``bug-paged-long-path-reads-from-page-0`` and ``bug-paged-walks-longest-table``."""

    name = "honest-paged-long-path"
    description = "self-test: paged long-context path (own block-table slots, window pages only, online softmax)"

    def run_paged(self, case: Case, inputs: Inputs, out: torch.Tensor) -> torch.Tensor:
        if max(case.k_lens) <= LONG_PATH_KEYS:
            return super().run_paged(case, inputs, out)
        cache = inputs.paged()
        for b, q, _, _, qs in inputs.sequences():
            out[qs] = self.walk_pages(case, cache, b, q).to(out.dtype)
        return out

    def walk_pages(self, case: Case, cache, b: int, q: torch.Tensor) -> torch.Tensor:
        """Sequence ``b``'s output ``(Sq, hq, D)`` float32 from its own pages that the window reaches."""
        ps, sk, sq = cache.page_size, int(cache.seqlens_k[b]), q.shape[0]
        ok = self.paged_mask(case, sq, sk)  # (Sq, Sk)
        m = torch.full((case.hq, sq, 1), float("-inf"))  # (hq, Sq, 1) running max
        den = torch.zeros(case.hq, sq, 1)  # (hq, Sq, 1) running sum
        acc = torch.zeros(case.hq, sq, case.head_dim)  # (hq, Sq, D)
        for p in self.pages_to_load(ok, ps).nonzero().flatten().tolist():
            j0, j1, phys = p * ps, min(sk, (p + 1) * ps), int(cache.block_table[b, p])
            kx = self.expand_kv(case, cache.k_cache[phys, : j1 - j0]).float()  # (n, hq, D)
            vx = self.expand_kv(case, cache.v_cache[phys, : j1 - j0]).float()  # (n, hq, D)
            s = self.mask_and_cap(case, torch.einsum("qhd,khd->hqk", q.float(), kx) * self.scale(case), ok[:, j0:j1])  # (hq, Sq, n)
            m, den, acc = _online_step(m, den, acc, s, vx)
        if self._sinks is not None:  # one more term of the sum, with no value
            sink = self.sink_logits(case, self._sinks)[:, None, None].expand_as(m)  # (hq, Sq, 1)
            m, den, acc = _online_step(m, den, acc, sink, torch.zeros(1, case.hq, case.head_dim))
        return (acc / torch.where(den > 0, den, torch.ones_like(den))).transpose(0, 1)  # (Sq, hq, D)


def _online_step(m, den, acc, s, vx):
    """One block of an online softmax: scores ``s`` ``(hq, Sq, n)`` (``-inf`` masked), values ``vx`` ``(n, hq, D)``."""
    m_new = torch.maximum(m, s.amax(-1, keepdim=True))  # (hq, Sq, 1)
    m_safe = torch.where(torch.isfinite(m_new), m_new, torch.zeros_like(m_new))
    alpha = torch.exp(torch.where(torch.isfinite(m), m - m_safe, torch.full_like(m, float("-inf"))))  # (hq, Sq, 1)
    p = torch.exp(s - m_safe)  # (hq, Sq, n)
    return m_new, den * alpha + p.sum(-1, keepdim=True), acc * alpha + torch.einsum("hqk,khd->hqd", p, vx)


@dataclasses.dataclass(frozen=True)
class HonestVariant:
    name: str
    what: str
    backend: type[Backend]

    @property
    def backend_name(self) -> str:
        return f"{self.backend.__module__}:{self.backend.__name__}"


HONEST: tuple[HonestVariant, ...] = (
    HonestVariant("honest-split-kv", "split-KV, log-sum-exp merge (pages as splits when paged)", SplitKV),
    HonestVariant("honest-online-softmax", "tiled online softmax, exp2, fp32 accumulator", OnlineSoftmaxTiled),
    HonestVariant("honest-low-precision-p", "P rounded to bf16/fp16 before PV", LowPrecisionP),
    HonestVariant("honest-reversed-keys", "reversed key order", ReversedKeyOrder),
    HonestVariant("honest-input-dtype-reversed", "all math in bf16/fp16, reversed keys", LowPrecisionReversed),
    HonestVariant("honest-fp8-tensor-cores", "fp8 cases: FA3's fp8 dtype flow (P * 2**8 in e4m3 for P @ V)", Fp8TensorCores),
    HonestVariant("honest-paged-long-path", "paged long-context path: own slots, window pages, online softmax", PagedLongPath),
    HonestVariant("honest-split-kv-decode", "decode above 1k keys: 16 splits over the cache, empty splits -inf", SplitKvDecode),
    HonestVariant("selftest-eager", "eager fp32, the base of every planted bug", EagerAttention),
    HonestVariant("selftest-eager-lse", "eager fp32 returning its LSE, the base of the LSE bug", EagerWithLse),
)
