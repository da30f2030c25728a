"""Naive masked attention, banded so memory grows with Sq x (window span), not Sq x Sk.

The same code gives the float64 *reference* (``compute_dtype=torch.float64``) and
the same-dtype *baseline* that calibrates the error budget (``compute_dtype`` =
the case's dtype: every product, the softmax and the value sum in that dtype,
as flash-attn's ``attention_ref(upcast=False)`` does).

Contract for rows with no visible key: the output is **0** (flash-attn's
convention). A backend that returns NaN there fails with reason ``nan``.

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

import torch

from .case import Case, Inputs

DEFAULT_BLOCK_BYTES = 64 * 2**20


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


def attention_sequence(
    case: Case,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    compute_dtype: torch.dtype = torch.float64,
    block_bytes: int = DEFAULT_BLOCK_BYTES,
    lse: torch.Tensor | None = None,
) -> torch.Tensor:
    """One sequence: ``q`` ``(Sq, hq, d)``, ``k``/``v`` ``(Sk, hkv, d)`` -> ``(Sq, hq, d)``; ``lse``
    ``(Sq, hq)``, if given, gets each row's log-sum-exp."""
    sq, hq, dh = q.shape
    sk, hkv, _ = k.shape
    g = hq // hkv
    out = torch.zeros(sq, hq, dh, dtype=compute_dtype, device=q.device)  # (Sq, hq, d)
    if lse is not None:
        lse.fill_(float("-inf"))  # rows that see no key keep it
    if sq == 0 or sk == 0:
        return out
    lo, hi = case.window.band(sq, sk)  # (Sq,), (Sq,) inclusive key bounds, on the CPU
    elem = torch.finfo(compute_dtype).bits // 8
    scale = case.softmax_scale
    for r0, r1, k0, k1 in _row_blocks(lo, hi, hq, elem, block_bytes):
        if k1 <= k0:
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
        if compute_dtype == torch.float64:
            m = scores.amax(dim=-1, keepdim=True)  # (hkv, g, C, 1)
            m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
            p = torch.exp(scores - m)  # (hkv, g, C, span); exp(-inf) = 0
            denom = p.sum(dim=-1, keepdim=True)  # (hkv, g, C, 1)
            p = p / torch.where(denom > 0, denom, torch.ones_like(denom))
            if lse is not None:
                row_lse = torch.where(denom > 0, m + torch.log(denom), float("-inf"))[..., 0]  # (hkv, g, C)
                lse[r0:r1] = row_lse.permute(2, 0, 1).reshape(c, hq).to(lse.dtype)  # (C, hq)
        else:
            if lse is not None:
                row_lse = torch.logsumexp(scores, dim=-1)  # (hkv, g, C), in compute_dtype; -inf where no key
                lse[r0:r1] = row_lse.permute(2, 0, 1).reshape(c, hq).to(lse.dtype)  # (C, hq)
            p = torch.softmax(scores, dim=-1)  # (hkv, g, C, span), in compute_dtype
            p = torch.nan_to_num(p, nan=0.0)  # fully masked rows: 0, per the contract
        ob = torch.matmul(p, vb[:, None])  # (hkv, g, C, d)
        out[r0:r1] = ob.permute(2, 0, 1, 3).reshape(c, hq, dh)  # (C, hq, d)
    return out


def attention_reference(
    inputs: Inputs,
    compute_dtype: torch.dtype = torch.float64,
    block_bytes: int = DEFAULT_BLOCK_BYTES,
    lse: torch.Tensor | None = None,
) -> torch.Tensor:
    """All sequences of ``inputs``; returns ``(total_q, hq, d)`` in ``compute_dtype``. ``lse``
    ``(total_q, hq)``, if given, gets each row's log-sum-exp (see the module docstring)."""
    case = inputs.case
    out = torch.empty(inputs.q.shape, dtype=compute_dtype, device=inputs.q.device)  # (total_q, hq, d)
    for _, qb, kb, vb, qs in inputs.sequences():
        seq_lse = None if lse is None else lse[qs]  # (Sq, hq) view
        out[qs] = attention_sequence(case, qb, kb, vb, compute_dtype, block_bytes, seq_lse)
    return out


def attention_dense_naive(inputs: Inputs, compute_dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Unbanded ``(Sq, Sk)`` version, for cross-checking the banded one in tests."""
    case = inputs.case
    outs = []
    for _, q, k, v, _ in inputs.sequences():
        sq, sk = q.shape[0], k.shape[0]
        qf = q.to(compute_dtype).transpose(0, 1)  # (hq, Sq, d)
        kf = k.to(compute_dtype).repeat_interleave(case.group, dim=1).transpose(0, 1)  # (hq, Sk, d)
        vf = v.to(compute_dtype).repeat_interleave(case.group, dim=1).transpose(0, 1)  # (hq, Sk, d)
        s = qf @ kf.transpose(-1, -2) * case.softmax_scale  # (hq, Sq, Sk)
        if case.softcap is not None:
            s = case.softcap * torch.tanh(s / case.softcap)
        s = s.masked_fill(~case.window.mask(sq, sk, q.device), float("-inf"))  # (hq, Sq, Sk)
        p = torch.softmax(s, dim=-1).nan_to_num(0.0)  # (hq, Sq, Sk)
        outs.append((p @ vf).transpose(0, 1))  # (Sq, hq, d)
    return torch.cat(outs, dim=0)
