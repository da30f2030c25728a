"""The one judge: an execution result against the float64 reference, then against the known
divergences (:func:`apply_expectations`, the only place a verdict becomes ``expected`` /
``unexpected-pass``). It returns a :class:`parity.results.Judged` record: the backend's and case's
columns and a typed :class:`parity.results.Verdict` (numbers as numbers; results.csv's text is made
by the record). The reference and same-dtype baseline are computed once per case
(:class:`BaselineCache`) and shared by the backends that meet it.

Used by the sweep (:mod:`parity.sweep`), :func:`parity.evaluate` and the self-test; the reports
show the verdicts a run stored and judge again only when asked (``parity report --expect``)."""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypeVar

import torch

from .case import Case, Inputs, make_inputs
from .grad import GradBaseline, compare_grads, grad_columns, make_grad_baseline
from .memory import LARGE_ROW_BYTES, estimate, is_oom
from .reference import attention_reference
from .results import CHECK_TEXT, Judged, Outcome, Verdict
from .verdict import Baseline, Budget, Comparison, compare, compare_lse, make_baseline

_T = TypeVar("_T")

#: How often a wait for another caller's computation asks its ``unless`` (:meth:`BaselineCache.ensure_timed`), seconds.
UNLESS_POLL_S = 0.01


class Overtaken(Exception):
    """:meth:`BaselineCache.ensure_timed` stopped waiting for another caller's computation because its ``unless`` said
    so (a sweep's lane: its worker answered meanwhile); nothing was computed. ``waited``: the seconds it waited."""

    def __init__(self, waited: float):
        super().__init__(f"stopped after waiting {waited:.3f} s for another computation")
        self.waited = waited


#: Bytes of baselines a cache keeps (their float64 references): the memory gates reserve this much
#: (:mod:`parity.sweep.rowmemory`); which is evicted first, :class:`BaselineCache`'s ``demand`` says.
CACHE_BYTES = 4 << 30


class InputSource(Protocol):
    """Where a cache's references take their inputs (:class:`parity.sweep.inputstore.InputStore`: the sweep's one draw
    of each case, the bytes its rows were sent), and the seconds that draw took."""

    def inputs(self, case: Case, device: str = "cpu") -> Inputs:
        """``make_inputs(case, device)``."""
        ...

    def drawn_s(self, case_id: str) -> float:
        """Seconds the source spent drawing ``case_id`` (0.0: none)."""
        ...


class Demand(Protocol):
    """What a sweep still needs of a cache (:class:`parity.sweep.demand.CaseDemand`)."""

    def rank(self, case_id: str) -> Any:
        """Eviction order: the lowest rank is evicted first."""
        ...


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


def _head(case: Case, backend: str, info: dict[str, Any]) -> dict[str, Any]:
    return {**case_columns(case), "backend": backend, "backend_name": info.get("name", backend), "repro": case.repro(backend)}


def unavailable(case: Case, backend: str, info: dict[str, Any]) -> Judged:
    """A backend that cannot run here: verdict ``unavailable``, the reason in ``detail``."""
    verdict = Verdict(Outcome.UNAVAILABLE, raw_verdict=Outcome.UNAVAILABLE, detail=info["unavailable"])
    return Judged(_head(case, backend, info), verdict, summary=case.summary())


def unavailable_row(case: Case, backend: str, info: dict[str, Any]) -> dict[str, Any]:
    """:func:`unavailable`'s results row."""
    return unavailable(case, backend, info).row


class BaselineCache:
    """Reference and same-dtype baseline, computed once per case for all backends (on ``device``).

    Keeps at most ``keep`` baselines and ``max_bytes`` of them (default :data:`CACHE_BYTES`); to make room it
    evicts the oldest, or with a ``demand`` (a sweep's, :mod:`parity.sweep.demand`) the one it ranks lowest: no
    unit needs it, else the one needed latest (:meth:`release` drops one no unit needs at once). Where ``device`` runs out of memory
    computing one, it is computed on the CPU instead (:attr:`cpu_fallbacks` counts them); an
    out-of-memory error there is raised (the sweep gives that row an ``error``).

    The lanes (``--jobs``) share one cache: one baseline is computed at a time (the harness's device memory
    holds one computation), and a baseline already held is answered without waiting for it (before
    2026-12-07 one lock covered both: on the H100's models run a lane judging a two-row decode case waited up
    to 17 s behind another lane's 32k reference, counted as the judge's time)."""

    def __init__(self, device: str = "cpu", keep: int = 64, max_bytes: int | None = None, demand: Demand | None = None):
        self.device = device
        self.keep, self.max_bytes = keep, CACHE_BYTES if max_bytes is None else max_bytes
        self.demand = demand
        self._cache: dict[str, Baseline] = {}  # insertion-ordered: oldest first
        self.seconds = 0.0
        self.case_seconds: dict[str, float] = {}  # case id -> seconds its reference and baseline took (kept)
        self.cpu_fallbacks = 0
        #: asked before each block of a reference's rows, forward and backward (a sweep's stop signal; None: never stopped)
        self.stop: Callable[[], bool] | None = None
        #: seconds per stage, summed over the cases computed: inputs, reference (float64), baseline (same dtype)
        self.stage_seconds: dict[str, float] = {"inputs": 0.0, "reference": 0.0, "baseline": 0.0}
        self.computed: dict[str, int] = {}  # case id -> times computed (> 1: evicted, then met again)
        self._lock = threading.Lock()  # the dicts: held only to read or change them, never while computing
        self._computing = threading.Lock()  # one computation at a time (the counters above change under it)
        self._grads: dict[str, GradBaseline] = {}  # the backward's (--grad), kept like the forward's
        #: the references' inputs: the sweep's shared draw (None: make_inputs); its draw's seconds count in case_seconds,
        #: as the reference's own draw did before 2026-12-07 (the rows' time limits scale with them)
        self.inputs: InputSource | None = None

    def grad(self, case: Case) -> GradBaseline:
        """``case``'s reference gradients and their budget figures (:mod:`parity.grad`), computed once."""
        return self._fetch(self._grads, case, self._compute_grad)[0]

    def get(self, case: Case) -> Baseline:
        return self._fetch(self._cache, case, self._compute)[0]

    def cached(self, case: Case) -> bool:
        """Whether ``case``'s baseline is held now (a row of it then costs the harness no new device memory)."""
        with self._lock:
            return case.case_id in self._cache

    def ensure(self, case: Case, grad: bool = False) -> float:
        """Compute ``case``'s baseline (and with ``grad`` its gradient baseline) unless cached; the seconds spent
        computing them (0.0 on a hit)."""
        return self.ensure_timed(case, grad)[0]

    def ensure_timed(self, case: Case, grad: bool = False, unless: Callable[[], bool] | None = None) -> tuple[float, float]:
        """:meth:`ensure`'s seconds computing, and the seconds it waited for another caller's computation (another
        lane's case, or this case computed meanwhile by another lane). ``unless``: asked every :data:`UNLESS_POLL_S`
        while another computation holds the cache; once it says True, :class:`Overtaken` is raised, nothing computed
        (the forward's baseline only: with ``grad``, the gradients' wait is not cut short)."""
        _, spent, waited = self._fetch(self._cache, case, self._compute, unless)
        if grad:
            _, g_spent, g_waited = self._fetch(self._grads, case, self._compute_grad)
            spent, waited = spent + g_spent, waited + g_waited
        return spent, waited

    def _fetch(
        self, cache: dict[str, _T], case: Case, compute: Callable[[Case], _T], unless: Callable[[], bool] | None = None
    ) -> tuple[_T, float, float]:
        """``case``'s entry of ``cache`` (computed by ``compute`` unless held), the seconds computing it and the
        seconds waited for another computation (:class:`Overtaken` where ``unless`` ended that wait)."""
        with self._lock:
            hit = cache.get(case.case_id)
        if hit is not None:
            return hit, 0.0, 0.0
        t0 = time.perf_counter()
        self._take_turn(t0, unless)
        try:
            waited = time.perf_counter() - t0
            with self._lock:
                hit = cache.get(case.case_id)  # another lane computed it while this one waited
            if hit is not None:
                return hit, 0.0, waited
            t1 = time.perf_counter()
            value = compute(case)
            return value, time.perf_counter() - t1, waited
        finally:
            self._computing.release()

    def _take_turn(self, t0: float, unless: Callable[[], bool] | None) -> None:
        """Hold the one computation's lock (waiting since ``t0``); with ``unless``, asked every :data:`UNLESS_POLL_S`
        while another caller holds it: :class:`Overtaken` (the lock not held) once it says True."""
        if unless is None:
            self._computing.acquire()
            return
        while not self._computing.acquire(timeout=UNLESS_POLL_S):
            if unless():
                raise Overtaken(time.perf_counter() - t0)

    def _compute_grad(self, case: Case) -> GradBaseline:
        t0 = time.perf_counter()
        base = self._on_device_or_cpu(lambda device: make_grad_baseline(case, self._inputs(case, device), stop=self.stop))
        with self._lock:
            self._make_room(self._grads, lambda b: b.bytes, base.bytes)
            self._grads[case.case_id] = base
        spent = time.perf_counter() - t0
        self.stage_seconds["grad_reference"] = self.stage_seconds.get("grad_reference", 0.0) + spent
        self.seconds += spent
        return base

    def _compute(self, case: Case) -> Baseline:
        t0 = time.perf_counter()
        base = self._on_device_or_cpu(
            lambda device: compute_baseline(case, device, stages=self.stage_seconds, inputs_of=self._inputs, stop=self.stop)
        )
        if estimate(case, probes=False).harness_bytes >= LARGE_ROW_BYTES:
            # as a worker does after a large row: the caching allocator's freed blocks go back to the card, which
            # the lanes' workers share (h100-2026-12-06-models: a process of 17 GiB beside a worker's OOM)
            _release(self.device)
        self.computed[case.case_id] = self.computed.get(case.case_id, 0) + 1
        with self._lock:
            self._make_room(self._cache, _ref_bytes, _ref_bytes(base))
            self._cache[case.case_id] = base
        spent = time.perf_counter() - t0
        self.case_seconds[case.case_id] = spent + (self.inputs.drawn_s(case.case_id) if self.inputs is not None else 0.0)
        self.seconds += spent
        return base

    def _inputs(self, case: Case, device: str) -> Inputs:
        """``case``'s inputs on ``device``: from :attr:`inputs` where the cache has a source, else drawn."""
        return self.inputs.inputs(case, device) if self.inputs is not None else make_inputs(case, device)

    def _on_device_or_cpu(self, make: Callable[[str], _T]) -> _T:
        """``make(self.device)``; where that runs out of device memory, ``make("cpu")`` (counted in
        :attr:`cpu_fallbacks`), once the failed attempt's traceback, and the tensors it held, are gone."""
        try:
            return make(self.device)
        except Exception as exc:
            if not is_oom(exc) or self.device == "cpu":
                raise
        _release(self.device)
        result = make("cpu")
        self.cpu_fallbacks += 1
        return result

    def _make_room(self, cache: dict[str, Any], size_of: Callable[[Any], int], incoming: int) -> None:
        """Evict ``cache``'s entries until it holds fewer than ``keep`` and ``incoming`` more bytes fit: the oldest,
        or those ``demand`` ranks lowest (the oldest among equals)."""
        held = sum(size_of(b) for b in cache.values())
        while cache and (len(cache) >= self.keep or held + incoming > self.max_bytes):
            victim = next(iter(cache)) if self.demand is None else min(cache, key=self.demand.rank)
            held -= size_of(cache.pop(victim))

    def release(self, case_id: str) -> None:
        """Drop ``case_id``'s baselines now (no unit will judge the case again)."""
        with self._lock:
            self._cache.pop(case_id, None)
            self._grads.pop(case_id, None)

    @property
    def recomputed(self) -> int:
        """Baselines computed more than once (evicted before every backend had met the case)."""
        return sum(n - 1 for n in self.computed.values())

    @property
    def bytes(self) -> int:
        """Bytes the cached references hold."""
        with self._lock:
            return sum(_ref_bytes(b) for b in self._cache.values())


def compute_baseline(
    case: Case,
    device: str,
    stages: dict[str, float] | None = None,
    inputs_of: Callable[[Case, str], Inputs] = make_inputs,
    stop: Callable[[], bool] | None = None,
) -> Baseline:
    """``case``'s float64 reference and same-dtype baseline on ``device`` (both banded); ``stages``:
    seconds of each step (``inputs``, ``reference``, ``baseline``) are added to it; ``inputs_of``: its inputs
    (:func:`parity.case.make_inputs`, or the sweep's shared draw of the same bytes); ``stop``: asked before each
    block of rows (:class:`parity.reference.ReferenceStopped` once it says True)."""
    t0 = time.perf_counter()
    inputs = inputs_of(case, device)
    t1 = time.perf_counter()
    ref_lse = torch.empty(inputs.q.shape[:2], dtype=torch.float64, device=inputs.q.device)  # (total_q, hq)
    same_lse = torch.empty(inputs.q.shape[:2], dtype=torch.float32, device=inputs.q.device)  # (total_q, hq)
    ref = attention_reference(inputs, torch.float64, lse=ref_lse, stop=stop)  # (total_q, hq, d)
    if stages is not None and device.startswith("cuda"):
        torch.cuda.synchronize()  # the reference's own seconds, not the baseline's
    t2 = time.perf_counter()
    same = attention_reference(inputs, case.torch_dtype, lse=same_lse, stop=stop)  # (total_q, hq, d)
    base = make_baseline(case, ref, same, ref_lse, same_lse)
    if stages is not None:
        for k, v in (("inputs", t1 - t0), ("reference", t2 - t1), ("baseline", time.perf_counter() - t2)):
            stages[k] = stages.get(k, 0.0) + v
    return base


def _ref_bytes(base: Baseline) -> int:
    return base.ref.numel() * base.ref.element_size()


def _release(device: str) -> None:
    if device.startswith("cuda") and torch.cuda.is_available():
        torch.cuda.empty_cache()


def compare_safely(case: Case, out: torch.Tensor, base: Baseline, budget: Budget, unwritten: int | None) -> Comparison:
    """:func:`parity.verdict.compare` on the baseline's device; where that runs out of memory, on the CPU."""
    try:
        return compare(case, out, base, budget, unwritten)
    except Exception as exc:
        if not is_oom(exc) or base.ref.device.type == "cpu":
            raise
    _release(str(base.ref.device))
    lse = None if base.ref_lse is None else base.ref_lse.cpu()
    cpu = dataclasses.replace(base, ref=base.ref.cpu(), empty_rows=base.empty_rows.cpu(), ref_lse=lse)
    return compare(case, out.cpu(), cpu, budget, unwritten)


def harness_oom_row(case: Case, backend: str, info: dict[str, Any], res: dict[str, Any], exc: BaseException) -> Judged:
    """The ``error`` row of a case whose reference, baseline or comparison ran out of memory in this
    process (on the device and on the CPU): the run goes on."""
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
    detail = f"out of memory in the harness (reference, baseline or comparison): {first}"
    verdict = Verdict(Outcome.ERROR, raw_verdict=Outcome.ERROR, detail=detail, **_memory(res))
    return Judged(_head(case, backend, info), verdict, summary=case.summary())


def _memory(res: dict[str, Any]) -> dict[str, Any]:
    return {k: float(res[k]) if isinstance(res.get(k), (int, float)) else None for k in ("est_mem_mb", "peak_mem_mb")}


def judge(
    case: Case,
    backend: str,
    info: dict[str, Any],
    res: dict[str, Any],
    baselines: BaselineCache,
    budgets: Mapping[str, Budget],
) -> Judged:
    """One execution result judged against the reference (known divergences not yet applied)."""
    head = _head(case, backend, info)
    if res.get("grad") is not None:  # the backward was asked: the repro asks it too
        head["repro"] += " --grad"
    for key, flag in (("invariance", " --invariance"), ("graph", " --graph-replay")):
        if isinstance(res.get(key), dict):  # an engine check was asked: the repro asks it too
            head["repro"] += flag
    status = res.get("status")
    if status != "ok":
        raw = Outcome.of(status)
        raw = raw if raw in (Outcome.UNSUPPORTED, Outcome.ERROR, Outcome.CRASH, Outcome.TIMEOUT) else Outcome.ERROR
        verdict = Verdict(raw, raw_verdict=raw, detail=res.get("detail", ""), **_memory(res))
        return Judged(head, verdict, summary=case.summary())
    base = baselines.get(case)
    if base.unjudgeable:  # recorded, never a pass: the dtype cannot hold this case's baseline
        return Judged(
            head,
            Verdict(Outcome.UNSUPPORTED, raw_verdict=Outcome.UNSUPPORTED, detail=f"not judged: {base.unjudgeable}"),
            summary=case.summary(),
        )
    cmp = compare_safely(case, res["output"], base, budgets[case.dtype], res.get("unwritten"))
    reasons = list(cmp.reasons)
    lse = _lse_columns(case, res, base, budgets[case.dtype])
    mask = res.get("mask") or {"status": "not_run", "detail": "probes disabled"}
    gqa = res.get("gqa") or {"status": "not_run", "detail": "probes disabled"}
    reads = res.get("reads") or {"status": "not_run", "detail": "probes disabled"}
    probes = (("mask", mask), ("gqa", gqa), ("reads_outside_window", reads))
    reasons += [name for name, probe in probes if probe["status"] == "mismatch"]
    if lse["lse_check"] == "mismatch":
        reasons.append("lse")
    grad = judge_grad(case, res.get("grad"), baselines, budgets[case.dtype])
    reasons += grad.pop("reasons")
    checks = judge_checks(res, cmp.threshold_max)
    reasons += checks.pop("reasons")
    raw = Outcome.FAIL if reasons else Outcome.PASS  # apply_expectations may turn it into expected / unexpected-pass
    verdict = Verdict(
        raw,
        raw_verdict=raw,
        reasons=tuple(reasons),
        **_measures(cmp),
        mask_check=mask["status"],
        mask_detail=mask["detail"],
        mask_probe=str(mask.get("probe", "")),
        gqa_check=gqa["status"],
        gqa_detail=gqa["detail"],
        read_check=reads["status"],
        read_detail=reads["detail"],
        **lse,
        time_ms=float(res.get("time_ms", 0.0)),
        **_memory(res),
        **grad,
        **checks,
    )
    return Judged(head, verdict, comparison=cmp, mask_image=mask.get("image"), summary=case.summary())


def judge_grad(case: Case, grad: dict[str, Any] | None, baselines: BaselineCache, budget: Budget) -> dict[str, Any]:
    """The backward's verdict fields (:func:`parity.grad.grad_columns`) and ``reasons`` to join the row's:
    none when the backward was not asked; ``grad_error`` when it raised; the comparison's otherwise."""
    if grad is None:
        return {"reasons": []}
    if grad.get("status") != "ok":
        unsupported = grad.get("status") == Outcome.UNSUPPORTED  # grad_check's words: unsupported / error
        status = "unsupported" if unsupported else "error"
        return {"reasons": [] if unsupported else ["grad_error"], **grad_columns(None, status, str(grad.get("detail", "")))}
    base = baselines.grad(case)
    if base.unjudgeable:  # recorded, never a pass: the dtype cannot hold this case's gradients
        return {"reasons": [], **grad_columns(None, "unsupported", f"not judged: {base.unjudgeable}")}
    cmp = compare_grads(case, grad, base, budget)
    return {"reasons": list(cmp.reasons), **grad_columns(cmp, "")}


#: Why an engine check did not run when the sweep did not ask for it.
CHECK_OFF = {"invariance": "off (parity run --invariance)", "graph": "off (parity run --graph-replay)"}
#: The row's failure reason of each engine check's mismatch (parity.expect.CHECK_REASONS).
CHECK_REASON = {"invariance": "batch_invariance", "graph": "graph_replay"}


def judge_checks(res: dict[str, Any], threshold_max: float) -> dict[str, Any]:
    """The engine checks' verdict fields (``invariance_*``, ``graph_*``) and ``reasons`` to join the row's.

    =============  ==========================  =====================  ==================
    check          worker's status             column                 reason
    =============  ==========================  =====================  ==================
    either         absent (not asked)          ``not_run``: off       none
    either         ok / not_run / error        the same               none
    invariance     mismatch                    ``mismatch``           ``batch_invariance``
    graph replay   differs, within the row's   ``close``              none
                   max budget (finite)
    graph replay   differs beyond it, or NaN   ``mismatch``           ``graph_replay``
    =============  ==========================  =====================  ==================
    """
    out: dict[str, Any] = {"reasons": []}
    for name in ("invariance", "graph"):
        got = res.get(name)
        if not isinstance(got, dict):
            got = {"status": "not_run", "detail": CHECK_OFF[name]}
        status, diff = str(got.get("status", "error")), got.get("max_diff")
        if status == "differs":
            close = isinstance(diff, (int, float)) and math.isfinite(diff) and diff <= threshold_max
            status = "close" if close else "mismatch"
        if status == "mismatch":
            out["reasons"].append(CHECK_REASON[name])
        out[f"{name}_check"], out[f"{name}_detail"] = status, str(got.get("detail", ""))
        out[f"{name}_max_diff"] = float(diff) if isinstance(diff, (int, float)) else None
    return out


def _lse_columns(case: Case, res: dict[str, Any], base: Baseline, budget: Budget) -> dict[str, Any]:
    """The LSE columns of a verdict: ``none`` where the backend returned no LSE."""
    if res.get("lse") is None or base.ref_lse is None:
        return {"lse_check": "none"}
    c = compare_lse(case, res["lse"], base, budget, tuple(res.get("lse_empty") or ("-inf",)))
    return {"lse_check": c.check, "lse_max_abs_err": c.max_abs_err, "lse_budget": c.budget, "lse_detail": c.detail}


def _measures(cmp: Comparison) -> dict[str, Any]:
    """The comparison's fields of a verdict."""
    w = cmp.worst
    return {
        "max_abs_err": float(cmp.max_abs_err),
        "max_rel_err": float(cmp.max_rel_err),
        "mean_abs_err": float(cmp.mean_abs_err),
        "err_ratio": float(cmp.err_ratio),
        "budget_frac": float(cmp.budget_frac),
        "mismatch_pct": float(cmp.mismatch_pct),
        "threshold_max": float(cmp.threshold_max),
        "threshold_mean": float(cmp.threshold_mean),
        "baseline_max": float(cmp.baseline_max),
        "baseline_mean": float(cmp.baseline_mean),
        "nan_count": cmp.nan_count,
        "inf_count": cmp.inf_count,
        "nan_masked_rows": cmp.nan_masked_rows,
        "unwritten": cmp.unwritten,
        "elements": cmp.elements,
        "worst_seq": w.get("seq"),
        "worst_head": w.get("head"),
        "worst_row": w.get("row"),
        "worst_left_edge": w.get("left_edge"),
        "worst_where": cmp.worst_text(),
    }


def expect_verdict(
    verdict: Verdict, expectations: Any, backend: str, case: Case | None, case_json: str = "", version: str = "", torch_version: str = ""
) -> Verdict:
    """``verdict`` judged against the known divergences (``parity.expect``), anew from its raw verdict."""
    row = {
        "backend": backend,
        "verdict": verdict.verdict,
        "raw_verdict": verdict.raw_verdict,
        "reasons": " ".join(verdict.reasons),
        "detail": verdict.detail,
        "case_json": case_json,
        "grad_check": verdict.grad_check,
        "mask_check": verdict.mask_check,
        "mask_detail": verdict.mask_detail,
        "read_detail": verdict.read_detail,
        **{k: getattr(verdict, k) for k in CHECK_TEXT},
    }
    out = expectations.judge(row, version, torch_version, case)
    ids = {k: out.get(k, "") for k in ("expected_id", "unconfirmed_id")}
    judged, raw = Outcome.of(out["verdict"]) or verdict.verdict, Outcome.of(out["raw_verdict"])
    return dataclasses.replace(verdict, verdict=judged, raw_verdict=raw, **ids)


def apply_expectations(judged: Judged, expectations: Any, version: str, case: Case) -> Judged:
    """``judged`` with its verdict judged against the known divergences (``parity.expect``), if any."""
    if not expectations:
        return judged
    verdict = expect_verdict(judged.verdict, expectations, judged.head["backend"], case, version=version, torch_version=torch.__version__)
    return dataclasses.replace(judged, verdict=verdict)
