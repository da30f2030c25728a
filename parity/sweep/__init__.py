"""The parity sweep: cases x backends -> one verdict row each, written as it is produced.

Verdicts:

===============  =============================================================
``pass``         ran; within the error budget; exact mask and GQA probes agree
``fail``         ran; at least one reason in ``reasons`` (see :mod:`parity.verdict`)
``unsupported``  the backend declined the case (``detail`` says why)
``unavailable``  the backend cannot run here at all (``detail`` says why)
``error``        the backend raised, or broke the interface
``crash``        the worker process died (signal, abort, out of memory)
``timeout``      no answer within the per-case timeout
``expected``     failed as a known divergence describes (:mod:`parity.expect`): counted
                 apart, never a pass and never a failure; ``raw_verdict`` keeps the verdict
                 above, ``expected_id`` the entry (or entries, ``a+b``: a joint explanation)
``unexpected-pass``  passed, but a strict known divergence covers it: a failure (the entry
                 is stale: fixed upstream?), ``expected_id`` names it
===============  =============================================================

Only ``pass`` is a pass; :data:`FAIL_VERDICTS` make a run exit 1. Rows are appended to ``results.csv`` and flushed one by one,
so an interrupted run keeps every finished row, and ``resume=True`` skips them.

Modules: :mod:`.options` (:class:`SweepOptions`, built once, passed down unchanged),
:mod:`parity.judge` (below the sweep: a result -> a :class:`parity.results.Judged` record), :mod:`.lanes` (units,
lanes, GPUs, executors), :mod:`.timing` (``timing.json``), :mod:`.writers` (``results.csv``,
``masks.jsonl``, progress, the summary table), :mod:`.run` (:func:`run_sweep`),
:mod:`.shrinking` (the first failure of each backend and kind shrunk).
"""

from __future__ import annotations

from ..results import COLUMNS, FAIL_VERDICTS, RAW_FAIL_VERDICTS, VERDICTS
from .lanes import COMPILE_VARS, THREAD_VARS, check_splits, config_key, lane_thread_env, make_executor, plan_lanes, split_cases
from .options import SweepOptions
from .run import Sweep, SweepResult, _safe, run_sweep
from .timing import SweepTiming, split_line
from .writers import Progress, ResultsWriter, known_vs_new, summary_table

__all__ = [
    "COLUMNS",
    "FAIL_VERDICTS",
    "RAW_FAIL_VERDICTS",
    "COMPILE_VARS",
    "THREAD_VARS",
    "VERDICTS",
    "Progress",
    "ResultsWriter",
    "Sweep",
    "SweepOptions",
    "SweepResult",
    "SweepTiming",
    "_safe",
    "check_splits",
    "config_key",
    "known_vs_new",
    "lane_thread_env",
    "make_executor",
    "plan_lanes",
    "run_sweep",
    "split_cases",
    "split_line",
    "summary_table",
]
