"""The results row schema, defined once: the columns of ``results.csv``, the verdicts, the
numeric columns, the dtypes. The lowest layer beside :mod:`parity.errors`: imports nothing from parity.

Verdicts (one per row): ``pass``; the raw failures ``fail`` (over budget, or a probe mismatch),
``error`` (the backend raised), ``crash`` (its worker died), ``timeout``; ``expected`` (a raw
failure a known divergence explains, :mod:`parity.expect`) and ``unexpected-pass`` (a strict
known divergence passed); ``unsupported`` (the backend refused the case) and ``unavailable``
(the backend is not installed here). :data:`FAIL_VERDICTS` make a run exit 1.
"""

from __future__ import annotations

import dataclasses
from typing import Any

#: The dtypes a case can have, in report order.
DTYPES: tuple[str, ...] = ("float32", "float16", "bfloat16")
#: The half-precision dtypes (what flash-style kernels take).
HALF_DTYPES: tuple[str, ...] = ("float16", "bfloat16")

COLUMNS = [
    "backend",
    "backend_name",
    "case_id",
    "family",
    "dtype",
    "layout",
    "hq",
    "hkv",
    "head_dim",
    "batch",
    "q_lens",
    "k_lens",
    "window_left",
    "window_right",
    "align",
    "softcap",
    "scale",
    "page_size",
    "seed",
    "verdict",
    "reasons",
    "max_abs_err",
    "max_rel_err",
    "mean_abs_err",
    "err_ratio",
    "budget_frac",
    "mismatch_pct",
    "threshold_max",
    "baseline_max",
    "baseline_mean",
    "nan_count",
    "inf_count",
    "nan_masked_rows",
    "unwritten",
    "mask_check",
    "mask_detail",
    "gqa_check",
    "gqa_detail",
    "worst_seq",
    "worst_head",
    "worst_row",
    "worst_left_edge",
    "worst_where",
    "time_ms",
    "detail",
    "repro",
    "case_json",
    # last, so that older results.csv files (without them) keep their column order: runs.read_results adds them
    "raw_verdict",
    "expected_id",
    "gpu",  # the GPU (CUDA_VISIBLE_DEVICES id) the row's worker was pinned to (--gpus); empty without one
    "model",  # the model a models-profile case came from (parity.models); empty for other cases
    "layer",  # which of the model's layers: local / global; empty for other cases
    "est_mem_mb",  # the row's estimated device memory (parity.memory.estimate), MiB
    "peak_mem_mb",  # the worker's peak allocated device memory in the row (CUDA), MiB; empty on the CPU
]

VERDICTS = ("pass", "fail", "error", "crash", "timeout", "expected", "unexpected-pass", "unsupported", "unavailable")
#: What a backend's row can fail with before known divergences are applied (``raw_verdict``).
RAW_FAIL_VERDICTS = ("fail", "error", "crash", "timeout")
#: Verdicts that make a run fail (exit 1): the raw failures and a strict entry's unexpected pass.
FAIL_VERDICTS = (*RAW_FAIL_VERDICTS, "unexpected-pass")

#: Columns added by known divergences; older runs get them empty (so their schema matches).
EXPECT_COLUMNS = ("raw_verdict", "expected_id")
#: Columns appended after the first release of the schema, in order: older results.csv files lack
#: them and load with them empty (``runs.read_results``).
ADDED_COLUMNS = (*EXPECT_COLUMNS, "gpu", "model", "layer", "est_mem_mb", "peak_mem_mb")
#: Columns that hold numbers (the report loader adds a float column ``<name>_f`` for each).
NUMERIC = (
    "max_abs_err",
    "max_rel_err",
    "mean_abs_err",
    "err_ratio",
    "budget_frac",
    "mismatch_pct",
    "threshold_max",
    "baseline_max",
    "worst_left_edge",
    "time_ms",
    "est_mem_mb",
    "peak_mem_mb",
)


def blank_row() -> dict[str, Any]:
    """A row with every column empty."""
    return {c: "" for c in COLUMNS}


@dataclasses.dataclass
class Judged:
    """One judged (backend, case): ``row`` is the results.csv row (:data:`COLUMNS`, nothing else);
    the rest lives in memory only: ``comparison`` (:class:`parity.verdict.Comparison`, None when the
    backend did not run), ``mask_image`` (the mask probe's picture, written to ``masks.jsonl``) and
    ``summary`` (the case in a few words, for the progress line)."""

    row: dict[str, Any]
    comparison: Any = None
    mask_image: dict[str, Any] | None = None
    summary: str = ""
