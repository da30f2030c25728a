"""The first failure of each backend and kind shrunk (:func:`parity.shrink.shrink`) with the sweep's own
options: its executor (isolation, probes, worker path), budgets and reference device.

A backend's failures of different kinds are different findings (FA4 on the H100, 2026-12-05: a paged read
first, a backward error later; only the first was shrunk), so the first row of each kind is shrunk:

=============  ==============================================================
kind           a failing row whose reasons include (first match, in order)
=============  ==============================================================
``reads``      ``reads_outside_window``
``mask``       ``mask``, ``gqa``
``non-finite`` ``nan``, ``nan_masked_rows``, ``inf``
``values``     ``max_err``, ``mean_err``, ``unwritten``
``lse``        ``lse``
``backward``   a backward reason (``dq_err`` ... ``grad_error``) and none above
``engine``     an engine check's (``batch_invariance``, ``graph_replay``) and none above
=============  ==============================================================

A row that is not ``fail`` (``error``, ``crash``, ``timeout``) is of the kind of its verdict.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..case import Case
from ..expect import CHECK_REASONS, GRAD_REASONS
from ..judge import BaselineCache, judge
from ..results import Outcome
from ..runfolder import SHRUNK, open_jsonl
from ..shrink import Shrunk, budget_note, shrink, stop_note
from .lanes import make_executor
from .options import SweepOptions


def shrink_failures(
    failures: list[dict[str, Any]], options: SweepOptions, out: Path, stop: Callable[[], bool] | None = None
) -> list[dict[str, Any]]:
    """Shrink the first of ``failures`` of each backend and :func:`failure_kind` with at most ``options.shrink_calls``
    backend calls; append each to ``OUT/shrunk.jsonl`` (rewritten unless ``options.resume``) and return them:
    ``{backend, from, case, verdict, reasons, calls, repro, budget_exhausted, note}`` (``note``: "stopped at the
    budget of N calls ..." when the budget ended the search, "stopped by a signal ..." when ``stop``, asked before
    each call, said so: that search is written as far as it got and no other starts) plus ``row`` (the smallest
    failing case's row), ``original`` and ``small`` (the failing case and the smallest one)."""
    firsts: dict[tuple[str, str], dict[str, Any]] = {}
    for r in failures:
        firsts.setdefault((r["backend"], failure_kind(r)), r)
    baselines = BaselineCache(options.reference_device)
    done = []
    with open_jsonl(out, SHRUNK, append=options.resume) as fh:
        for (backend, _), row in firsts.items():
            if stop is not None and stop():
                break
            case = Case.from_json(row["case_json"])
            found = _shrink_one(backend, case, row, options, baselines, stop)
            small, small_row, calls = found
            rec = {
                "backend": backend,
                "from": row["case_id"],
                "case": small.to_dict(),
                "verdict": small_row["verdict"],
                "reasons": small_row.get("reasons", ""),
                "calls": calls,
                "repro": small_row.get("repro") or small.repro(backend),  # the judged row's: with --grad where it ran the backward
                "budget_exhausted": found.exhausted,
                "note": stop_note(calls) if found.stopped else budget_note(calls) if found.exhausted else "",
            }
            fh.write(json.dumps(rec) + "\n")
            done.append({**rec, "row": small_row, "original": case, "small": small})
    return done


#: The kinds of a failing row, in the order they are tried (the module docstring's table).
KINDS = (
    ("reads", ("reads_outside_window",)),
    ("mask", ("mask", "gqa")),
    ("non-finite", ("nan", "nan_masked_rows", "inf")),
    ("values", ("max_err", "mean_err", "unwritten")),
    ("lse", ("lse",)),
    ("backward", GRAD_REASONS),
    ("engine", CHECK_REASONS),
)


def failure_kind(row: dict[str, Any]) -> str:
    """Which kind of failure ``row`` shows (the module docstring's table)."""
    verdict = str(row.get("raw_verdict") or row["verdict"])  # an `expected` row's own verdict
    reasons = set(str(row.get("reasons", "")).split())
    if verdict != Outcome.FAIL or not reasons:
        return verdict
    return next((kind for kind, names in KINDS if reasons & set(names)), "other")


def _shrink_one(
    backend: str, case: Case, row: dict[str, Any], options: SweepOptions, baselines: BaselineCache, stop: Callable[[], bool] | None
) -> Shrunk:
    # the sweep's executor for it (isolation, probes, worker path), timing each call once: only verdicts count here
    ex = make_executor(backend, dataclasses.replace(options, repeats=1))
    try:

        def judge_one(c: Case) -> dict[str, Any]:
            return judge(c, backend, ex.info, ex.run(c), baselines, options.budgets).row

        return shrink(case, row, judge_one, options.shrink_calls, stop)
    finally:
        ex.close()
