"""Naive masked attention, banded so memory grows with Sq x (window span), not Sq x Sk.

The same code gives the float64 *reference* (``compute_dtype=torch.float64``) and
the same-dtype *baseline* that calibrates the error budget (``compute_dtype`` =
the case's dtype: every product, the softmax and the value sum in that dtype,
as flash-attn's ``attention_ref(upcast=False)`` does).

fp8 cases (``case.kv_dtype``): both compute on the *dequantized* inputs
(:meth:`parity.case.Inputs.dequantized`: each fp8 value times its descale, exact in float64,
rounded once to ``compute_dtype``), so the budget measures the kernel, not the quantization.
The same-dtype baseline of an fp8 case also rounds the probabilities to the KV's fp8 dtype
before the ``P @ V`` product, as FA3's fp8 path does (:func:`round_p_fp8`): kernels that run
``P @ V`` on fp8 tensor cores must fit the budget (docs/fp8.md).

Contract for rows with no visible key: the output is **0** (flash-attn's
convention). A backend that returns NaN there fails with reason ``nan``.

Learned sinks (``Case.sinks``, ``Inputs.sinks`` ``(hq,)``): the softmax denominator of every row
of head ``h`` gains ``exp(sink_h)``, the sink in natural-log units and NOT multiplied by the
softmax scale (as FA4's ``learnable_sink``, vLLM's ``s_aux`` and FlashInfer's ``sinks`` define
it): ``p_j = exp(s_j) / (exp(sink_h) + sum_j' exp(s_j'))``. A row that sees no key outputs 0.
The visible keys are ``Case.band``: the window intersected with the chunk (``Case.chunk``).

With an ``lse`` buffer ``(total_q, hq)`` the reference also writes each row's log-sum-exp (natural
log, of the scaled and softcapped scores over the keys the row sees; ``-inf`` for a row that sees
no key): in float64 as ``max + log(sum exp(s - max))``, in the baseline's dtype by
``torch.logsumexp`` on the scores in that dtype.

Per query block the reference only touches the keys the block's rows can see:
``lo``/``hi`` from :meth:`Window.band` are non-decreasing in the row index, so
rows ``r0..r1-1`` need keys ``lo[r0]..hi[r1-1]``. The block height is chosen so
one block's score matrix stays under ``block_bytes``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .case import Case, Inputs

DEFAULT_BLOCK_BYTES = 64 * 2**20

#: FA3's fp8 forward casts ``P * 2**8`` to e4m3 for its second GEMM (``flash::Softmax<...,
#: Max_offset = 8>`` in hopper/flash_fwd_kernel_sm90.h), so probabilities down to ``2**-14`` stay
#: normal fp8 numbers; the baseline rounds its probabilities the same way.
P_FP8_OFFSET = 256.0


def round_p_fp8(p: torch.Tensor, fp8_dtype: str) -> torch.Tensor:
    """Probabilities ``p`` (any shape, in [0, 1]) rounded as an fp8 ``P @ V`` GEMM sees them:
    ``fp8(p * 2**8) / 2**8`` (:data:`P_FP8_OFFSET`), back in ``p``'s dtype."""
    dt = getattr(torch, fp8_dtype)
    return ((p.float() * P_FP8_OFFSET).to(dt).float() / P_FP8_OFFSET).to(p.dtype)


def _row_blocks(lo: torch.Tensor, hi: torch.Tensor, hq: int, elem: int, block_bytes: int):
    """Yield ``(r0, r1, k0, k1)``: query rows ``[r0, r1)`` need keys ``[k0, k1)``."""
    sq = lo.numel()
    lo_l, hi_l = lo.tolist(), hi.tolist()
    r0 = 0
    rows = max(1, min(sq, 1024))
    while r0 < sq:
        r1 = min(sq, r0 + rows)
        while True:
            k0 = lo_l[r0]
            k1 = max(hi_l[r1 - 1] + 1, k0)
            if r1 - r0 == 1 or hq * (r1 - r0) * max(k1 - k0, 1) * elem <= block_bytes:
                break
            r1 = r0 + max(1, (r1 - r0) // 2)
        yield r0, r1, k0, k1
        r0 = r1


#: Temporaries of one band block that live at once: the scores, their masked copy, exp, the weights.
BLOCK_TEMPORARIES = 3


def band_block_bytes(case: Case, elem: int = 8) -> int:
    """The scores of one band block of :func:`attention_sequence`: at most ``DEFAULT_BLOCK_BYTES``."""
    return min(DEFAULT_BLOCK_BYTES, case.hq * max(case.q_lens, default=0) * max(case.k_lens, default=0) * elem)


def reference_workspace_bytes(case: Case) -> int:
    """What the float64 reference allocates beyond its inputs: the output and its LSE, the largest sequence's
    own output (:func:`attention_sequence` returns it, then it is copied in), one band block's temporaries
    (:data:`BLOCK_TEMPORARIES`) and that block's K / V copies (:func:`block_kv_bytes`). Without the sequence's
    copy a 32k prefill's reference-cuda row measured 1 GiB over its estimate (H100, 2026-12-06)."""
    out = sum(case.q_lens) * case.hq * case.head_dim
    seq = max(case.q_lens, default=0) * case.hq * case.head_dim
    lse = sum(case.q_lens) * case.hq * 8
    return (out + seq) * 8 + lse + BLOCK_TEMPORARIES * band_block_bytes(case) + block_kv_bytes(case, 8)


def block_kv_bytes(case: Case, elem: int) -> int:
    """The most bytes one block of :func:`attention_sequence` holds besides its scores: K and V of its key
    span cast to the compute dtype (``elem`` bytes), and the copy ``matmul`` makes of one of them broadcast
    over the ``g`` query heads of each kv head. The span is bounded by the window and a block's rows (at
    most 1024); an unbounded side spans every key (a decode row over 128k keys: 6 GiB in float64 at 32/8
    heads, d 128, measured 7.0 GiB on an H100 on 2026-12-06)."""
    w = case.window
    most = 0
    for sq, sk in zip(case.q_lens, case.k_lens):
        span = sk if w.left is None or w.right is None else min(sk, w.left + w.right + 1 + min(sq, 1024))
        most = max(most, span * case.head_dim * elem * (2 * case.hkv + case.hq))
    return most


class ReferenceStopped(Exception):
    """A reference computation ended early because its ``stop`` said so (a sweep's stop signal): nothing to keep; the
    row it was for is dropped, as any row in flight at a stop (``--resume`` runs it)."""


def attention_sequence(
    case: Case,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    compute_dtype: torch.dtype = torch.float64,
    block_bytes: int = DEFAULT_BLOCK_BYTES,
    p_fp8: str | None = None,
    sinks: torch.Tensor | None = None,
    lse: torch.Tensor | None = None,
    stop: Callable[[], bool] | None = None,
) -> torch.Tensor:
    """One sequence: ``q`` ``(Sq, hq, d)``, ``k``/``v`` ``(Sk, hkv, d)`` -> ``(Sq, hq, d)``.

    ``p_fp8``: an fp8 dtype name: the probabilities are rounded to it before ``P @ V`` (:func:`round_p_fp8`);
    ``sinks`` ``(hq,)``: the learned sink logits, if any (see the module docstring); ``lse`` ``(Sq, hq)``,
    if given, gets each row's log-sum-exp; ``stop``: asked before each block of rows, :class:`ReferenceStopped` once it
    says True (a sweep's stop signal: a reference of minutes ends within a block, not at its end)."""
    sq, hq, dh = q.shape
    sk, hkv, _ = k.shape
    g = hq // hkv
    out = torch.zeros(sq, hq, dh, dtype=compute_dtype, device=q.device)  # (Sq, hq, d)
    if lse is not None:
        lse.fill_(float("-inf"))  # rows that see no key keep it (with sinks: set to the sink below)
    if sq == 0 or sk == 0:
        return out
    lo, hi = case.band(sq, sk)  # (Sq,), (Sq,) inclusive key bounds (window and chunk), on the CPU
    elem = torch.finfo(compute_dtype).bits // 8
    scale = case.softmax_scale
    sink = None if sinks is None else sinks.to(q.device, compute_dtype).view(hkv, g, 1, 1)  # (hkv, g, 1, 1)
    for r0, r1, k0, k1 in _row_blocks(lo, hi, hq, elem, block_bytes):
        if stop is not None and stop():
            raise ReferenceStopped(f"stopped at query row {r0} of {sq}")
        if k1 <= k0:
            if lse is not None and sink is not None:  # the sink's term alone: LSE = the sink
                lse[r0:r1] = sink.reshape(1, hq).expand(r1 - r0, hq).to(lse.dtype)  # (C, hq)
            continue  # every row of this block sees no key: output stays 0
        c = r1 - r0
        qb = q[r0:r1].to(compute_dtype).view(c, hkv, g, dh).permute(1, 2, 0, 3)  # (hkv, g, C, d)
        kb = k[k0:k1].to(compute_dtype).permute(1, 0, 2)  # (hkv, span, d)
        vb = v[k0:k1].to(compute_dtype).permute(1, 0, 2)  # (hkv, span, d)
        scores = torch.matmul(qb * scale, kb.transpose(-1, -2)[:, None])  # (hkv, g, C, span)
        if case.softcap is not None:
            scores = torch.tanh(scores / case.softcap) * case.softcap  # (hkv, g, C, span)
        j = torch.arange(k0, k1, device=q.device)  # (span,)
        lo_b = lo[r0:r1].to(q.device)  # (C,)
        hi_b = hi[r0:r1].to(q.device)  # (C,)
        visible = (j[None, :] >= lo_b[:, None]) & (j[None, :] <= hi_b[:, None])  # (C, span)
        scores = scores.masked_fill(~visible, float("-inf"))  # (hkv, g, C, span)
        p, row_lse = _softmax(scores, sink, compute_dtype)  # (hkv, g, C, span), (hkv, g, C)
        if lse is not None:
            lse[r0:r1] = row_lse.permute(2, 0, 1).reshape(c, hq).to(lse.dtype)  # (C, hq)
        if p_fp8 is not None:
            p = round_p_fp8(p, p_fp8)  # (hkv, g, C, span): P as an fp8 P @ V GEMM sees it
        ob = torch.matmul(p, vb[:, None])  # (hkv, g, C, d)
        out[r0:r1] = ob.permute(2, 0, 1, 3).reshape(c, hq, dh)  # (C, hq, d)
    return out


def _softmax(scores: torch.Tensor, sink: torch.Tensor | None, compute_dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax over the last dim of ``scores`` ``(hkv, g, C, span)`` (``-inf`` = masked), its denominator
    gaining ``exp(sink)`` ``(hkv, g, 1, 1)`` when given; a row with no finite score gives 0. Also each
    row's log-sum-exp ``(hkv, g, C)``: ``log(sum exp(s) [+ exp(sink)])``, ``-inf`` for a row that sees no key."""
    empty = ~torch.isfinite(scores.amax(dim=-1))  # (hkv, g, C): the row sees no key
    if compute_dtype == torch.float64:
        m = scores.amax(dim=-1, keepdim=True)  # (hkv, g, C, 1)
        if sink is not None:
            m = torch.maximum(m, sink)
        m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
        p = torch.exp(scores - m)  # (hkv, g, C, span); exp(-inf) = 0
        denom = p.sum(dim=-1, keepdim=True)  # (hkv, g, C, 1)
        if sink is not None:
            denom = denom + torch.exp(sink - m)
        lse = (m + torch.log(torch.where(denom > 0, denom, torch.ones_like(denom))))[..., 0]  # (hkv, g, C)
        p = p / torch.where(denom > 0, denom, torch.ones_like(denom))
    elif sink is not None:  # the sink as one more column of the softmax, dropped after it (in compute_dtype)
        col = sink.to(scores.dtype).expand(*scores.shape[:-1], 1)  # (hkv, g, C, 1)
        full = torch.cat([scores, col], dim=-1)  # (hkv, g, C, span + 1)
        lse = torch.logsumexp(full, dim=-1)  # (hkv, g, C)
        p = torch.softmax(full, dim=-1)[..., :-1]  # (hkv, g, C, span)
    else:
        lse = torch.logsumexp(scores, dim=-1)  # (hkv, g, C), in compute_dtype
        p = torch.nan_to_num(torch.softmax(scores, dim=-1), nan=0.0)  # (hkv, g, C, span); empty rows: 0
    if sink is not None:  # a row that sees no key still has the sink's term: its LSE is the sink
        return p, lse
    return p, lse.masked_fill(empty, float("-inf"))


def attention_reference(
    inputs: Inputs,
    compute_dtype: torch.dtype = torch.float64,
    block_bytes: int = DEFAULT_BLOCK_BYTES,
    lse: torch.Tensor | None = None,
    stop: Callable[[], bool] | None = None,
) -> torch.Tensor:
    """All sequences of ``inputs``; returns ``(total_q, hq, d)`` in ``compute_dtype``. ``lse``
    ``(total_q, hq)``, if given, gets each row's log-sum-exp (see the module docstring); ``stop``: asked before each
    block of rows (:func:`attention_sequence`).

    fp8 inputs are dequantized first; in a dtype other than float64 (the baseline) the
    probabilities of an fp8 case are rounded to its KV dtype (see the module docstring)."""
    case = inputs.case
    p_fp8 = None
    if inputs.k_descale is not None or inputs.v_descale is not None or inputs.q_descale is not None:
        inputs = inputs.dequantized(compute_dtype)
    if case.kv_dtype is not None and compute_dtype != torch.float64:
        p_fp8 = case.kv_dtype
    out = torch.empty(inputs.q.shape, dtype=compute_dtype, device=inputs.q.device)  # (total_q, hq, d)
    for _, qb, kb, vb, qs in inputs.sequences():
        seq_lse = None if lse is None else lse[qs]  # (Sq, hq) view
        out[qs] = attention_sequence(case, qb, kb, vb, compute_dtype, block_bytes, p_fp8, inputs.sinks, seq_lse, stop)
    return out


def attention_dense_naive(inputs: Inputs, compute_dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Unbanded ``(Sq, Sk)`` version, for cross-checking the banded one in tests (fp8 inputs dequantized)."""
    case = inputs.case
    if inputs.k_descale is not None:
        inputs = inputs.dequantized(compute_dtype)
    outs = []
    for _, q, k, v, _ in inputs.sequences():
        sq, sk = q.shape[0], k.shape[0]
        qf = q.to(compute_dtype).transpose(0, 1)  # (hq, Sq, d)
        kf = k.to(compute_dtype).repeat_interleave(case.group, dim=1).transpose(0, 1)  # (hq, Sk, d)
        vf = v.to(compute_dtype).repeat_interleave(case.group, dim=1).transpose(0, 1)  # (hq, Sk, d)
        s = qf @ kf.transpose(-1, -2) * case.softmax_scale  # (hq, Sq, Sk)
        if case.softcap is not None:
            s = case.softcap * torch.tanh(s / case.softcap)
        s = s.masked_fill(~case.mask(sq, sk, q.device), float("-inf"))  # (hq, Sq, Sk)
        if inputs.sinks is not None:  # one more column per row: the sink, dropped after the softmax
            col = inputs.sinks.to(s.device, compute_dtype)[:, None, None].expand(-1, sq, 1)  # (hq, Sq, 1)
            s = torch.cat([s, col], dim=-1)  # (hq, Sq, Sk + 1)
        p = torch.softmax(s, dim=-1).nan_to_num(0.0)[..., :sk]  # (hq, Sq, Sk)
        outs.append((p @ vf).transpose(0, 1))  # (Sq, hq, d)
    return torch.cat(outs, dim=0)
