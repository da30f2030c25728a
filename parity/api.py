"""One backend on one case, as a results row (:func:`evaluate`) or an assertion (:func:`assert_parity`)."""

from __future__ import annotations

import atexit
from collections.abc import Sequence
from typing import Any

from . import backends
from .backends.base import Backend, refusal_reason
from .case import Case
from .execute import ProcessExecutor, backend_info, context_lost, execute
from .expect import Expectations
from .judge import BaselineCache, apply_expectations, judge, unavailable
from .maskcheck import DEFAULT_MAX_PASSES, ProbeResult, run_gqa_probe, run_mask_probe
from .memory import estimate, host_memory, host_need, row_host_refusal
from .results import ENGINE_CHECKS, Judged, Outcome, Verdict
from .verdict import BUDGETS, Budget

_BASELINES = BaselineCache("cpu", keep=16)
#: Worker processes of :func:`evaluate` with ``worker_path``, one per (backend, path, probes, passes).
_WORKERS: dict[tuple, ProcessExecutor] = {}
#: The in-process call that lost this process's CUDA context (a sticky CUDA error), if one did:
#: ``"backend on case: detail"``. Later calls of named backends then run in worker processes.
_LOST: list[str] = []


def _worker(
    backend: str, path: Sequence[str], probes: bool, max_passes: int, grad: bool = False, checks: tuple[str, ...] = ()
) -> ProcessExecutor:
    key = (backend, tuple(path), probes, max_passes, grad, tuple(checks))
    if key not in _WORKERS:
        if not _WORKERS:
            atexit.register(close_workers)
        _WORKERS[key] = ProcessExecutor(backend, probes, max_passes, extra_path=list(path), grad=grad, checks=tuple(checks))
    return _WORKERS[key]


def _in_process(
    inst: Backend, backend: str, case: Case, probes: bool, max_passes: int, grad: bool = False, checks: tuple[str, ...] = ()
) -> dict[str, Any]:
    """:func:`execute` here, unless an earlier call lost this process's CUDA context (then a CUDA
    backend is not run); a call that loses it is recorded in :data:`_LOST`."""
    if _LOST and getattr(inst, "device", "cpu") == "cuda":
        return {
            "status": "error",
            "detail": f"not run: this process's CUDA context was lost earlier ({_LOST[0]}); "
            "pass the backend by name, or run it with a worker path, to run it in a fresh process",
        }
    res = execute(inst, case, probes, max_passes, grad=grad, checks=checks)
    if context_lost(res):
        _LOST.append(f"{backend} on {case.summary()}: {str(res.get('detail', ''))[:160]}")
        res = {
            **res,
            "detail": f"{res.get('detail', '')} [this process's CUDA context is lost: later calls of named "
            "backends run in worker processes]",
        }
    return res


def close_workers() -> None:
    """Stop the worker processes :func:`evaluate` started for ``worker_path`` backends."""
    while _WORKERS:
        _WORKERS.popitem()[1].close()


def worker_info(backend: str, path: Sequence[str]) -> dict[str, Any]:
    """:func:`parity.execute.backend_info` of ``backend`` as seen by a worker with ``path`` first on sys.path."""
    return dict(_worker(backend, path, True, DEFAULT_MAX_PASSES).info)


class ParityError(AssertionError):
    """A backend disagreed with the reference; the message measures by how much and where."""


def spec_of(backend: Backend) -> str:
    """What loads ``backend`` again with ``--backend``: its registry name when that name resolves to its
    class (built-in, registered, entry point), else ``module:Class`` when that path imports to its class
    (a module run as ``python -m pkg.mod`` counts as ``pkg.mod``),
    else its ``name`` (a class defined in a function or a script: no command can load it)."""
    import importlib
    import sys

    cls, name = type(backend), str(getattr(backend, "name", ""))
    if name and name in backends.names():
        try:
            if type(backends.get(name)) is cls:
                return name
        except Exception:  # noqa: BLE001 - a broken registry entry: fall back to the class's path
            pass
    mod, qual = cls.__module__, cls.__qualname__
    if mod == "__main__":  # not imported again here: that would rerun the script
        main_spec = getattr(sys.modules.get("__main__"), "__spec__", None)
        main_name = getattr(main_spec, "name", None)
        return f"{main_name}:{qual}" if main_name and "<locals>" not in qual else name or qual
    if "<locals>" not in qual:
        try:
            obj: Any = importlib.import_module(mod)
            for part in qual.split("."):
                obj = getattr(obj, part)
        except Exception:  # noqa: BLE001 - not importable by that path
            obj = None
        if obj is cls:
            return f"{mod}:{qual}"
    return name or f"{mod}:{qual}"


def _resolve(backend: Backend | str) -> tuple[Backend, str, dict[str, Any]]:
    if isinstance(backend, str):
        inst = backends.get(backend)
        return inst, backend, backend_info(backend)
    info = {"name": backend.name, "device": backend.device, "unavailable": backend.unavailable_reason()}
    return backend, spec_of(backend), info


def evaluate(
    backend: Backend | str,
    case: Case,
    probes: bool = True,
    budgets: dict[str, Budget] | None = None,
    max_passes: int = DEFAULT_MAX_PASSES,
    baselines: BaselineCache | None = None,
    expectations: Expectations | None = None,
    worker_path: Sequence[str] | None = None,
    grad: bool = False,
    checks: Sequence[str] = (),
) -> dict[str, Any]:
    """Run ``case`` on ``backend`` in this process and judge it: one results row.

    ``grad``: the backward too (:mod:`parity.grad`): ``dq``, ``dk``, ``dv`` against the float64
    reference gradients, their exact checks; its reasons join the row's (``grad_check`` and the
    ``*_max_abs_err`` columns say the rest). A backend without a backward: ``grad_check`` unsupported.
    ``checks``: the engine checks, ``"invariance"`` and / or ``"graph"`` (``--invariance``, ``--graph-replay``;
    docs/engine-checks.md): their columns, and their reasons on a mismatch.

    ``worker_path``: run a named backend in a worker process with these folders first on its
    sys.path (packages that cannot share one sys.path, as ``--worker-path`` in a sweep); a crash
    of the backend is then a ``crash`` row, not the end of the caller.

    ``expectations``: known divergences (:mod:`parity.expect`) applied to the row, with the
    backend's ``version()`` string: a failure one describes comes back ``expected``, a pass a
    strict one covers ``unexpected-pass`` (``expected_id`` names the entry; ``a+b``: entries explaining it jointly)."""
    return evaluate_record(backend, case, probes, budgets, max_passes, baselines, expectations, worker_path, grad, checks).row


def evaluate_record(
    backend: Backend | str,
    case: Case,
    probes: bool = True,
    budgets: dict[str, Budget] | None = None,
    max_passes: int = DEFAULT_MAX_PASSES,
    baselines: BaselineCache | None = None,
    expectations: Expectations | None = None,
    worker_path: Sequence[str] | None = None,
    grad: bool = False,
    checks: Sequence[str] = (),
) -> Judged:
    """:func:`evaluate`, as the judged record: the row and the comparison (for :func:`failure_message`).

    =====================================  ==========================================================
    call                                   runs where
    =====================================  ==========================================================
    a name with ``worker_path``            that backend's worker process (a crash is its own row)
    in process, no CUDA error yet          this process
    in process, after a sticky CUDA error  a named backend: a worker process (fresh CUDA context);
                                           a CUDA ``Backend`` instance: not run, an ``error`` row
    =====================================  ==========================================================
    """
    checks = tuple(checks)
    if bad := [c for c in checks if c not in ENGINE_CHECKS]:
        raise ValueError(f"unknown engine check(s) {bad}: known {', '.join(ENGINE_CHECKS)}")
    baselines = baselines or _BASELINES
    # after a sticky CUDA error this process's context is gone: a worker has its own
    if isinstance(backend, str) and (worker_path or _LOST):
        worker = _worker(backend, worker_path or [], probes, max_passes, grad, checks)
        inst, backend_name, info = None, backend, worker.info
        if info.get("unavailable"):
            return unavailable(case, backend_name, info)
        res = _host_refused(None, info, case, probes, max_passes, baselines) or worker.run(case)
    else:
        inst, backend_name, info = _resolve(backend)
        if info.get("unavailable"):
            return unavailable(case, backend_name, info)
        refused = _host_refused(inst, info, case, probes, max_passes, baselines)
        res = refused or _in_process(inst, backend_name, case, probes, max_passes, grad, checks)
    judged = judge(case, backend_name, info, res, baselines, budgets or BUDGETS)
    if not expectations:
        return judged
    version = info.get("version")
    if version is None and inst is not None:  # a Backend instance: _resolve did not ask
        try:
            version = str(inst.version())
        except Exception:  # noqa: BLE001 - an unknown version matches no version range
            version = ""
    return apply_expectations(judged, expectations, str(version), case)


def _host_refused(
    inst: Backend | None, info: dict[str, Any], case: Case, probes: bool, max_passes: int, baselines: BaselineCache
) -> dict[str, Any] | None:
    """An ``unsupported`` result where the machine cannot hold the row's worker and then the reference this
    process computes after it (:func:`parity.memory.row_host_refusal`, the sweep's rule too; a CUDA backend's
    reference is host memory here too); None where it fits. A backend object's own refusal is asked first."""
    reference = None if baselines.cached(case) else baselines.device
    est = estimate(case, probes, max_passes, backend=inst)
    need = host_need(est, info.get("device", "cpu") != "cuda", reference, concurrent=False)
    own = None if inst is None else (lambda: refusal_reason(inst, case))
    why = row_host_refusal(need, host_memory(), own)
    return None if why is None else {"status": "unsupported", "detail": why}


def failure_message(row: dict[str, Any] | Judged) -> str:
    """A multi-line account of a failing row: what, by how much, where, and how to rerun it. Given a
    :class:`parity.results.Judged` record, its verdict's figures; given a results row (read back from
    results.csv), the same figures parsed from its columns (no allowed mean nor unwritten count: not columns)."""
    record = row.verdict if isinstance(row, Judged) else Verdict.from_row(row)
    if isinstance(row, Judged):
        row = row.row
    case = Case.from_json(row["case_json"])
    lines = [f"{row['backend']} {row['verdict'].upper()} on {case.summary()} [{row['reasons'] or row['detail']}]"]
    lines += [f"  {line}" for line in miss_lines(record)]
    lines.append(f"  repro: {row['repro']}")
    return "\n".join(lines)


def miss_lines(record: Verdict | Judged | dict[str, Any]) -> list[str]:
    """The measured lines of :func:`failure_message` (between its header and its repro), unindented, from
    one source, the typed :class:`parity.results.Verdict` (a results row is parsed into one): unwritten
    elements, the error budget's figures and the worst element, non-finite output, the mask and GQA
    probes' misses, the backend's own words."""
    v = record.verdict if isinstance(record, Judged) else record if isinstance(record, Verdict) else Verdict.from_row(record)
    lines = []
    if v.unwritten and v.elements:  # first: it explains the rest; alone when nothing was written
        lines.append(f"{v.unwritten} of {v.elements} output elements never written (poison left in the buffer)")
    if v.measured and not (v.unwritten and v.unwritten == v.elements):
        lines += _budget_lines(v)
    if v.mask_check == "mismatch":
        lines.append(f"mask: {v.mask_detail}")
    if v.gqa_check == "mismatch":
        lines.append(f"gqa: {v.gqa_detail}")
    if v.read_check == "mismatch":
        lines.append(f"reads: {v.read_detail}")
    if v.grad_check in ("mismatch", "error"):
        lines.append(f"grad: {v.grad_detail}")
    if v.lse_check == "mismatch":
        lines.append(f"lse: {v.lse_detail}")
    if v.invariance_check == "mismatch":
        lines.append(f"batch invariance: {v.invariance_detail}")
    if v.graph_check == "mismatch":
        lines.append(f"graph replay: {v.graph_detail}")
    if v.unconfirmed_id:
        why = f"the known divergence {v.unconfirmed_id} would explain it, but the mask probe did not run"
        lines.append(f"no mask evidence: {why} ({v.mask_detail})")
    if v.verdict != Outcome.FAIL and v.detail:
        lines.append(v.detail)
    return lines


def _budget_lines(v: Verdict) -> list[str]:
    """The error budget's lines of :func:`miss_lines` (a row read back has no allowed mean: not a column)."""
    mean = f"mean|err| {_g(v.mean_abs_err, '.3g')}" + (f" vs allowed {v.threshold_mean:.3g}" if v.threshold_mean is not None else "")
    lines = [
        f"error budget: max|err| {_g(v.max_abs_err, '.4g')} vs allowed {_g(v.threshold_max, '.4g')} "
        f"(k x same-dtype baseline {_g(v.baseline_max, '.4g')} + floor); "
        f"err ratio {_g(v.err_ratio, '.3g')}; {mean}; {_g(v.mismatch_pct, '.3g')}% of elements over budget"
    ]
    if v.worst_where:
        lines.append(v.worst_where)
    if v.nan_count or v.inf_count:
        lines.append(f"non-finite: {v.nan_count} NaN ({v.nan_masked_rows} in rows that see no key), {v.inf_count} Inf")
    return lines


def _g(x: float | None, fmt: str) -> str:
    return "?" if x is None else format(x, fmt)


def assert_parity(backend: Backend | str, case: Case, **kw: Any) -> dict[str, Any]:
    """Raise :class:`ParityError` unless ``backend`` passes ``case``; return the row.

    ``unsupported`` and ``unavailable`` raise too: call sites that expect them should
    check :func:`evaluate`'s verdict instead (pytest tests skip on them). ``grad=True`` checks the
    backward too (a backend without one passes on its forward; its row says ``grad_check`` unsupported).
    """
    judged = evaluate_record(backend, case, **kw)
    if judged.row["verdict"] != Outcome.PASS:
        raise ParityError(failure_message(judged))
    return judged.row


def check_mask(backend: Backend | str, case: Case, max_passes: int = DEFAULT_MAX_PASSES, batch_passes: bool = True) -> ProbeResult:
    """The exact effective-mask probe alone (see :mod:`parity.maskcheck`): the full probe where it needs at
    most ``max_passes`` passes, else the scaled one (:func:`parity.maskcheck.mask_plan`; ``ProbeResult.probe``).

    ``batch_passes=False`` runs one probe pass per backend call, at the case's own shape.
    """
    inst, _, _ = _resolve(backend)
    from .execute import probe_runner

    run, _ = probe_runner(inst, case)
    return run_mask_probe(case, run, inst.device, max_passes, batch_passes=batch_passes)


def check_gqa(backend: Backend | str, case: Case) -> ProbeResult:
    """The kv-head mapping probe alone."""
    inst, _, _ = _resolve(backend)
    from .execute import probe_runner

    run, _ = probe_runner(inst, case)
    return run_gqa_probe(case, run, inst.device)
