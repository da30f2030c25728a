"""CUDA graph replay (``parity run --graph-replay``): the backend's call captured once in a CUDA graph on
static buffers, replayed on new inputs of the same shape, equals the eager call on those inputs; as engines
run decode (vLLM, SGLang: a graph per batch size, new tokens copied into the same buffers each step).

=============  ================================================================================================
pass           what runs
=============  ================================================================================================
``replay``     :meth:`parity.backends.base.Backend.graph_call` on copies of the row's inputs, captured (after a
               warm-up on a side stream, :func:`capture`); new values (:func:`new_values`: seed
               ``+ REPLAY_SEED_OFFSET``, the row's layout) copied into those buffers; one replay
``padded``     where the backend's layout has one (:meth:`~parity.backends.base.Backend.graph_padded_call`): the
               same on a batch padded as an engine pads it to a captured size, :data:`PAD_SEQS` more sequences
               of 0 keys whose block-table slots are ``-1``; the real sequences' rows are compared
=============  ================================================================================================

Both are compared with the eager call (``run``) on the new inputs. The worker's result (:func:`run_graph_check`):
``ok`` (bit for bit), ``differs`` with the largest difference (the judge calls it ``close`` within the row's
error budget, a nondeterministic kernel; ``mismatch`` beyond it, the row's reason ``graph_replay``),
``not_run`` with why (a CPU backend: "needs CUDA"; a backend that refuses capture, :attr:`no_graph`), or
``error`` with the words (a capture that failed: recorded, not a failure of the row, since a wrapper's own host
work can be what capture refused; a sticky CUDA fault sets ``lost``, and the worker is restarted).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch

from .backends.base import Backend, Unsupported
from .case import Case, Inputs, make_inputs
from .invariance import diff, exc_words
from .results import cuda_fault
from .verdict import POISON

#: Seed offset of the new inputs the graph is replayed on (same shapes, other values).
REPLAY_SEED_OFFSET = 6007
#: Sequences of 0 keys the padded pass appends.
PAD_SEQS = 1
#: The tensors of :class:`parity.case.Inputs` copied into the static buffers before a replay.
VALUE_TENSORS = ("q", "k", "v", "q_descale", "k_descale", "v_descale", "sinks")


def capture(fn: Callable[[], torch.Tensor]) -> Callable[[], torch.Tensor]:
    """``fn`` warmed up on a side stream, then captured once in a ``torch.cuda.CUDAGraph``; returns ``replay``,
    which replays the graph, waits for it, and returns the tensor ``fn`` returned at capture (the graph's own
    output buffer)."""
    cuda = torch.cuda
    cuda.synchronize()
    side = cuda.Stream()
    side.wait_stream(cuda.current_stream())
    with cuda.stream(side):
        fn()  # lazy initialisation, handles, a compiling backend's build: outside the graph
    cuda.current_stream().wait_stream(side)
    graph = cuda.CUDAGraph()
    with cuda.graph(graph):
        held = fn()

    def replay() -> torch.Tensor:
        graph.replay()
        cuda.synchronize()
        return held

    return replay


def graph_reason(backend: Backend, case: Case) -> str | None:
    """Why the check does not run for ``backend`` on ``case``; None when it does."""
    if getattr(backend, "device", "cpu") != "cuda":
        return "needs CUDA (a CPU backend)"
    if not torch.cuda.is_available():
        return "needs CUDA (no CUDA device here)"
    ask = getattr(backend, "graph_unsupported_reason", None)
    return ask(case) if ask is not None else None


def static_copy(inputs: Inputs) -> Inputs:
    """``inputs`` with every tensor copied: the buffers a graph reads (the row's own inputs stay as they are)."""
    fields = {f.name: getattr(inputs, f.name) for f in dataclasses.fields(inputs)}
    copies: dict[str, Any] = {k: v.clone() for k, v in fields.items() if isinstance(v, torch.Tensor)}
    return dataclasses.replace(inputs, **copies)


def new_values(case: Case, device: torch.device) -> Inputs:
    """The case's inputs drawn again with seed ``+ REPLAY_SEED_OFFSET`` (other values, same shapes), on the row's own
    ``case``: a layout drawn from ``case.seed`` (a paged cache's physical page order) stays the captured one, so
    the eager call reads the same pages the replay does and an honest replay is bit for bit equal."""
    drawn = make_inputs(dataclasses.replace(case, seed=case.seed + REPLAY_SEED_OFFSET), device)
    return dataclasses.replace(drawn, case=case)


def copy_values(static: Inputs, fresh: Inputs) -> None:
    """``fresh``'s values into ``static``'s buffers (same shapes), as an engine copies a step's tokens in."""
    for name in VALUE_TENSORS:
        dst, src = getattr(static, name), getattr(fresh, name)
        if dst is not None and src is not None:
            dst.copy_(src)


def _replay_diff(make: Callable[[Inputs], Any], inputs: Inputs, fresh: Inputs, eager: torch.Tensor) -> tuple[bool, float] | None:
    """One pass: the call ``make(static)`` returns captured, ``fresh`` copied in, replayed, against ``eager``;
    None where ``make`` gives no call."""
    static = static_copy(inputs)
    fn = make(static)
    if fn is None:
        return None
    out = torch.full(inputs.q.shape, POISON, dtype=inputs.case.torch_dtype, device=inputs.q.device)  # (total_q, hq, d)
    replay = capture(lambda: fn(out))
    copy_values(static, fresh)
    got = replay()
    return diff(got.detach(), eager)


def run_graph_check(backend: Backend, case: Case, inputs: Inputs) -> dict[str, Any]:
    """The check for one row (the module docstring's table); never raises for the backend."""
    reason = graph_reason(backend, case)
    if reason:
        return {"status": "not_run", "detail": reason}
    try:
        fresh = new_values(case, inputs.q.device)
        poison = torch.full(inputs.q.shape, POISON, dtype=case.torch_dtype, device=inputs.q.device)  # (total_q, hq, d)
        eager = backend.run(case, fresh, poison).detach().clone()  # (total_q, hq, d)
        passes = {
            "replay": _replay_diff(lambda s: backend.graph_call(case, s), inputs, fresh, eager),
            f"padded (+{PAD_SEQS} sequence of 0 keys)": _replay_diff(
                lambda s: backend.graph_padded_call(case, s, PAD_SEQS), inputs, fresh, eager
            ),
        }
    except Unsupported as exc:
        return {"status": "not_run", "detail": f"capture refused: {str(exc)[:300]}"}
    except Exception as exc:  # noqa: BLE001 - the backend's (or its wrapper's) fault is recorded, never raised
        return _failed(exc)
    return _summary(passes)


def _summary(passes: dict[str, tuple[bool, float] | None]) -> dict[str, Any]:
    words, worst, same_all = [], 0.0, True
    for name, got in passes.items():
        if got is None:
            words.append(f"{name}: not run (no padded layout in this backend)")
            continue
        same, d = got
        same_all &= same
        worst = max(worst, d)
        words.append(f"{name}: {'bit for bit equal to eager' if same else f'max |replayed - eager| {d:.3g}'}")
    return {"status": "ok" if same_all else "differs", "detail": "; ".join(words), "max_diff": worst}


def _failed(exc: BaseException) -> dict[str, Any]:
    """An ``error``; ``lost`` where the CUDA context is unusable after it (a sticky fault, or a failed capture
    that left the device in error)."""
    out: dict[str, Any] = {"status": "error", "detail": exc_words(exc)}
    lost = cuda_fault(out["detail"])
    if not lost and torch.cuda.is_available():
        try:
            torch.cuda.synchronize()
        except Exception as fault:  # noqa: BLE001
            out["detail"] += f" (then: {exc_words(fault)})"
            lost = True
    if lost:
        out["lost"] = True
    return out
