"""Batch invariance (``parity run --invariance``): a sequence's output is the same, bit for bit, whatever
else is in its batch and wherever it sits in it, what vLLM's batch-invariant mode and SGLang's
deterministic mode promise an engine.

After a row's forward, the backend runs again on sub-batches of the same values (:func:`sub_inputs`):

===========  ==========================================================================================
variant      the batch
===========  ==========================================================================================
``alone``    one sequence by itself: the first, the last and the one with the most keys (at most
             :data:`ALONE_MAX` calls)
``rotated``  every sequence one place later (the last first): each sits elsewhere, beside other neighbours
===========  ==========================================================================================

Each sequence's rows are compared with its rows in the row's own output: equal means equal values, NaN
where NaN (``+0`` and ``-0`` are not told apart); no error budget. At most ``ALONE_MAX + 1`` more calls per
row of two or more sequences, so the check runs on every such row when asked.

The result (:func:`run_invariance`): ``ok``; ``mismatch`` with the largest difference, the variant and the
sequence; ``not_run`` with why (one sequence; every variant refused by the backend); ``error`` with the
exception's words (recorded, not a failure of the row: the sub-batch's own row would say it). A
mismatch is the row's reason ``batch_invariance``; a library that does not promise invariance gets a
known divergence naming that reason (docs/engine-checks.md).
"""

from __future__ import annotations

import dataclasses
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from .backends.base import Unsupported
from .case import Inputs

#: At most this many sequences are run alone per row.
ALONE_MAX = 3


def sub_inputs(inputs: Inputs, order: Sequence[int]) -> Inputs:
    """``inputs``' sequences ``order`` (in that order) as a batch of their own: the same values, its case's
    lengths and prefix sums those of the sub-batch; per-(sequence, kv head) descales ``(B, hkv)`` those of its
    sequences, others (per tensor, per kv head) and sinks unchanged."""
    case = inputs.case
    sub = dataclasses.replace(case, q_lens=tuple(case.q_lens[b] for b in order), k_lens=tuple(case.k_lens[b] for b in order))
    cq, ck = case.cu_seqlens()
    q = torch.cat([inputs.q[cq[b] : cq[b + 1]] for b in order])  # (total_q', hq, d)
    k = torch.cat([inputs.k[ck[b] : ck[b + 1]] for b in order])  # (total_k', hkv, d)
    v = torch.cat([inputs.v[ck[b] : ck[b + 1]] for b in order])  # (total_k', hkv, d)
    sq, sk = sub.cu_seqlens()
    dev = inputs.q.device
    cu_q = torch.tensor(sq, dtype=torch.int32, device=dev)  # (B' + 1,)
    cu_k = torch.tensor(sk, dtype=torch.int32, device=dev)  # (B' + 1,)
    qd, kd, vd = (_rows_of(d, order) for d in (inputs.q_descale, inputs.k_descale, inputs.v_descale))
    return dataclasses.replace(
        inputs, case=sub, q=q, k=k, v=v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, q_descale=qd, k_descale=kd, v_descale=vd
    )


def _rows_of(descale: torch.Tensor | None, order: Sequence[int]) -> torch.Tensor | None:
    """A per-sequence descale ``(B, hkv)``'s rows ``order``; a per-tensor or per-kv-head one (or None) as it is."""
    if descale is None or descale.dim() < 2:
        return descale
    return descale[list(order)]  # (B', hkv)


def variants(q_lens: Sequence[int], k_lens: Sequence[int]) -> list[tuple[str, list[int]]]:
    """The sub-batches of the check (the module docstring's table): ``(name, order)`` each."""
    b = len(q_lens)
    longest = max(range(b), key=lambda i: (k_lens[i], q_lens[i]))
    alone = list(dict.fromkeys([0, b - 1, longest]))[:ALONE_MAX]
    return [("alone", [i]) for i in alone] + [("rotated", [b - 1, *range(b - 1)])]


def diff(a: torch.Tensor, b: torch.Tensor) -> tuple[bool, float]:
    """Whether ``a`` and ``b`` hold the same values (NaN where NaN), and their largest difference
    (``inf`` where NaN meets a number)."""
    same = (a == b) | (a.isnan() & b.isnan())
    if bool(same.all()):
        return True, 0.0
    d = (a.double() - b.double()).abs()  # a's shape
    d = torch.where(same, torch.zeros_like(d), torch.nan_to_num(d, nan=float("inf")))
    return False, float(d.max())


def run_invariance(inputs: Inputs, full: torch.Tensor, call: Callable[[Inputs], torch.Tensor]) -> dict[str, Any]:
    """The check for one row: ``full`` the row's output ``(total_q, hq, d)``, ``call`` the backend on a
    sub-batch (refusing with :class:`parity.backends.base.Unsupported`). Never raises for the backend."""
    case = inputs.case
    if case.batch < 2:
        return {"status": "not_run", "detail": "B=1: one sequence, no batch to vary"}
    cq = case.cu_seqlens()[0]
    worst: tuple[float, str] | None = None
    ran, refused = 0, []
    for name, order in variants(case.q_lens, case.k_lens):
        try:
            out = call(sub_inputs(inputs, order)).detach()  # (total_q', hq, d)
        except Unsupported as exc:
            refused.append(f"{name}: {str(exc)[:160]}")
            continue
        except Exception as exc:  # noqa: BLE001 - the backend's fault is recorded, never raised
            return {"status": "error", "detail": f"{name} {order}: {exc_words(exc)}"}
        ran += 1
        at = 0
        for b in order:
            n = case.q_lens[b]
            mine = full[cq[b] : cq[b + 1]].to(out.device)  # (Sq_b, hq, d)
            same, d = diff(out[at : at + n], mine)
            at += n
            if not same and (worst is None or d > worst[0]):
                worst = (d, f"seq {b} {_where(name, order, b)}: max |diff| {d:.3g} against its rows in the full batch")
    if worst is not None:
        return {"status": "mismatch", "detail": worst[1], "max_diff": worst[0]}
    if not ran:
        return {"status": "not_run", "detail": "the backend refused every sub-batch: " + "; ".join(refused)}
    note = f" ({len(refused)} refused: {'; '.join(refused)})" if refused else ""
    return {"status": "ok", "detail": f"{ran} sub-batches equal, bit for bit{note}", "max_diff": 0.0}


def _where(name: str, order: list[int], b: int) -> str:
    if name == "alone":
        return "alone"
    return f"{name} (position {order.index(b)} of {len(order)})"


def exc_words(exc: BaseException) -> str:
    tb = traceback.extract_tb(exc.__traceback__)
    where = f" at {Path(tb[-1].filename).name}:{tb[-1].lineno}" if tb else ""
    msg = (str(exc).strip().splitlines() or [""])[0][:300]
    return f"{type(exc).__name__}{where}: {msg}"
