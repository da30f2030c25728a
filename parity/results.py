"""The results row schema, defined once: the columns of ``results.csv``, the verdicts, the
numeric columns, the dtypes. The lowest layer beside :mod:`parity.errors`: imports nothing from parity.

Verdicts (one per row): ``pass``; the raw failures ``fail`` (over budget, or a probe mismatch),
``error`` (the backend raised), ``crash`` (its worker died, or a fault of its kernel lost the CUDA
context: :func:`cuda_fault`), ``timeout``; ``expected`` (a raw failure a known divergence explains,
:mod:`parity.expect`) and ``unexpected-pass`` (a strict known divergence passed); ``unsupported``
(the backend refused the case, or the row cannot fit its card: :mod:`parity.memory`) and ``unavailable``
(the backend is not installed here). :data:`FAIL_VERDICTS` make a run exit 1.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
from collections.abc import Mapping
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
    "read_check",  # the read probe (paged cases): ok / mismatch / not_run / n/a
    "read_detail",  # its words
    "lse_check",  # the log-sum-exp output: ok / mismatch / none (the backend returns none); runs before 2026-12-07 say pass / fail
    "lse_max_abs_err",  # max |LSE - reference LSE| over rows that see keys
    "lse_budget",  # its allowed maximum (k_max x the same-dtype baseline's LSE error + floor)
    "lse_detail",  # which rows / heads miss and by how much; the empty rows' values
    "grad_check",  # the backward (--grad, parity.grad): ok / mismatch / unsupported / error; empty: no --grad, or no forward
    "dq_max_abs_err",  # max |dq - reference dq|
    "dk_max_abs_err",
    "dv_max_abs_err",
    "grad_budget_frac",  # the largest of the three max errors / its budget; <= 1 passes
    "grad_detail",  # the backward's words: each tensor over budget, keys outside every window, NaN, the refusal or error
    "unconfirmed_id",  # a failing row's known divergence that would explain it but for the mask probe's words (parity.expect)
    "mask_probe",  # which mask probe ran (parity.maskcheck.mask_plan): full (one-hot, Sk / d passes) / scaled (residues); empty: none
    "invariance_check",  # batch invariance (--invariance, parity.invariance): ok / mismatch / not_run / error; empty: no forward
    "invariance_max_diff",  # max |output in the batch - output alone or reordered| over the sequences compared
    "invariance_detail",  # which sequence, which variant (alone / rotated), where; or why not run
    "graph_check",  # CUDA graph replay (--graph-replay, parity.graphs): ok / close / mismatch / not_run / error
    "graph_max_diff",  # max |replayed - eager| on the new inputs (and the padded batch)
    "graph_detail",  # the replay's words: bitwise or not, the padded batch; or why not run
]


class Outcome(str, enum.Enum):
    """A row's verdict word, typed: the one place the words are spelled. A ``str`` enum, so that
    results.csv, JSON and the reports write the same words as before (``str()``, ``format()`` and
    hashing are the word's); a word read back becomes a member with :meth:`of`. The decode study and the
    consistency check give their rows verdicts from the same set (pass, fail, error, unsupported,
    unavailable), and a worker's ``status`` uses the words it shares with them (crash, timeout, ...)."""

    PASS = "pass"
    FAIL = "fail"
    ERROR = "error"
    CRASH = "crash"
    TIMEOUT = "timeout"
    EXPECTED = "expected"
    UNEXPECTED_PASS = "unexpected-pass"
    UNSUPPORTED = "unsupported"
    UNAVAILABLE = "unavailable"

    __hash__ = str.__hash__

    def __str__(self) -> str:
        return str.__str__(self)  # the word (an Enum's own str() says Outcome.PASS), as pandas and csv write it

    def __format__(self, spec: str) -> str:
        return str.__format__(str(self), spec)

    @classmethod
    def of(cls, word: object) -> Outcome | None:
        """The member a word read back names; None for an empty or unknown word (a row of another file)."""
        try:
            return cls(str(word or ""))
        except ValueError:
            return None


VERDICTS: tuple[Outcome, ...] = tuple(Outcome)
#: What a backend's row can fail with before known divergences are applied (``raw_verdict``).
RAW_FAIL_VERDICTS = (Outcome.FAIL, Outcome.ERROR, Outcome.CRASH, Outcome.TIMEOUT)
#: Verdicts that make a run fail (exit 1): the raw failures and a strict entry's unexpected pass.
FAIL_VERDICTS = (*RAW_FAIL_VERDICTS, Outcome.UNEXPECTED_PASS)
#: Verdicts of a row the backend did not run: it refused the case, or is not installed here.
SKIP_VERDICTS = (Outcome.UNSUPPORTED, Outcome.UNAVAILABLE)
#: Verdicts of a row that ran (its backend answered, crashed or timed out).
RAN_VERDICTS = tuple(v for v in Outcome if v not in SKIP_VERDICTS)

#: Words of CUDA errors that leave the process's CUDA context unusable ("sticky" errors): a fault of the
#: backend's own kernel. Every later call in that process fails the same way, so its worker is restarted;
#: the row is a ``crash`` of that backend (:func:`cuda_fault`), also where the library raised a refusal after it.
CUDA_FAULT_WORDS = (
    "misaligned address",
    "illegal memory access",
    "unspecified launch failure",
    "device-side assert",
    "illegal instruction",
)


#: Characters of an error's words a row's ``detail`` keeps (:func:`clip`).
DETAIL_CHARS = 300


def clip(text: str, most: int = DETAIL_CHARS) -> str:
    """``text`` in at most ``most`` characters, its middle cut (`` ... ``): the head names what failed and the tail
    says why (a FlashInfer error's first 270 characters are the path of its generated source, its reason the end).

    ============================================  ======================================
    text                                          clipped to 20
    ============================================  ======================================
    ``short``                                     ``short``
    ``Error at /a/very/long/path.cu:12: reason``  ``Error at ... reason``
    ============================================  ======================================
    """
    if len(text) <= most:
        return text
    tail = (most - 5) // 2
    return f"{text[: most - 5 - tail].rstrip()} ... {text[len(text) - tail :].lstrip()}"


def cuda_fault(detail: object) -> bool:
    """Whether a row's ``detail`` reports a sticky CUDA fault (:data:`CUDA_FAULT_WORDS`).

    ==========================================================  =====
    detail                                                      fault
    ==========================================================  =====
    ``AcceleratorError ...: CUDA error: misaligned address``     yes
    ``RuntimeError ...: CUDA error: an illegal memory access``   yes
    ``out of memory: CUDA out of memory``                        no
    ``RuntimeError ...: head_dim must be 64``                    no
    ==========================================================  =====
    """
    text = str(detail or "").lower()
    return "cuda" in text and any(w in text for w in CUDA_FAULT_WORDS)


def raw_verdict_of(row: Mapping[str, Any]) -> Outcome | None:
    """A row's verdict before known divergences: ``raw_verdict`` (``verdict`` where a run predates it). A row
    written before CUDA faults were crashes (2026-12-06) says ``error`` with the fault's words: ``crash``."""
    raw = Outcome.of(row.get("raw_verdict") or row.get("verdict"))
    return Outcome.CRASH if raw == Outcome.ERROR and cuda_fault(row.get("detail")) else raw


#: Columns added by known divergences; older runs get them empty (so their schema matches).
EXPECT_COLUMNS = ("raw_verdict", "expected_id")
#: The log-sum-exp columns (parity.verdict.compare_lse), appended last.
LSE_COLUMNS = ("lse_check", "lse_max_abs_err", "lse_budget", "lse_detail")
LSE_TEXT = ("lse_check", "lse_detail")
#: ``lse_check``'s words before it said ``ok`` / ``mismatch`` as every other check does (runs before 2026-12-07):
#: read as the words they mean (:meth:`Verdict.from_row`, the report loader).
LSE_OLD_WORDS = {"pass": "ok", "fail": "mismatch"}
#: Columns appended after the first release of the schema, in order: older results.csv files lack
#: them and load with them empty (``runs.read_results``).
ADDED_COLUMNS: tuple[str, ...] = (*EXPECT_COLUMNS, "gpu", "model", "layer", "est_mem_mb", "peak_mem_mb", "read_check", "read_detail")
ADDED_COLUMNS = (*ADDED_COLUMNS, *LSE_COLUMNS)
ADDED_COLUMNS = (*ADDED_COLUMNS, "grad_check", "dq_max_abs_err", "dk_max_abs_err", "dv_max_abs_err", "grad_budget_frac", "grad_detail")
ADDED_COLUMNS = (*ADDED_COLUMNS, "unconfirmed_id", "mask_probe")
#: The engine checks a sweep can ask for (``SweepOptions.checks``): batch invariance (``--invariance``,
#: parity.invariance) and CUDA graph replay (``--graph-replay``, parity.graphs).
ENGINE_CHECKS = ("invariance", "graph")
#: The engine checks' columns (batch invariance, CUDA graph replay), appended last.
CHECK_COLUMNS = ("invariance_check", "invariance_max_diff", "invariance_detail", "graph_check", "graph_max_diff", "graph_detail")
CHECK_TEXT = ("invariance_check", "invariance_detail", "graph_check", "graph_detail")
ADDED_COLUMNS = (*ADDED_COLUMNS, *CHECK_COLUMNS)
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
    "lse_max_abs_err",
    "lse_budget",
    "dq_max_abs_err",
    "dk_max_abs_err",
    "dv_max_abs_err",
    "grad_budget_frac",
    "invariance_max_diff",
    "graph_max_diff",
)


def blank_row() -> dict[str, Any]:
    """A row with every column empty."""
    return {c: "" for c in COLUMNS}


#: How a measured number is written into results.csv (``format`` spec per column); each is parsed
#: back once by :meth:`Verdict.from_row`.
FORMATS = {
    "max_abs_err": ".6g",
    "max_rel_err": ".6g",
    "mean_abs_err": ".6g",
    "err_ratio": ".4g",
    "budget_frac": ".4g",
    "mismatch_pct": ".4g",
    "threshold_max": ".6g",
    "baseline_max": ".6g",
    "baseline_mean": ".6g",
    "time_ms": ".4g",
    "est_mem_mb": ".4g",
    "peak_mem_mb": ".4g",
    "lse_max_abs_err": ".6g",
    "lse_budget": ".6g",
    "dq_max_abs_err": ".6g",
    "dk_max_abs_err": ".6g",
    "dv_max_abs_err": ".6g",
    "grad_budget_frac": ".4g",
    "invariance_max_diff": ".6g",
    "graph_max_diff": ".6g",
}
#: The integer columns of a verdict (written as they are).
COUNTS = ("nan_count", "inf_count", "nan_masked_rows", "worst_seq", "worst_head", "worst_row", "worst_left_edge")


@dataclasses.dataclass(frozen=True)
class Verdict:
    """A judged row's verdict and measures, typed: what :func:`parity.judge.judge` returns and what a row
    read back from results.csv parses into (:meth:`from_row`). Text is made only by :meth:`columns`
    (results.csv) and by those that show it. ``None``: not measured (the backend did not run, or the
    column is empty). ``threshold_mean`` and ``elements`` are not columns: a row read back has them None."""

    verdict: Outcome
    raw_verdict: Outcome | None = None
    reasons: tuple[str, ...] = ()
    detail: str = ""
    expected_id: str = ""
    unconfirmed_id: str = ""  # a known divergence that would explain this failure had the mask probe run
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    mean_abs_err: float | None = None
    err_ratio: float | None = None
    budget_frac: float | None = None
    mismatch_pct: float | None = None
    threshold_max: float | None = None
    threshold_mean: float | None = None
    baseline_max: float | None = None
    baseline_mean: float | None = None
    nan_count: int | None = None
    inf_count: int | None = None
    nan_masked_rows: int | None = None
    unwritten: int | None = None  # measured: None = the backend returned its own buffer ("n/a")
    elements: int | None = None
    worst_seq: int | None = None
    worst_head: int | None = None
    worst_row: int | None = None
    worst_left_edge: int | None = None
    worst_where: str = ""
    mask_check: str = ""
    mask_detail: str = ""
    mask_probe: str = ""  # full / scaled; empty: no probe ran (or a run from before the column)
    gqa_check: str = ""
    gqa_detail: str = ""
    read_check: str = ""
    read_detail: str = ""
    lse_check: str = ""
    lse_max_abs_err: float | None = None
    lse_budget: float | None = None
    lse_detail: str = ""
    time_ms: float | None = None
    est_mem_mb: float | None = None
    peak_mem_mb: float | None = None
    grad_check: str = ""  # the backward (--grad); empty: not asked
    grad_detail: str = ""
    dq_max_abs_err: float | None = None
    dk_max_abs_err: float | None = None
    dv_max_abs_err: float | None = None
    grad_budget_frac: float | None = None
    invariance_check: str = ""  # batch invariance (--invariance); empty: the forward did not run
    invariance_detail: str = ""
    invariance_max_diff: float | None = None
    graph_check: str = ""  # CUDA graph replay (--graph-replay); empty: the forward did not run
    graph_detail: str = ""
    graph_max_diff: float | None = None

    @property
    def measured(self) -> bool:
        """The output was compared with the reference (the error columns are filled)."""
        return self.max_abs_err is not None

    def columns(self) -> dict[str, Any]:
        """The row's verdict columns, as results.csv writes them (numbers formatted here, once)."""
        out: dict[str, Any] = {
            "verdict": self.verdict,
            "reasons": " ".join(self.reasons),
            "detail": self.detail,
            "raw_verdict": self.raw_verdict or "",
            "expected_id": self.expected_id,
            "unconfirmed_id": self.unconfirmed_id,
        }
        for name, fmt in FORMATS.items():
            v = getattr(self, name)
            out[name] = "" if v is None else format(v, fmt)
        for name in COUNTS:
            v = getattr(self, name)
            out[name] = "" if v is None else v
        out["unwritten"] = ("n/a" if self.unwritten is None else self.unwritten) if self.measured else ""
        texts = ("worst_where", "mask_check", "mask_detail", "gqa_check", "gqa_detail", "read_check", "read_detail", *LSE_TEXT)
        for name in (*texts, "grad_check", "grad_detail", "mask_probe", *CHECK_TEXT):
            out[name] = getattr(self, name)
        return out

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Verdict:
        """A results row (read back from results.csv, or as :meth:`columns` wrote it) parsed once."""
        text = {f.name: str(row.get(f.name, "") or "") for f in dataclasses.fields(cls)}
        kw: dict[str, Any] = {
            k: text[k]
            for k in (
                "detail",
                "expected_id",
                "unconfirmed_id",
                "worst_where",
                "mask_check",
                "mask_detail",
                "gqa_check",
                "gqa_detail",
                "read_check",
                "read_detail",
                "lse_check",
                "lse_detail",
                "grad_check",
                "grad_detail",
                "mask_probe",
                *CHECK_TEXT,
            )
        }
        kw["reasons"] = tuple(text["reasons"].split())
        kw["lse_check"] = LSE_OLD_WORDS.get(text["lse_check"], text["lse_check"])
        kw["raw_verdict"] = Outcome.of(text["raw_verdict"])
        verdict = Outcome.of(text["verdict"])
        if verdict is None:
            raise ValueError(f"a results row with no known verdict: {text['verdict']!r} (known: {', '.join(VERDICTS)})")
        kw["verdict"] = verdict
        kw.update({k: _number(text[k], float) for k in FORMATS})
        kw.update({k: _number(text[k], int) for k in COUNTS})
        kw["unwritten"] = _number(text["unwritten"], int)
        return cls(**kw)


def _number(text: str, kind: type) -> Any:
    try:
        return kind(text) if text else None
    except ValueError:
        try:
            return kind(float(text))  # "3.0" in an int column
        except ValueError:
            return None


@dataclasses.dataclass
class Judged:
    """One judged (backend, case): ``head`` (the backend's and the case's columns) and ``verdict`` (the
    typed record); :attr:`row` is the results.csv row they make (:data:`COLUMNS`, nothing else), made
    once, when first asked for. The rest lives in memory only: ``comparison``
    (:class:`parity.verdict.Comparison`, None when the backend did not run), ``mask_image`` (the mask
    probe's picture, written to ``masks.jsonl``) and ``summary`` (the case in a few words, for the
    progress line)."""

    head: dict[str, Any]
    verdict: Verdict
    comparison: Any = None
    mask_image: dict[str, Any] | None = None
    summary: str = ""

    @functools.cached_property
    def row(self) -> dict[str, Any]:
        row = blank_row()
        row.update(self.head)
        row.update(self.verdict.columns())
        return row
