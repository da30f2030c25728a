"""Running one backend on one case, in this process or in an isolated worker process.

:func:`execute` is the unit of work: build the inputs, poison the output buffer, call
the backend, validate what it returned, run the exact mask, GQA and read probes. It never
raises for a backend's fault; it returns a dict with ``status`` in
``ok | unsupported | error | crash`` (``crash``: a sticky CUDA fault of the backend's kernel,
:func:`parity.results.cuda_fault`; the worker is restarted).

:class:`InlineExecutor` calls it directly. :class:`ProcessExecutor` runs it in a
worker process per backend (``python -m parity.worker``), because CUDA faults are
sticky and some packages cannot share one ``sys.path``. A worker that dies (abort,
segfault, out of memory) yields a ``crash`` row, one that does not answer within the
per-case timeout a ``timeout`` row; the worker is restarted for the next case.
"""

from __future__ import annotations

import contextlib
import time
import traceback
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from . import backends
from .backends.base import Backend, Unsupported, lse_call, refusal_reason
from .case import Case, Inputs, make_inputs
from .grad import TENSORS, make_dout
from .graphs import run_graph_check
from .invariance import run_invariance
from .maskcheck import DEFAULT_MAX_PASSES, probe_call_case, run_gqa_probe, run_mask_probe, run_read_probe
from .memory import (
    LARGE_ROW_BYTES,
    MIB,
    card_bytes,
    card_refusal,
    estimate,
    free_bytes,
    host_memory,
    host_need,
    host_refusal,
    is_oom,
    oom_detail,
    total_bytes,
)
from .process import ProcessExecutor, env_worker_paths, parse_worker_paths, recv, send, worker_paths  # noqa: F401 - their old home
from .results import CUDA_FAULT_WORDS, Outcome, clip, cuda_fault
from .shard import config_key
from .shared_inputs import InputFiles, shared_or_drawn
from .verdict import POISON


class BackendFault(Exception):
    """The backend broke the interface (wrong shape, dtype, device)."""


def _sync(device: str) -> None:
    if device == "cuda" and torch.cuda.is_available():
        torch.cuda.synchronize()


def _call(
    backend: Backend, case: Case, inputs, count_unwritten: bool = True, with_lse: bool = False
) -> tuple[torch.Tensor, int | None, torch.Tensor | None]:
    """One checked call: returns the output, its count of unwritten (poisoned) elements (``None`` when
    the backend returned another buffer, or ``count_unwritten=False``) and, with ``with_lse`` for a
    backend that returns it (:func:`parity.backends.base.lse_call`), its checked LSE ``(total_q, hq)``."""
    out = torch.full(inputs.q.shape, POISON, dtype=case.torch_dtype, device=inputs.q.device)  # (total_q, hq, d)
    call = lse_call(backend) if with_lse and not backend.lse_unsupported(case) else None
    lse = None
    if call is not None:
        got = call(case, inputs, out)
        if not (isinstance(got, tuple) and len(got) == 2):
            raise BackendFault(f"run_lse() returned {type(got).__name__}, expected a tuple (out, lse)")
        res, lse = got
        _check_lse(lse, inputs)
    else:
        res = backend.run(case, inputs, out)
    if not isinstance(res, torch.Tensor):
        raise BackendFault(f"run() returned {type(res).__name__}, expected a torch.Tensor")
    if tuple(res.shape) != tuple(inputs.q.shape):
        raise BackendFault(f"run() returned shape {tuple(res.shape)}, expected {tuple(inputs.q.shape)} (total_q, hq, d)")
    if res.dtype != case.torch_dtype:
        raise BackendFault(f"run() returned dtype {res.dtype}, expected {case.torch_dtype}")
    if res.device.type != inputs.q.device.type:
        raise BackendFault(f"run() returned a tensor on {res.device}, expected {inputs.q.device}")
    same = res.data_ptr() == out.data_ptr()
    unwritten = int((res == POISON).sum()) if same and count_unwritten else None
    return res, unwritten, lse


def _check_lse(lse: object, inputs: Inputs) -> None:
    want = tuple(inputs.q.shape[:2])
    if not isinstance(lse, torch.Tensor):
        raise BackendFault(f"run_lse() returned an LSE of type {type(lse).__name__}, expected a torch.Tensor")
    if tuple(lse.shape) != want:
        raise BackendFault(f"run_lse() returned an LSE of shape {tuple(lse.shape)}, expected {want} (total_q, hq)")
    if not lse.is_floating_point():
        raise BackendFault(f"run_lse() returned an LSE of dtype {lse.dtype}, expected float32")


def probe_runner(backend: Backend, case: Case) -> tuple[Callable[[Inputs], torch.Tensor], Callable[[], float]]:
    """The probes' way to call ``backend``, and a clock of the seconds spent inside its calls.

    A probe input carries its own case (a batched mask probe has a larger batch than
    ``case``); the backend is asked whether it accepts that case first. The probes call the backend
    the way the row's own call did (``run_lse`` where it returns its LSE, :func:`_call`): the probes
    check the kernel variant whose output is judged, and a compiling backend (flex, FA4's CuTe DSL)
    does not build a second variant per shape for them (flex on the CPU: 153 dynamo compiles for
    the quick profile's 195 cases instead of 76, its probes 20 s instead of 8).
    """
    spent = [0.0]

    def run(inp: Inputs) -> torch.Tensor:
        why = backend.unsupported_reason(inp.case) if inp.case is not case else None
        if why:
            raise Unsupported(why)
        t = time.perf_counter()
        try:
            return _call(backend, inp.case, inp, count_unwritten=False, with_lse=True)[0]  # the probes decode the output
        finally:
            _sync(backend.device)
            spent[0] += time.perf_counter() - t

    return run, lambda: spent[0]


#: The words of a sticky CUDA fault (:data:`parity.results.CUDA_FAULT_WORDS`; the old name).
CONTEXT_LOST_WORDS = CUDA_FAULT_WORDS


def context_lost(result: dict[str, Any]) -> bool:
    """Whether a failed ``result`` says the CUDA context is gone (a sticky CUDA fault, :func:`parity.results.cuda_fault`).

    ==========================================================  ========  =====
    detail                                                      status    lost
    ==========================================================  ========  =====
    ``AcceleratorError ...: CUDA error: misaligned address``     crash     yes
    ``RuntimeError ...: CUDA error: an illegal memory access``   crash     yes
    the same words                                              error     yes (a result made before faults were crashes)
    ``out of memory: CUDA out of memory``                        error     no
    ``RuntimeError ...: head_dim must be 64``                    error     no
    ==========================================================  ========  =====
    """
    if result.get("status") not in (Outcome.ERROR, Outcome.CRASH):
        # the backward and the engine checks of an answered forward can lose the context too
        grad, checks = result.get("grad"), [result.get(k) for k in ("invariance", "graph")]
        lost = any(isinstance(c, dict) and (c.get("lost") or cuda_fault(c.get("detail"))) for c in checks)
        return lost or (isinstance(grad, dict) and context_lost(grad))
    return cuda_fault(result.get("detail"))


def workspace_hint(backend: Backend, case: Case, probes: bool = True, max_passes: int = DEFAULT_MAX_PASSES) -> int:
    """``backend.workspace_bytes`` for ``case`` or, with ``probes``, its batched mask probe's case
    (that of the probe that runs, :func:`parity.maskcheck.probe_call_case`) if larger; 0 where it has none or it
    raises. A summary figure for callers: :func:`parity.memory.estimate` takes the backend itself (its hints per stage)."""
    hint = getattr(backend, "workspace_bytes", None)
    calls = [case, probe_call_case(case, max_passes)] if probes else [case]
    try:
        return max(int(hint(c) or 0) for c in calls) if hint else 0
    except Exception:  # noqa: BLE001 - a hint only
        return 0


#: The kernel keys (:func:`kernel_key`) each backend object of this process has run: the first call of a
#: key is where a compiling backend builds its kernel (``first_config`` in the timing).
_SEEN_CONFIGS: weakref.WeakKeyDictionary[Any, set[tuple[Any, ...]]] = weakref.WeakKeyDictionary()


def kernel_key(backend: Any, case: Case) -> tuple[Any, ...]:
    """What ``backend`` builds a kernel for: its :meth:`~parity.backends.base.Backend.compile_key`, else the
    case's configuration (:func:`parity.shard.config_key`; also for an object without the method, or whose
    method fails)."""
    try:
        key = backend.compile_key(case)
    except Exception:  # noqa: BLE001 - a plugin without it (or a broken one): the configuration
        key = None
    return ("config", *config_key(case)) if key is None else ("kernel", *key)


def first_of_config(backend: Backend, case: Case) -> bool:
    """Whether ``case`` is the first of its kernel key that ``backend`` runs in this process (noted)."""
    try:
        seen = _SEEN_CONFIGS.setdefault(backend, set())
    except TypeError:  # a backend that cannot be weakly referenced or hashed: every row counts as a first
        return True
    key = kernel_key(backend, case)
    if key in seen:
        return False
    seen.add(key)
    return True


def _built(backend: Backend) -> int | None:
    """The library's count of kernels built in this process (:meth:`Backend.kernels_built`), None if unknown."""
    try:
        n = backend.kernels_built() if hasattr(backend, "kernels_built") else None
        return None if n is None else int(n)
    except Exception:  # noqa: BLE001 - a count is evidence, never a reason for a row to fail
        return None


def execute(
    backend: Backend,
    case: Case,
    probes: bool = True,
    max_passes: int = DEFAULT_MAX_PASSES,
    repeats: int = 1,
    grad: bool = False,
    checks: tuple[str, ...] = (),
    shared: InputFiles | None = None,
) -> dict[str, Any]:
    """Run ``case`` on ``backend``; see the module docstring. ``shared``: the case's inputs as the sweep drew them once
    (:mod:`parity.shared_inputs`; else, or where their files are gone, drawn here: the same bytes). ``grad``: then the backward too
    (``result["grad"]``, :func:`run_grad`), after the forward and its probes. ``checks``: the engine checks
    (:data:`parity.results.ENGINE_CHECKS`) after the probes: ``result["invariance"]`` / ``result["graph"]``. A CUDA row whose estimate
    exceeds what its card can hold is ``unsupported`` before its inputs are made (:func:`parity.memory.card_refusal`,
    after the backend's own refusal: the one place ``parity run``, the API and the pytest plugin all pass); so is a
    row whose worker's host bytes (a CPU backend's stages, or any worker's draw of its inputs) the machine cannot
    hold (:func:`parity.memory.host_refusal`; the harness's own parts are its caller's to ask).
    On CUDA the row's peak device memory (``peak_mem_mb``) is measured from a reset of the allocator's peak, an
    out-of-memory error says what the row was estimated to need and what was free before it, and a large row's
    cached blocks are released afterwards (``torch.cuda.empty_cache``), so the lanes' workers share the card."""
    t_start = time.perf_counter()
    cuda = backend.device == "cuda" and torch.cuda.is_available()
    est = estimate(case, probes, max_passes, backend=backend)
    too_big = card_refusal(est, card_bytes(), total_bytes()) if backend.device == "cuda" else None
    too_big = too_big or host_refusal(host_need(est, backend.device != "cuda", None), host_memory())
    free = free_bytes() if cuda else None
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    built = _built(backend)
    result = _execute(backend, case, probes, max_passes, repeats, grad, too_big, checks, shared)
    after = _built(backend) if built is not None else None
    if after is not None and built is not None and isinstance(result.get("timing"), dict):
        result["timing"]["kernels_built"] = after - built  # what this row built (the library's own count)
    if result.pop("oom", None):
        result["detail"] = oom_detail(result.pop("exc_text", "out of memory"), est, free)
        result["oom"] = True
    if cuda:
        result["peak_mem_mb"] = torch.cuda.max_memory_allocated() / MIB
        if est.worker_bytes >= LARGE_ROW_BYTES or result.get("oom"):
            torch.cuda.empty_cache()
    if isinstance(result.get("timing"), dict):  # the whole row in this process (the sweep's wait minus it: IPC)
        result["timing"]["worker_s"] = time.perf_counter() - t_start
    return result


def _execute(
    backend: Backend,
    case: Case,
    probes: bool,
    max_passes: int,
    repeats: int,
    grad: bool = False,
    too_big: str | None = None,
    checks: tuple[str, ...] = (),
    shared: InputFiles | None = None,
) -> dict[str, Any]:
    device = backend.device
    try:
        reason = refusal_reason(backend, case) or too_big  # the backend's own words first, then the card's
    except Exception as exc:  # noqa: BLE001
        return {"status": "error", "detail": f"unsupported_reason() raised {type(exc).__name__}: {exc}"}
    if reason:
        return {"status": "unsupported", "detail": reason}
    try:
        t_gen = time.perf_counter()
        inputs, from_files = shared_or_drawn(case, device, shared, make_inputs)
        gen_s = time.perf_counter() - t_gen
        cuda = device == "cuda" and torch.cuda.is_available()
        first = first_of_config(backend, case)
        t_call = time.perf_counter()
        res, unwritten, lse, times = _timed_calls(backend, case, inputs, repeats, cuda)
        _sync(device)
        call_s = time.perf_counter() - t_call
        t_out = time.perf_counter()
        output = res.detach().to("cpu")  # (total_q, hq, d), the case's dtype (the judge widens it)
        result: dict[str, Any] = {
            "status": "ok",
            "output": output,
            "unwritten": unwritten,
            "time_ms": sorted(times)[len(times) // 2],
        }
        if lse is not None:  # (total_q, hq), natural log; empty rows per the library's convention
            result["lse"] = lse.detach().to("cpu", torch.float32)
            result["lse_empty"] = tuple(getattr(backend, "lse_empty", ("-inf",)))
        # where the worker's time went (the sweep sums these into OUT/timing.json): call_s / probe_call_s inside
        # backend calls, gen_s and probe_s - probe_call_s the harness's own work; per probe in _run_probes
        timing: dict[str, Any] = {"gen_s": gen_s, "call_s": call_s, "first_config": first, "out_s": time.perf_counter() - t_out}
        timing["inputs_shared"] = from_files  # mapped from the sweep's draw (False: drawn here)
        if (key := kernel_key(backend, case))[0] == "kernel":  # a compiling backend's own key: timing.json counts them
            timing["kernel_key"] = repr(key[1:])
        no_probes = {"probe_s": 0.0, "probe_call_s": 0.0}
        timing.update(_run_probes(backend, case, device, inputs, res, result, max_passes) if probes else no_probes)
        timing.update(_run_checks(backend, case, inputs, result, checks))
        if first and (cuda or float(getattr(backend, "cost_hint", 1.0)) > 1.0):
            calls = max(1, repeats) + (1 if cuda and repeats > 1 else 0)
            timing["compile_s"] = _compile_seconds(backend, case, inputs, call_s, calls)
        if grad:
            t_grad = time.perf_counter()
            result["grad"] = run_grad(backend, case, inputs)
            timing["grad_s"] = time.perf_counter() - t_grad
        result["timing"] = timing
        return result
    except Unsupported as exc:
        return _refusal_or_fault(exc, device)
    except BackendFault as exc:
        return {"status": "error", "detail": f"interface: {exc}"}
    except Exception as exc:  # noqa: BLE001 - a backend's fault costs its own row only
        if is_oom(exc):
            text = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
            return {"status": "error", "detail": f"out of memory: {text}", "oom": True, "exc_text": text}
        return _fault_or_error(exc)


def _timed_calls(
    backend: Backend, case: Case, inputs: Inputs, repeats: int, cuda: bool
) -> tuple[torch.Tensor, int | None, torch.Tensor | None, list[float]]:
    """The row's ``repeats`` timed calls (on CUDA with more than one, a warm-up first: compilation, handles,
    autotuning): the last call's output, unwritten count and LSE (:func:`_call`), and each call's milliseconds."""
    times: list[float] = []
    res, unwritten, lse = None, None, None
    if cuda and repeats > 1:
        res, unwritten, lse = _call(backend, case, inputs, with_lse=True)  # warm-up
    for _ in range(max(1, repeats)):
        if cuda:  # CUDA events: the device time of the call (poisoning the buffer included)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            res, unwritten, lse = _call(backend, case, inputs, with_lse=True)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            res, unwritten, lse = _call(backend, case, inputs, with_lse=True)
            times.append((time.perf_counter() - t0) * 1e3)
    assert res is not None
    return res, unwritten, lse, times


def _compile_seconds(backend: Backend, case: Case, inputs: Inputs, call_s: float, calls: int) -> float:
    """First-use compilation in the first row of a configuration: its ``calls`` calls took ``call_s``;
    one more call now (warm, after the row is done: its output is not used) says what a call costs
    without compiling. 0.0 where that call fails."""
    try:
        t0 = time.perf_counter()
        _call(backend, case, inputs, count_unwritten=False, with_lse=True)  # the row's own variant: already built
        _sync(backend.device)
        warm = time.perf_counter() - t0
    except Exception:  # noqa: BLE001 - a timing only; the row was judged on its own calls
        return 0.0
    return max(0.0, call_s - calls * warm)


def _run_probes(
    backend: Backend, case: Case, device: str, inputs: Inputs, res: torch.Tensor, result: dict[str, Any], max_passes: int
) -> dict[str, float]:
    """The mask, GQA and read probes into ``result``; their seconds: in all (``probe_s``), inside backend
    calls (``probe_call_s``), and per probe (``mask_s`` ``mask_call_s`` ``mask_calls``, ``gqa_*``, ``read_*``)."""
    run, spent = probe_runner(backend, case)
    calls = [0]

    def counted(inp: Inputs) -> torch.Tensor:
        calls[0] += 1
        return run(inp)

    out: dict[str, float] = {}
    t_probe = time.perf_counter()
    paged = bool(getattr(backend, "supports_paged", False))
    padded = bool(backend.padded_kv(case)) if hasattr(backend, "padded_kv") else False
    probes = (
        ("mask", lambda: run_mask_probe(case, counted, device, max_passes, base=inputs)),
        ("gqa", lambda: run_gqa_probe(case, counted, device, base=inputs)),
        ("reads", lambda: run_read_probe(case, counted, device, inputs, res, paged, padded)),
    )
    for name, probe in probes:
        t0, c0, n0 = time.perf_counter(), spent(), calls[0]
        result[name] = probe().to_dict()
        stage = "read" if name == "reads" else name
        out[f"{stage}_s"], out[f"{stage}_call_s"], out[f"{stage}_calls"] = time.perf_counter() - t0, spent() - c0, calls[0] - n0
    out["probe_s"], out["probe_call_s"] = time.perf_counter() - t_probe, spent()
    return out


def _run_checks(backend: Backend, case: Case, inputs: Inputs, result: dict[str, Any], checks: tuple[str, ...]) -> dict[str, float]:
    """The engine checks asked for, into ``result`` (``invariance``, ``graph``); their seconds (``invariance_s``,
    ``graph_s``). Batch invariance compares with the row's own output as it came back (``result["output"]``)
    and calls the backend as the probes do (:func:`probe_runner`); the graph check captures ``graph_call``."""
    out: dict[str, float] = {}
    if "invariance" in checks:
        t0 = time.perf_counter()
        run, _ = probe_runner(backend, case)
        result["invariance"] = run_invariance(inputs, result["output"], run)
        out["invariance_s"] = time.perf_counter() - t0
    if "graph" in checks:
        t0 = time.perf_counter()
        result["graph"] = run_graph_check(backend, case, inputs)
        out["graph_s"] = time.perf_counter() - t0
    return out


def _check_grads(grads: Any, inputs: Inputs) -> tuple[torch.Tensor, ...]:
    """``backward``'s answer checked against the interface: three tensors shaped, typed and placed as q, k, v, and
    with learned sinks optionally a fourth, ``dsinks``, as the sinks ``(hq,)``. ``None`` for ``dq``, ``dk`` or
    ``dv`` (an op's backward that gives no gradient for an input the output does not depend on) is 0 of that
    input's shape, dtype and device, judged like any other; a ``None`` ``dsinks`` is a backward that returns none
    (``dsinks not checked``)."""
    arity = (3, 4) if inputs.sinks is not None else (3,)
    if isinstance(grads, (tuple, list)) and len(grads) in arity:
        grads = [torch.zeros_like(x) if g is None else g for g, x in zip(grads[:3], (inputs.q, inputs.k, inputs.v))] + [
            g for g in grads[3:] if g is not None
        ]
    if not isinstance(grads, (tuple, list)) or len(grads) not in arity or not all(isinstance(g, torch.Tensor) for g in grads):
        want = "(dq, dk, dv[, dsinks])" if inputs.sinks is not None else "(dq, dk, dv)"
        raise BackendFault(f"backward() returned {type(grads).__name__}, expected a tuple {want} of tensors")
    for name, g, x in zip((*TENSORS, "dsinks"), grads, (inputs.q, inputs.k, inputs.v, inputs.sinks)):
        assert x is not None  # a fourth tensor only with sinks (arity above)
        if tuple(g.shape) != tuple(x.shape) or g.dtype != x.dtype or g.device.type != x.device.type:
            raise BackendFault(
                f"backward() returned {name} {tuple(g.shape)} {g.dtype} on {g.device.type}, "
                f"expected {tuple(x.shape)} {x.dtype} on {x.device.type}"
            )
    return tuple(grads)


def run_grad(backend: Backend, case: Case, inputs: Inputs) -> dict[str, Any]:
    """The backward of ``backend`` on ``case`` against the seeded upstream gradient (:func:`parity.grad.make_dout`):
    ``{"status": "ok", "dq": ..., "dk": ..., "dv": ...}`` (CPU tensors), or ``unsupported`` / ``error`` with a
    ``detail``. Never raises for the backend's fault."""
    try:
        reason = backend.grad_unsupported_reason(case)
    except Exception as exc:  # noqa: BLE001
        return {"status": "error", "detail": f"grad_unsupported_reason() raised {type(exc).__name__}: {exc}"}
    if reason:
        return {"status": "unsupported", "detail": reason}
    dout = make_dout(case, inputs.q.device)  # (total_q, hq, d)
    try:
        grads = _check_grads(backend.backward(case, inputs, dout), inputs)
        _sync(backend.device)
    except Unsupported as exc:
        return _refusal_or_fault(exc, backend.device)
    except BackendFault as exc:
        return {"status": "error", "detail": f"interface: {exc}"}
    except Exception as exc:  # noqa: BLE001 - the backward's fault costs its own check only
        if is_oom(exc):
            return {"status": "error", "detail": f"out of memory: {(str(exc).strip().splitlines() or [''])[0][:300]}"}
        return _generic_error(exc)
    return {"status": "ok", **{name: g.detach().to("cpu") for name, g in zip((*TENSORS, "dsinks"), grads)}}


def _refusal_or_fault(exc: Unsupported, device: str) -> dict[str, Any]:
    """A refusal raised after the backend launched work can hide a fault of that work (CUDA reports
    kernel errors late): FlashInfer's decode faulted on head dim 20 (misaligned address), then its
    merge step refused the head dim, and the next row of the worker died making its inputs
    (lab/runs/h200-2026-12-05/); on the H100 (2026-12-06) FlashInfer rows at head dim 96 ended in an
    illegal memory access with "MergeStates ... Unsupported head_dim: 96" raised after it. So the device is
    synchronized first:

    ================================  ====================================================  ============
    the device after the refusal       the row                                               its worker
    ================================  ====================================================  ============
    healthy                            ``unsupported``: the refusal's words                  kept
    a sticky CUDA fault pending        ``crash``: the fault, then the refusal's words        restarted
    another error pending              ``error``: that error, then the refusal's words       kept
    ================================  ====================================================  ============
    """
    try:
        _sync(device)
    except Exception as fault:  # noqa: BLE001
        err = _fault_or_error(fault)
        err["detail"] += f" (raised before the backend's refusal: {str(exc)[:200]})"
        return err
    return {"status": "unsupported", "detail": str(exc) or type(exc).__name__}


def _fault_or_error(exc: BaseException) -> dict[str, Any]:
    """The row of an exception the backend raised: a ``crash`` of the backend where it is a sticky CUDA
    fault of its kernel (:func:`parity.results.cuda_fault`: the worker is restarted), else an ``error``."""
    err = _generic_error(exc)
    if cuda_fault(err["detail"]):
        err["status"] = "crash"
    return err


def _generic_error(exc: BaseException) -> dict[str, Any]:
    tb = traceback.extract_tb(exc.__traceback__)
    where = f" at {Path(tb[-1].filename).name}:{tb[-1].lineno}" if tb else ""
    return {"status": "error", "detail": f"{type(exc).__name__}{where}: {clip(error_words(exc))}"}


def error_words(exc: BaseException) -> str:
    """What ``exc`` says, for a row's detail: its first line, and its last where it has several (a ninja build's
    failure, a compiler's trace: the reason is often the last line); :func:`parity.results.clip` then keeps both ends."""
    lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
    return " | ".join(lines[:1] + lines[1:][-1:])


def backend_info(backend_name: str) -> dict[str, Any]:
    """Resolve ``backend_name`` and ask it whether it can run here."""
    backend = backends.get(backend_name)
    try:
        reason = backend.unavailable_reason()
    except Exception as exc:  # noqa: BLE001
        reason = f"unavailable_reason() raised {type(exc).__name__}: {exc}"
    version = ""
    if reason is None:
        try:
            version = str(backend.version())
        except Exception as exc:  # noqa: BLE001
            version = f"unknown ({type(exc).__name__})"
    return {
        "spec": backend_name,
        "name": getattr(backend, "name", backend_name),
        "device": getattr(backend, "device", "cpu"),
        "description": getattr(backend, "description", ""),
        "unavailable": reason,
        "version": version,
        "first_use_compile": bool(getattr(backend, "first_use_compile", False)),
        "variant_of": getattr(backend, "variant_of", None),  # its base backend (a split-KV variant): whose worker path it takes
    }


class InlineExecutor:
    """Runs the backend in this process (fast; a hard crash takes the run down)."""

    def __init__(
        self,
        backend: str,
        probes: bool = True,
        max_passes: int = DEFAULT_MAX_PASSES,
        repeats: int = 1,
        grad: bool = False,
        checks: tuple[str, ...] = (),
    ):
        self.backend_name = backend
        self.probes, self.max_passes, self.repeats, self.grad, self.checks = probes, max_passes, repeats, grad, tuple(checks)
        self.backend = backends.get(backend)
        self.info = backend_info(backend)
        self.halted = False  # :meth:`halt`

    def run(self, case: Case, inputs: InputFiles | None = None) -> dict[str, Any]:
        with contextlib.suppress(AttributeError, TypeError):  # a plugin object that takes no new attribute: no stop
            self.backend.stop = self.stopped  # its own long host work (the reference's blocks) asks it (:meth:`halt`)
        return execute(self.backend, case, self.probes, self.max_passes, self.repeats, self.grad, self.checks, inputs)

    def stopped(self) -> bool:
        """Whether :meth:`halt` was called: a backend's ``stop`` (:attr:`parity.backends.base.Backend.stop`)."""
        return self.halted

    def submit(self, case: Case, inputs: InputFiles | None = None) -> dict[str, Any] | None:
        """Run ``case`` now (``inputs``: its shared draw, mapped afresh: the backend's writes stay in its copy)."""
        if self.halted:
            return {"status": "crash", "detail": "the run was interrupted"}
        self._result = self.run(case, inputs)  # in this process there is nothing to overlap
        return None

    def answered(self, timeout: float = 0.0) -> bool:
        """In this process the answer is in once :meth:`submit` returned."""
        return True

    def collect(self, timeout: float | None = None) -> dict[str, Any]:
        return self._result  # in this process nothing can be timed out

    def halt(self) -> None:
        """A run interrupted by a signal: no new case; the one running in this process finishes, unless its backend
        asks its ``stop`` (the ``reference`` backend does, before each block of rows: its row then ends in an error
        the sweep drops, as any row in flight at a stop)."""
        self.halted = True

    def close(self) -> None:
        pass
