"""The backward pass: the seeded upstream gradient, the banded float64 reference gradients, the
same-dtype baseline's budget per tensor, and the comparison with its exact checks.

``parity run --grad`` asks every backend for ``dq``, ``dk``, ``dv`` of its output against the
upstream gradient ``dO`` (:func:`draw_dout`, seeded from the case's seed). The reference is the
explicit softmax-attention backward in float64, banded like :mod:`parity.reference` (per query
row block only the keys its rows see; memory grows with ``Sq x window span``)::

    P  = softmax(mask(softcap(scale Q K^T)))       dV = P^T dO (summed over a kv head's group)
    dP = dO V^T     dS = P (dP - rowsum(P dP))    dX = dS (1 - tanh^2) with a softcap
    dQ = scale dX K                               dK = scale dX^T Q (summed over the group)

The same computation in the case's dtype is the *baseline*; each tensor passes with the forward's
rule (:mod:`parity.verdict`): ``max|err| <= k_max x baseline max + max(abs_floor, 2 x rounding)``,
``mean|err| <= k_mean x baseline mean + mean_floor``.

Exact checks (no budget): ``dk`` and ``dv`` of keys that no query row sees are exactly 0 (the mask
is the same for every head, so such a key is outside every window of its sequence); every gradient
is finite, the rows that see no key included (their ``dq`` is 0).

Reasons (joined to the row's reasons):

==================  =====================================================================
``dq_err`` ...      ``dq`` / ``dk`` / ``dv`` over its budget (max or mean error)
``grad_outside``    ``dk`` or ``dv`` nonzero for keys outside every window
``grad_nan``        NaN or Inf in a gradient (where in ``grad_detail``: empty rows named)
``grad_error``      the backward raised, or returned the wrong shape, dtype or device
==================  =====================================================================
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import torch

from .case import Case, Inputs
from .reference import DEFAULT_BLOCK_BYTES, ReferenceStopped, _row_blocks, _softmax
from .verdict import Budget, baseline_overflow, empty_rows, row_chunks

#: The gradients, in the order backends return them.
TENSORS = ("dq", "dk", "dv")


def draw_dout(seed: int, total_q: int, hq: int, head_dim: int, dtype: str):
    """The upstream gradient ``dO`` ``(total_q, hq, d)``: standard normal from a CPU generator seeded
    with ``seed + 104729``, rounded to ``dtype``. Torch only (copied into repro scripts)."""
    gen = torch.Generator(device="cpu").manual_seed(seed + 104729)
    return torch.randn(total_q, hq, head_dim, generator=gen).to(getattr(torch, dtype))  # (total_q, hq, d)


def autograd_grads(attention, q, k, v, dout, *extra):
    """``(dq, dk, dv)`` of ``attention(q, k, v)`` against ``dout`` through autograd, on fresh leaves (copied
    into repro scripts: torch only). A gradient autograd leaves ``None`` (the input was not used, or an op's
    backward gave none) is 0, as is every gradient of an output with no autograd graph at all (a kernel that skips
    every tile of a case where no row sees a key returns zeros detached from its inputs: the output does not
    depend on them). A backward that raises still raises. ``extra``: more inputs of ``attention`` (the learned
    sinks), their gradients after, ``None`` where a graph exists but does not reach one (a forward that copies it
    into a buffer), 0 where the output has no graph."""
    leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v, *extra)]
    out = attention(*leaves)  # (total_q, hq, d)
    if not out.requires_grad:  # the output depends on no input: every gradient is 0
        return tuple(torch.zeros_like(t) for t in leaves)
    grads = torch.autograd.grad(out, leaves, dout, allow_unused=True)
    return tuple(torch.zeros_like(t) if g is None else g for t, g in zip(leaves[:3], grads[:3])) + tuple(grads[3:])


def make_dout(case: Case, device: torch.device | str = "cpu") -> torch.Tensor:
    """:func:`draw_dout` for ``case`` on ``device``."""
    return draw_dout(case.seed, sum(case.q_lens), case.hq, case.head_dim, case.dtype).to(device)  # (total_q, hq, d)


def grad_sequence(
    case: Case,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    do: torch.Tensor,
    compute_dtype: torch.dtype = torch.float64,
    block_bytes: int = DEFAULT_BLOCK_BYTES,
    sinks: torch.Tensor | None = None,
    stop: Callable[[], bool] | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """One sequence's ``(dq (Sq, hq, d), dk (Sk, hkv, d), dv (Sk, hkv, d), dsinks)`` in ``compute_dtype``; ``dsinks``
    ``(2, hq)`` (the gradient, and the sum of its terms' magnitudes) or None. ``sinks`` ``(hq,)``: learned sinks in
    the forward's softmax (the reference's rule). A sink has no value: its score's gradient is
    ``-p_sink x rowsum(P dP)`` (``p_sink = exp(sink - lse)``), summed over the rows of its head. ``stop``: asked
    before each block of rows, :class:`parity.reference.ReferenceStopped` once it says True (as the forward's)."""
    sq, hq, dh = q.shape
    sk, hkv, _ = k.shape
    g = hq // hkv
    dq = torch.zeros(sq, hq, dh, dtype=compute_dtype, device=q.device)  # (Sq, hq, d)
    dk = torch.zeros(sk, hkv, dh, dtype=compute_dtype, device=q.device)  # (Sk, hkv, d)
    dv = torch.zeros(sk, hkv, dh, dtype=compute_dtype, device=q.device)  # (Sk, hkv, d)
    dsink = None if sinks is None else torch.zeros(2, hkv, g, dtype=compute_dtype, device=q.device)  # (2, hkv, g)
    if sq == 0 or sk == 0:
        return dq, dk, dv, None if dsink is None else dsink.reshape(2, hq)
    lo, hi = case.band(sq, sk)  # (Sq,), (Sq,): the window and the chunk
    elem = torch.finfo(compute_dtype).bits // 8
    scale = case.softmax_scale
    sink = None if sinks is None else sinks.to(q.device, compute_dtype).view(hkv, g, 1, 1)  # (hkv, g, 1, 1)
    for r0, r1, k0, k1 in _row_blocks(lo, hi, hq, 3 * elem, block_bytes):
        if stop is not None and stop():
            raise ReferenceStopped(f"stopped at query row {r0} of {sq} (backward)")
        if k1 <= k0:
            continue  # no row of the block sees a key: its dq stays 0, it adds nothing to dk / dv
        c = r1 - r0
        qb = q[r0:r1].to(compute_dtype).view(c, hkv, g, dh).permute(1, 2, 0, 3) * scale  # (hkv, g, C, d)
        dob = do[r0:r1].to(compute_dtype).view(c, hkv, g, dh).permute(1, 2, 0, 3)  # (hkv, g, C, d)
        kb = k[k0:k1].to(compute_dtype).permute(1, 0, 2)[:, None]  # (hkv, 1, span, d)
        vb = v[k0:k1].to(compute_dtype).permute(1, 0, 2)[:, None]  # (hkv, 1, span, d)
        x = torch.matmul(qb, kb.transpose(-1, -2))  # (hkv, g, C, span)
        cap = case.softcap
        t = torch.tanh(x / cap) if cap is not None else None
        s = t * cap if t is not None and cap is not None else x  # (hkv, g, C, span)
        j = torch.arange(k0, k1, device=q.device)  # (span,)
        visible = (j[None, :] >= lo[r0:r1].to(q.device)[:, None]) & (j[None, :] <= hi[r0:r1].to(q.device)[:, None])  # (C, span)
        p, lse = _softmax(s.masked_fill(~visible, float("-inf")), sink, compute_dtype)  # (hkv, g, C, span), (hkv, g, C)
        dp = torch.matmul(dob, vb.transpose(-1, -2))  # (hkv, g, C, span)
        rowdot = (p * dp).sum(-1, keepdim=True)  # (hkv, g, C, 1)
        ds = p * (dp - rowdot)  # (hkv, g, C, span)
        if dsink is not None and sink is not None:  # rows that see no key: rowdot 0, nothing added
            terms = torch.exp(sink[..., 0] - lse) * rowdot[..., 0]  # (hkv, g, C)
            dsink[0] -= terms.sum(-1)  # (hkv, g)
            dsink[1] += terms.abs().sum(-1)  # (hkv, g): the size of the sum, for its rounding floor
        if t is not None:
            ds = ds * (1 - t * t)
        dq[r0:r1] = (torch.matmul(ds, kb) * scale).permute(2, 0, 1, 3).reshape(c, hq, dh)  # (C, hq, d)
        dk[k0:k1] += torch.matmul(ds.transpose(-1, -2), qb).sum(1).permute(1, 0, 2)  # (span, hkv, d)
        dv[k0:k1] += torch.matmul(p.transpose(-1, -2), dob).sum(1).permute(1, 0, 2)  # (span, hkv, d)
    return dq, dk, dv, None if dsink is None else dsink.reshape(2, hq)


def grad_reference(
    inputs: Inputs,
    dout: torch.Tensor,
    compute_dtype: torch.dtype = torch.float64,
    block_bytes: int = DEFAULT_BLOCK_BYTES,
    stop: Callable[[], bool] | None = None,
) -> dict[str, torch.Tensor]:
    """Packed ``{"dq": (total_q, hq, d), "dk": (total_k, hkv, d), "dv": (total_k, hkv, d)}`` in ``compute_dtype``;
    with learned sinks also ``"dsinks"`` ``(hq,)`` and ``"dsinks_terms"`` ``(hq,)``, the sum of the magnitudes of
    the rows' terms of each head's ``dsinks`` (:func:`make_grad_baseline`'s rounding floor for that sum). ``stop``:
    asked before each block of rows (:func:`grad_sequence`: a sweep's stop signal ends a backward of minutes)."""
    case = inputs.case
    out = {
        "dq": torch.zeros(inputs.q.shape, dtype=compute_dtype, device=inputs.q.device),  # (total_q, hq, d)
        "dk": torch.zeros(inputs.k.shape, dtype=compute_dtype, device=inputs.q.device),  # (total_k, hkv, d)
        "dv": torch.zeros(inputs.v.shape, dtype=compute_dtype, device=inputs.q.device),  # (total_k, hkv, d)
    }
    sink = None if inputs.sinks is None else torch.zeros(2, case.hq, dtype=compute_dtype, device=inputs.q.device)  # (2, hq)
    _, ck = case.cu_seqlens()
    for b, qb, kb, vb, qs in inputs.sequences():
        ks = slice(ck[b], ck[b + 1])
        dq, dk, dv, dsink = grad_sequence(case, qb, kb, vb, dout[qs].to(qb.device), compute_dtype, block_bytes, inputs.sinks, stop)
        out["dq"][qs], out["dk"][ks], out["dv"][ks] = dq, dk, dv
        if sink is not None and dsink is not None:
            sink += dsink
    if sink is not None:  # the gradient, and its terms' magnitudes per head
        out["dsinks"], out["dsinks_terms"] = sink[0], sink[1]  # (hq,), (hq,)
    return out


def unseen_keys(case: Case) -> torch.Tensor:
    """``(total_k,)`` bool: the packed keys no query row of their sequence sees (outside every window)."""
    parts = []
    for sq, sk in zip(case.q_lens, case.k_lens):
        cover = torch.zeros(sk + 1, dtype=torch.int64)  # (Sk + 1,)
        if sq:
            lo, hi = case.band(sq, sk)  # (Sq,), (Sq,): the window and the chunk
            some = lo <= hi
            cover.index_add_(0, lo[some].long(), torch.ones(int(some.sum()), dtype=torch.int64))
            cover.index_add_(0, (hi[some] + 1).long(), -torch.ones(int(some.sum()), dtype=torch.int64))
        parts.append(cover.cumsum(0)[:sk] == 0)
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.bool)


@dataclasses.dataclass
class GradBaseline:
    """Per-case figures of the backward shared by every backend: computed once per case."""

    ref: dict[str, torch.Tensor]  # float64 dq, dk, dv
    baseline_max: dict[str, float]
    baseline_mean: dict[str, float]
    rounding_max: dict[str, float]
    unseen: torch.Tensor  # (total_k,) bool
    empty: torch.Tensor  # (total_q,) bool
    #: Why this case's backward cannot be judged in its dtype ("": it can): a reference gradient beyond the
    #: dtype's range, or a same-dtype baseline that overflows (no finite budget). The check is then unsupported.
    unjudgeable: str = ""
    #: a tensor's floor added to both budgets beyond the forward's rule (dsinks: :func:`_sum_floor`)
    extra_floor: dict[str, float] = dataclasses.field(default_factory=dict)

    @property
    def bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.ref.values())


def make_grad_baseline(case: Case, inputs: Inputs, stop: Callable[[], bool] | None = None) -> GradBaseline:
    """The reference gradients and the same-dtype baseline's figures, per tensor; ``stop``: asked before each block of
    rows of both (:class:`parity.reference.ReferenceStopped` once it says True)."""
    dout = make_dout(case, inputs.q.device)  # (total_q, hq, d)
    ref = grad_reference(inputs, dout, torch.float64, stop=stop)
    same = grad_reference(inputs, dout, case.torch_dtype, stop=stop)
    terms, _ = ref.pop("dsinks_terms", None), same.pop("dsinks_terms", None)
    bmax, bmean, rnd, bad = {}, {}, {}, {}
    for name in ref:  # TENSORS, and dsinks with learned sinks
        r, s = ref[name], same[name]
        bad[name] = int((~torch.isfinite(s)).sum())  # python's max() would drop a NaN: counted apart
        mx = sm = rd = 0.0
        for r0, r1 in row_chunks(r.shape[0], r[0].numel() if r.shape[0] else 1):
            err = (s[r0:r1].to(torch.float64) - r[r0:r1]).abs()
            mx = max(mx, float(err.max()) if err.numel() else 0.0)
            sm += float(err.sum())
            rounded = (r[r0:r1].to(case.torch_dtype).to(torch.float64) - r[r0:r1]).abs()
            rd = max(rd, float(rounded.max()) if rounded.numel() else 0.0)
        bmax[name], bmean[name], rnd[name] = mx, sm / r.numel() if r.numel() else 0.0, rd
    unseen, empty = unseen_keys(case).to(inputs.q.device), empty_rows(case).to(inputs.q.device)
    floor = {} if terms is None else {"dsinks": _sum_floor(case, terms)}
    return GradBaseline(ref, bmax, bmean, rnd, unseen, empty, _unjudgeable(case, ref, bad), floor)


def _sum_floor(case: Case, terms: torch.Tensor) -> float:
    """The rounding floor of ``dsinks``, one sum over every row of a head: ``sqrt(rows) x eps x sum |terms|``, the
    usual size of a float sum's accumulated rounding, so that a summation order (autograd's, a kernel's) is not
    judged against the one order of the same-dtype baseline. A wrong formula (a dropped or flipped term) misses by
    the order of the sum itself."""
    rows = sum(case.q_lens)  # every row of a head, in every sequence, adds one term
    return math.sqrt(max(rows, 1)) * torch.finfo(case.torch_dtype).eps * float(terms.max()) if terms.numel() else 0.0


def _unjudgeable(case: Case, ref: dict[str, torch.Tensor], nonfinite: dict[str, int]) -> str:
    """Why the backward of ``case`` cannot be judged in its dtype, or ``""`` (see :class:`GradBaseline`).

    A same-dtype baseline with any NaN or Inf has no budget for those elements (the max and mean of its error
    would be NaN, and no error exceeds NaN: a check that cannot fail), so such a case is not judged."""
    top = torch.finfo(case.torch_dtype).max
    for name in ref:
        big = float(ref[name].abs().max()) if ref[name].numel() else 0.0
        if big > top:
            return f"the reference {name} reaches {big:.4g}, beyond {case.dtype}'s range ({top:.4g}): not representable"
        if nonfinite[name]:
            return baseline_overflow(case, nonfinite[name], name)
    return ""


@dataclasses.dataclass
class TensorCheck:
    """One gradient against its reference."""

    name: str
    max_abs_err: float
    mean_abs_err: float
    threshold_max: float
    threshold_mean: float
    nonfinite: int
    worst: str

    @property
    def budget_frac(self) -> float:
        return self.max_abs_err / self.threshold_max if self.threshold_max > 0 else math.inf

    @property
    def over(self) -> bool:
        return self.max_abs_err > self.threshold_max or self.mean_abs_err > self.threshold_mean


@dataclasses.dataclass
class GradComparison:
    checks: dict[str, TensorCheck]
    reasons: list[str]
    detail: str

    @property
    def budget_frac(self) -> float:
        return max((c.budget_frac for c in self.checks.values()), default=0.0)


def _where(case: Case, name: str, flat: int) -> str:
    """Where packed row ``flat`` of gradient ``name`` sits: ``seq b row i`` (dq) or ``seq b key j`` (dk, dv)."""
    cq, ck = case.cu_seqlens()
    cu = cq if name == "dq" else ck
    b = max(i for i in range(case.batch) if cu[i] <= flat)
    return f"seq {b} {'row' if name == 'dq' else 'key'} {flat - cu[b]}"


def check_tensor(case: Case, name: str, got: torch.Tensor, ref: torch.Tensor, base: GradBaseline, budget: Budget) -> TensorCheck:
    """``got`` against ``ref`` (float64), row chunk by row chunk: errors of finite elements, the non-finite count."""
    extra = base.extra_floor.get(name, 0.0)
    thr_max = budget.k_max * base.baseline_max[name] + max(budget.abs_floor, 2.0 * base.rounding_max[name]) + extra
    thr_mean = budget.k_mean * base.baseline_mean[name] + budget.mean_floor + extra
    mx, total, bad, worst_i = 0.0, 0.0, 0, -1
    for r0, r1 in row_chunks(ref.shape[0], ref[0].numel() if ref.shape[0] else 1):
        g = got[r0:r1].to(device=ref.device, dtype=torch.float64)  # (C, h, d)
        fin = torch.isfinite(g)
        bad += int((~fin).sum())
        err = torch.where(fin, (g - ref[r0:r1]).abs(), torch.zeros_like(g))  # (C, h, d)
        total += float(err.sum())
        if err.numel() and float(err.max()) > mx:
            mx, worst_i = float(err.max()), r0 * ref[0].numel() + int(err.argmax())
    worst = ""
    if worst_i >= 0 and ref.dim() == 1:  # dsinks (hq,)
        worst = f"worst at head {worst_i}: got {float(got[worst_i]):.6g}, want {float(ref[worst_i]):.6g}"
    elif worst_i >= 0:
        per = ref[0].numel()
        row, h, c = worst_i // per, (worst_i % per) // ref.shape[2], worst_i % ref.shape[2]
        worst = f"worst at {_where(case, name, row)} head {h} dim {c}: got {float(got[row, h, c]):.6g}, want {float(ref[row, h, c]):.6g}"
    return TensorCheck(name, mx, total / max(ref.numel(), 1), thr_max, thr_mean, bad, worst)


def spans(idx: list[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``"0..2, 5"``."""
    out, i = [], 0
    while i < len(idx):
        j = i
        while j + 1 < len(idx) and idx[j + 1] == idx[j] + 1:
            j += 1
        out.append(str(idx[i]) if i == j else f"{idx[i]}..{idx[j]}")
        i = j + 1
    return ", ".join(out)


def outside_detail(case: Case, name: str, got: torch.Tensor, unseen: torch.Tensor) -> str:
    """``"dk nonzero for 12 keys outside every window: seq 0 head 1 keys 0..11"`` ('' when none)."""
    hit = (got.to(unseen.device) != 0).any(-1) & unseen[:, None]  # (total_k, hkv)
    n = int(hit.any(-1).sum())
    if not n:
        return ""
    _, ck = case.cu_seqlens()
    pairs = []
    for b in range(case.batch):
        for h in range(hit.shape[1]):
            keys = torch.nonzero(hit[ck[b] : ck[b + 1], h]).flatten().tolist()
            if keys:
                pairs.append(f"seq {b} head {h} keys {spans(keys)}")
    more = f" (and {len(pairs) - 1} more (seq, head) pairs)" if len(pairs) > 1 else ""
    return f"{name} nonzero for {n} keys outside every window: {pairs[0]}{more}"


def nonfinite_detail(case: Case, name: str, got: torch.Tensor, empty: torch.Tensor) -> str:
    """Where a gradient holds NaN / Inf; for ``dq``, how many of those rows see no key."""
    if got.dim() == 1:  # dsinks (hq,)
        return f"{name} NaN/Inf in heads {spans(torch.nonzero(~torch.isfinite(got)).flatten().tolist())}"
    rows = (~torch.isfinite(got.to(empty.device))).flatten(1).any(-1)  # (rows,)
    idx = torch.nonzero(rows).flatten().tolist()
    text = f"{name} NaN/Inf in {len(idx)} {'rows' if name == 'dq' else 'keys'} (first at {_where(case, name, idx[0])})"
    if name == "dq":
        n_empty = int((rows & empty).sum())
        text += f", {n_empty} of them rows that see no key (their dq is 0)" if n_empty else ""
    return text


def compare_grads(case: Case, got: dict[str, torch.Tensor], base: GradBaseline, budget: Budget) -> GradComparison:
    """Each gradient against the reference (budget per tensor) and the exact checks; reasons and words."""
    checks, reasons, words = {}, [], []
    names = [n for n in base.ref if n in got]  # dsinks only where the backward returns it
    for name in names:
        chk = check_tensor(case, name, got[name], base.ref[name], base, budget)
        checks[name] = chk
        if chk.over:
            reasons.append(f"{name}_err")
            words.append(
                f"{name} max|err| {chk.max_abs_err:.3g} (budget {chk.threshold_max:.3g}), mean {chk.mean_abs_err:.3g} "
                f"(budget {chk.threshold_mean:.3g}); {chk.worst}"
            )
    outside = [outside_detail(case, n, got[n], base.unseen) for n in ("dk", "dv")]
    if any(outside):
        reasons.append("grad_outside")
        words += [w for w in outside if w]
    nonfinite = [nonfinite_detail(case, n, got[n], base.empty) for n in names if checks[n].nonfinite]
    if nonfinite:
        reasons.append("grad_nan")
        words += nonfinite
    if reasons and all(not bool(got[n].count_nonzero()) for n in TENSORS if n in got):
        words.append("every gradient is 0 (an output with no autograd graph, or None gradients, count as 0): is the backward connected?")
    if "dsinks" in base.ref and "dsinks" not in got:
        words.append("dsinks not checked: this backward returns no gradient for the sinks")
    return GradComparison(checks, reasons, "; ".join(words))


def grad_columns(cmp: GradComparison | None, status: str, detail: str = "") -> dict[str, Any]:
    """The verdict's gradient fields: ``grad_check`` (ok / mismatch / unsupported / error) and the measures."""
    if cmp is None:
        return {"grad_check": status, "grad_detail": detail}
    return {
        "grad_check": "mismatch" if cmp.reasons else "ok",
        "dq_max_abs_err": cmp.checks["dq"].max_abs_err,
        "dk_max_abs_err": cmp.checks["dk"].max_abs_err,
        "dv_max_abs_err": cmp.checks["dv"].max_abs_err,
        "grad_budget_frac": cmp.budget_frac,
        "grad_detail": cmp.detail,
    }
