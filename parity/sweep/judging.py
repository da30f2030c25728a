"""One execution result judged against the float64 reference: a :class:`parity.results.Judged`
record (the results row and the in-memory extras). The reference and same-dtype baseline are
computed once per case (:class:`BaselineCache`) and shared by the backends that meet it."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

import torch

from ..case import Case, make_inputs
from ..reference import attention_reference
from ..results import Judged, blank_row
from ..verdict import Baseline, Budget, compare, make_baseline


def case_columns(case: Case) -> dict[str, Any]:
    return {
        "case_id": case.case_id,
        "family": case.family,
        "dtype": case.dtype,
        "layout": case.layout,
        "hq": case.hq,
        "hkv": case.hkv,
        "head_dim": case.head_dim,
        "batch": case.batch,
        "q_lens": " ".join(map(str, case.q_lens)),
        "k_lens": " ".join(map(str, case.k_lens)),
        "window_left": "" if case.window.left is None else case.window.left,
        "window_right": "" if case.window.right is None else case.window.right,
        "align": case.window.align,
        "softcap": "" if case.softcap is None else case.softcap,
        "scale": "" if case.scale is None else case.scale,
        "page_size": "" if case.page_size is None else case.page_size,
        "seed": case.seed,
        "case_json": case.to_json(),
        "model": case.model or "",
        "layer": case.layer or "",
    }


def _head(case: Case, spec: str, info: dict[str, Any]) -> dict[str, Any]:
    row = blank_row()
    row.update(case_columns(case))
    row.update(backend=spec, backend_name=info.get("name", spec), repro=case.repro(spec))
    return row


def unavailable_row(case: Case, spec: str, info: dict[str, Any]) -> dict[str, Any]:
    """The row of a backend that cannot run here: verdict ``unavailable``, the reason in ``detail``."""
    row = _head(case, spec, info)
    row.update(verdict="unavailable", detail=info["unavailable"], raw_verdict="unavailable")
    return row


class BaselineCache:
    """Reference and same-dtype baseline, computed once per case for all backends (on ``device``)."""

    def __init__(self, device: str = "cpu", keep: int = 64):
        self.device = device
        self.keep = keep
        self._cache: dict[str, Baseline] = {}  # insertion-ordered: oldest evicted first
        self.seconds = 0.0
        self.case_seconds: dict[str, float] = {}  # case id -> seconds its reference and baseline took (kept)
        self._lock = threading.Lock()  # lanes (--jobs) share one cache

    def get(self, case: Case) -> Baseline:
        with self._lock:
            return self._get(case)

    def ensure(self, case: Case) -> float:
        """Compute ``case``'s baseline unless cached; the seconds spent computing it (0.0 on a hit)."""
        with self._lock:
            before = self.seconds
            self._get(case)
            return self.seconds - before

    def _get(self, case: Case) -> Baseline:
        hit = self._cache.get(case.case_id)
        if hit is not None:
            return hit
        t0 = time.perf_counter()
        inputs = make_inputs(case, self.device)
        ref = attention_reference(inputs, torch.float64)  # (total_q, hq, d)
        same = attention_reference(inputs, case.torch_dtype)  # (total_q, hq, d)
        base = make_baseline(case, ref, same)
        if len(self._cache) >= self.keep:
            self._cache.pop(next(iter(self._cache)))
        self._cache[case.case_id] = base
        spent = time.perf_counter() - t0
        self.case_seconds[case.case_id] = spent
        self.seconds += spent
        return base


def judge(
    case: Case,
    spec: str,
    info: dict[str, Any],
    res: dict[str, Any],
    baselines: BaselineCache,
    budgets: Mapping[str, Budget],
) -> Judged:
    """Turn one execution result into a judged record (its ``row`` is the results.csv row)."""
    row = _head(case, spec, info)
    status = res.get("status")
    if status != "ok":
        row["verdict"] = row["raw_verdict"] = status if status in ("unsupported", "error", "crash", "timeout") else "error"
        row["detail"] = res.get("detail", "")
        return Judged(row, summary=case.summary())
    cmp = compare(case, res["output"], baselines.get(case), budgets[case.dtype], res.get("unwritten"))
    reasons = list(cmp.reasons)
    mask = res.get("mask") or {"status": "not_run", "detail": "probes disabled"}
    gqa = res.get("gqa") or {"status": "not_run", "detail": "probes disabled"}
    reasons += [name for name, probe in (("mask", mask), ("gqa", gqa)) if probe["status"] == "mismatch"]
    row.update(_measures(cmp), verdict="fail" if reasons else "pass", reasons=" ".join(reasons),
               mask_check=mask["status"], mask_detail=mask["detail"], gqa_check=gqa["status"], gqa_detail=gqa["detail"],
               time_ms=f"{res.get('time_ms', 0.0):.4g}")
    row["raw_verdict"] = row["verdict"]  # parity.expect may turn it into expected / unexpected-pass
    return Judged(row, comparison=cmp, mask_image=mask.get("image"), summary=case.summary())


def _measures(cmp: Any) -> dict[str, Any]:
    """The comparison's columns of a row."""
    w = cmp.worst
    return {
        "max_abs_err": f"{cmp.max_abs_err:.6g}",
        "max_rel_err": f"{cmp.max_rel_err:.6g}",
        "mean_abs_err": f"{cmp.mean_abs_err:.6g}",
        "err_ratio": f"{cmp.err_ratio:.4g}",
        "budget_frac": f"{cmp.budget_frac:.4g}",
        "mismatch_pct": f"{cmp.mismatch_pct:.4g}",
        "threshold_max": f"{cmp.threshold_max:.6g}",
        "baseline_max": f"{cmp.baseline_max:.6g}",
        "baseline_mean": f"{cmp.baseline_mean:.6g}",
        "nan_count": cmp.nan_count,
        "inf_count": cmp.inf_count,
        "nan_masked_rows": cmp.nan_masked_rows,
        "unwritten": "n/a" if cmp.unwritten is None else cmp.unwritten,
        "worst_seq": w.get("seq", ""),
        "worst_head": w.get("head", ""),
        "worst_row": w.get("row", ""),
        "worst_left_edge": "" if w.get("left_edge") is None else w["left_edge"],
        "worst_where": cmp.worst_text(),
    }


def apply_expectations(judged: Judged, expectations: Any, version: str, case: Case) -> Judged:
    """``judged`` with its row judged against the known divergences (``parity.expect``), if any."""
    if not expectations:
        return judged
    row = expectations.judge(judged.row, version, torch.__version__, case)
    return Judged(row, judged.comparison, judged.mask_image, judged.summary)
