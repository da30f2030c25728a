"""Where the sweep's judge spends its time on model-sized rows, on the CPU.

Builds models-profile cases (:mod:`parity.models`, one model's real calls), computes each case's reference and
baseline once (:class:`parity.judge.BaselineCache`), then times :func:`parity.judge.judge` on a cached baseline and
its parts: the comparison (:func:`parity.verdict.compare`; ``*_masked``: the same without its fast path, every chunk
through the masks as before 2026-12-07, timed in turn with it), the LSE columns, the measures, the row's case columns,
:func:`parity.judge.apply_expectations` with the shipped known divergences and the case features the entries read.
The output judged is the reference rounded to the dtype (an honest answer: every element compared, the same work as
any passing row). Medians of ``--repeat`` runs, in milliseconds.

The last table is the sweep's lock: a cached baseline asked for while another lane computes another case's
reference (what a lane judging a row meets while 13 others draw inputs and compute references).

On the CPU (the default) the host-to-device copy of the output is not measured: in a GPU sweep the comparison runs
on the baseline's device and the backend's output (on the CPU, from the worker) is copied to it chunk by chunk;
``--device cuda`` measures that (the reference and baseline on the GPU, the output on the CPU as a worker sends
it). Neither measures the lanes' GIL contention (``parity run``'s timing.json ``judge`` / ``judge_wait`` stages).

The default keeps the real shapes (query rows, heads, head dim) of the model's calls but computes the 32k prefill's
reference with a 256-token window (``--prefill-window``): the judge's work depends on the output's size, not on the
window; the real window's float64 reference takes minutes on two CPU cores.

    python -m benchmarks.judge_cost [--model mistral-7b-v0.1] [--calls prefill-32k,...] [--repeat 5] [--device cuda]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import os
import platform
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch

import parity.verdict as verdict
from parity import Window, models
from parity.case import Case
from parity.expect import case_features, load_checked
from parity.judge import BaselineCache, _head, _lse_columns, _measures, apply_expectations, compare_safely, judge
from parity.verdict import BUDGETS

DEFAULT_CALLS = "prefill-32k,paged32-chunk,paged256-mixed,decode-1k-32k"
BACKENDS = ("fa4-cuda", "flashinfer-paged-cuda", "vllm-fa2-cuda")


def _ms(fn: Callable[[], Any], repeat: int) -> float:
    """Median milliseconds of ``repeat`` calls of ``fn``."""
    return _interleaved([fn], repeat)[0]


def _interleaved(fns: list[Callable[[], Any]], repeat: int) -> list[float]:
    """Median milliseconds of ``repeat`` calls of each of ``fns``, called in turn (both see the same load)."""
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeat):
        for fn, acc in zip(fns, times):
            t0 = time.perf_counter()
            fn()
            acc.append((time.perf_counter() - t0) * 1e3)
    return [statistics.median(acc) for acc in times]


@contextlib.contextmanager
def _masked() -> Iterator[None]:
    """The comparison without its fast path (every chunk through the masks: the code before 2026-12-07)."""
    fast = verdict._tally_written_finite
    verdict._tally_written_finite = lambda *a: False  # type: ignore[assignment]
    try:
        yield
    finally:
        verdict._tally_written_finite = fast


def _both(fn: Callable[[], Any], repeat: int) -> list[float]:
    """:func:`_interleaved` of ``fn`` and of ``fn`` under :func:`_masked`."""

    def masked() -> None:
        with _masked():
            fn()

    return _interleaved([fn, masked], repeat)


def _cases(model: str, calls: list[str], prefill_window: int | None) -> list[Case]:
    m = models.table_model(model)
    chosen = [c for c in models.CALLS if c.name in calls]
    missing = set(calls) - {c.name for c in chosen}
    if missing:
        raise SystemExit(f"unknown call(s) {sorted(missing)}; known: {', '.join(c.name for c in models.CALLS)}")
    cases = models.model_cases(m, calls=chosen)[: len(chosen)]  # the first layer kind's
    if prefill_window:
        cases = [dataclasses.replace(c, window=Window.tokens(prefill_window)) if c.q_lens == (32768,) else c for c in cases]
    return cases


def _result(case: Case, base: Any) -> dict[str, Any]:
    """A worker's answer to ``case``: the reference rounded to the dtype, its LSE in float32, probes ok."""
    out = base.ref.to(case.torch_dtype).cpu()  # (total_q, hq, d), on the CPU as a worker sends it
    lse = base.ref_lse.float().cpu()  # (total_q, hq)
    probe = {"status": "ok", "detail": "band as specified", "probe": "full"}
    return {
        "status": "ok",
        "output": out,
        "unwritten": 0,
        "lse": lse,
        "lse_empty": ("-inf",),
        "mask": probe,
        "gqa": probe,
        "reads": probe,
        "time_ms": 1.0,
    }


def _parts(case: Case, cache: BaselineCache, repeat: int) -> dict[str, float]:
    base = cache.get(case)
    res = _result(case, base)
    budgets, exp = BUDGETS, load_checked(None)
    budget = budgets[case.dtype]
    cmp = compare_safely(case, res["output"], base, budget, 0)
    judged = judge(case, BACKENDS[0], {}, res, cache, budgets)
    with _masked():
        assert judge(case, BACKENDS[0], {}, res, cache, budgets).row == judged.row  # the same columns either way
    judge_ms, judge_masked = _both(lambda: judge(case, BACKENDS[0], {}, res, cache, budgets), repeat)
    compare_ms, compare_masked = _both(lambda: compare_safely(case, res["output"], base, budget, 0), repeat)
    return {
        "judge": judge_ms,
        "judge_masked": judge_masked,
        "compare": compare_ms,
        "compare_masked": compare_masked,
        "lse_columns": _ms(lambda: _lse_columns(case, res, base, budget), repeat),
        "measures": _ms(lambda: _measures(cmp), repeat),
        "case_columns": _ms(lambda: (_head(case, BACKENDS[0], {}), case.summary()), repeat),
        "expectations": _ms(lambda: [apply_expectations(judged, exp, "2.8.3", case) for b in BACKENDS], repeat) / len(BACKENDS),
        "case_features": _ms(lambda: case_features(case), repeat),
    }


def _lock_wait(cache: BaselineCache, cached: Case, other: Case) -> tuple[float, float]:
    """Seconds a cached baseline's ``get`` waited while another thread computed ``other``'s, and that compute's."""
    cache.get(cached)
    started = threading.Event()
    spent: list[float] = []

    def compute() -> None:
        started.set()
        t0 = time.perf_counter()
        cache.ensure(other)
        spent.append(time.perf_counter() - t0)

    th = threading.Thread(target=compute)
    th.start()
    started.wait()
    time.sleep(0.05)  # the other thread holds the computation by now
    t0 = time.perf_counter()
    cache.get(cached)
    waited = time.perf_counter() - t0
    th.join()
    return waited, spent[0]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="mistral-7b-v0.1")
    p.add_argument("--calls", default=DEFAULT_CALLS, help=f"comma list of parity.models.CALLS names (default {DEFAULT_CALLS})")
    p.add_argument("--prefill-window", type=int, default=256, help="the 32k prefill's window for its reference (0: the model's)")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--device", default="cpu", help="where the reference, the baseline and the comparison run (cpu, cuda)")
    a = p.parse_args()
    try:
        if torch.device(a.device).type == "cuda" and not torch.cuda.is_available():
            p.error(f"--device {a.device}: no CUDA device here")
    except RuntimeError:
        p.error(f"--device {a.device!r}: not a device; expected cpu, cuda or cuda:N")
    cases = _cases(a.model, a.calls.split(","), a.prefill_window or None)
    print(f"judge_cost: {datetime.datetime.now().isoformat(timespec='minutes')}, {platform.node()} {platform.machine()}, ", end="")
    where = torch.cuda.get_device_name() if a.device.startswith("cuda") else "CPU"
    load = f", load average {os.getloadavg()[0]:.1f}" if hasattr(os, "getloadavg") else ""
    print(f"{torch.get_num_threads()} threads{load}, torch {torch.__version__}, {where}; medians of {a.repeat}, ms")
    cache = BaselineCache(a.device, max_bytes=16 << 30)
    rows = []
    for case in cases:
        t0 = time.perf_counter()
        cache.get(case)
        ref_s = time.perf_counter() - t0
        rows.append((case, ref_s, _parts(case, cache, a.repeat)))
    names = list(rows[0][2])
    print(f"{'case':<62}{'ref s':>7}" + "".join(f"{n:>16}" for n in names))
    for case, ref_s, parts in rows:
        label = case.summary().replace(f" [{case.model}/{case.layer}]", "")[:60]
        print(f"{label:<62}{ref_s:>7.1f}" + "".join(f"{parts[n]:>16.1f}" for n in names))
    small = min(cases, key=lambda c: sum(c.q_lens))
    other = max((c for c in cases if c is not small), key=lambda c: sum(c.q_lens) * min(max(c.k_lens), 4096), default=None)
    if other is not None:
        cache = BaselineCache(a.device, max_bytes=16 << 30)
        waited, spent = _lock_wait(cache, small, other)
        print(f"cached baseline of {small.summary()[:40]}... asked while another thread computes {other.summary()[:40]}...:")
        print(f"  waited {waited * 1e3:.1f} ms (that computation took {spent * 1e3:.0f} ms)")


if __name__ == "__main__":
    from parity.errors import script_main

    sys.exit(script_main(main, "judge_cost"))
