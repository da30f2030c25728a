"""Self-consistency of one backend: decode vs prefill, chunked vs one-shot prefill.

A backend that agrees with the reference case by case can still be inconsistent with
itself across call shapes (a decode path that drops the window, a chunked path with the
wrong alignment). These checks run one backend on a full prefill of ``S`` tokens and

* **decode**: for chosen positions ``p``, the case ``Sq = 1, Sk = p + 1`` with query row ``p``
  and keys ``0..p``; its output must equal row ``p`` of the full prefill;
* **chunked**: the queries split into chunks ``[c0, c1)``, each run as ``Sq = c1 - c0``,
  ``Sk = c1`` (bottom-right aligned); the concatenation must equal the full prefill.

Rows are compared with the case's error budget: ``|decode - prefill| <= 2 * threshold_max``
(both sides may carry their own rounding, each within ``threshold_max`` of the float64
reference), and each side is also compared with the reference. Only bottom-right windows
are meaningful here (decode and chunked prefill are bottom-right by construction).

``python -m parity consistency --backend NAME [--seq 2048] [--window 256] [--out DIR]`` (also
``python -m parity.consistency``; :mod:`parity.cli.consistency`) prints one line per check and
writes ``DIR/consistency.csv``.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

import torch

from .backends.base import Unsupported, refusal_reason
from .case import Case, Inputs, make_inputs
from .reference import attention_reference
from .results import Outcome
from .verdict import BUDGETS, POISON, compare, make_baseline


def _sub_inputs(full: Inputs, case: Case, q0: int, q1: int, k1: int) -> Inputs:
    """Queries ``[q0, q1)`` against keys ``[0, k1)`` of a one-sequence ``full``."""
    sub = dataclasses.replace(case, q_lens=(q1 - q0,), k_lens=(k1,))
    dev = full.q.device
    return Inputs(
        sub,
        full.q[q0:q1].contiguous(),  # (q1 - q0, hq, d)
        full.k[:k1].contiguous(),  # (k1, hkv, d)
        full.v[:k1].contiguous(),  # (k1, hkv, d)
        torch.tensor([0, q1 - q0], dtype=torch.int32, device=dev),
        torch.tensor([0, k1], dtype=torch.int32, device=dev),
        q_descale=full.q_descale,  # fp8 cases: the full tensors' descales (a slice keeps its values)
        k_descale=full.k_descale,
        v_descale=full.v_descale,
        sinks=full.sinks,
    )


def _run(backend, inputs: Inputs) -> torch.Tensor:
    case = inputs.case
    reason = refusal_reason(backend, case)
    if reason:
        raise Unsupported(reason)
    out = torch.full(inputs.q.shape, POISON, dtype=case.torch_dtype, device=inputs.q.device)  # (Sq, hq, d)
    res = backend.run(case, inputs, out)
    return res.detach().to("cpu", torch.float32)  # (Sq, hq, d)


def check(backend, case: Case, decode_positions: list[int] | None = None, chunk: int | None = None) -> list[dict[str, Any]]:
    """Run both checks for a one-sequence square ``case``; one result dict per check."""
    if case.batch != 1 or case.q_lens != case.k_lens:
        raise ValueError("consistency checks take one sequence with Sq == Sk (a full prefill)")
    if case.window.align != "bottom_right":
        raise ValueError("decode and chunked prefill are bottom-right aligned; use a bottom_right window")
    s = case.q_lens[0]
    device = backend.device
    full = make_inputs(case, device)
    ref = attention_reference(full.to("cpu"), torch.float64)  # (S, hq, d)
    base = make_baseline(case, ref, attention_reference(full.to("cpu"), case.torch_dtype))
    budget = BUDGETS[case.dtype]
    prefill = _run(backend, full)  # (S, hq, d)
    thr = compare(case, prefill, base, budget, None).threshold_max
    rows = []

    def record(kind: str, where: str, got: torch.Tensor, want: torch.Tensor, r: torch.Tensor) -> None:
        diff = float((got - want).abs().max())
        err_ref = float((got.double() - r).abs().max())
        rows.append(
            {
                "backend": getattr(backend, "name", str(backend)),
                "check": kind,
                "where": where,
                "case": case.summary(),
                "max_diff_vs_prefill": f"{diff:.6g}",
                "max_err_vs_reference": f"{err_ref:.6g}",
                "tolerance": f"{2 * thr:.6g}",
                "verdict": Outcome.PASS if diff <= 2 * thr and err_ref <= thr else Outcome.FAIL,
            }
        )

    for p in decode_positions if decode_positions is not None else sorted({0, 1, s // 3, s // 2, s - 2, s - 1}):
        if not 0 <= p < s:
            continue
        try:
            got = _run(backend, _sub_inputs(full, case, p, p + 1, p + 1))  # (1, hq, d)
        except Exception as exc:  # noqa: BLE001
            rows.append({"backend": backend.name, "check": "decode", "where": f"p={p}", "case": case.summary(), **_failed(exc)})
            continue
        record("decode", f"p={p}", got, prefill[p : p + 1], ref[p : p + 1])
    c = chunk or max(1, s // 4 + 3)  # an odd chunk size: chunk edges off the block grid
    pieces = []
    try:
        for c0 in range(0, s, c):
            c1 = min(s, c0 + c)
            pieces.append(_run(backend, _sub_inputs(full, case, c0, c1, c1)))  # (c1 - c0, hq, d)
        record("chunked", f"chunk={c}", torch.cat(pieces), prefill, ref)
    except Exception as exc:  # noqa: BLE001
        rows.append({"backend": backend.name, "check": "chunked", "where": f"chunk={c}", "case": case.summary(), **_failed(exc)})
    return rows


def _failed(exc: Exception) -> dict[str, Any]:
    """A declined sub-call is ``unsupported`` (not a failure), anything else ``error``."""
    if isinstance(exc, Unsupported):
        return {"verdict": Outcome.UNSUPPORTED, "detail": str(exc)[:200]}
    return {"verdict": Outcome.ERROR, "detail": f"{type(exc).__name__}: {str(exc)[:200]}"}


FIELDS = ["backend", "check", "where", "case", "max_diff_vs_prefill", "max_err_vs_reference", "tolerance", "verdict", "detail"]


if __name__ == "__main__":  # python -m parity.consistency ARGS is python -m parity consistency ARGS (parity.cli.consistency)
    import runpy

    sys.argv[1:1] = ["consistency"]
    runpy.run_module("parity", run_name="__main__", alter_sys=True)
