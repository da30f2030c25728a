"""Run the self-test: every planted bug must be flagged, every honest variant must pass.

Both go through the sweep machinery itself - :func:`parity.evaluate` (the error budget,
the exact mask and GQA probes, the poisoned buffer) over
:func:`parity.strategies.generate` for the profile (``quick`` by default: the curated
edge cases, then the hypothesis-drawn cases) - nothing here is written for one bug.

``python -m parity selftest`` (:mod:`parity.cli.selftest`) prints the detection table (bug
class, the checks that flagged the first failing case, that case) and the honest variants'
figures; it exits 1 if a bug escapes or an honest variant does not pass every case it supports.
"""

from __future__ import annotations

import csv
import dataclasses
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..api import evaluate, evaluate_record
from ..case import Case
from ..judge import BaselineCache
from ..results import DTYPES, Outcome
from .bugs import PlantedBug
from .honest import HonestVariant


def profile_cases(profile: str = "quick", seed: int = 0) -> list[Case]:
    """What ``python -m parity run --profile PROFILE --seed SEED`` sweeps."""
    from ..strategies import PROFILES, generate  # hypothesis: imported only when cases are drawn

    return generate(PROFILES[profile], seed)


def seeds_cases(profile: str, seeds: Sequence[int]) -> list[Case]:
    """The profile's cases over several seeds: edge cases once, then each seed's drawn cases; no duplicates."""
    out: list[Case] = []
    seen: set[str] = set()
    for s in seeds:
        for c in profile_cases(profile, s):
            if c.case_id not in seen:
                seen.add(c.case_id)
                out.append(c)
    return out


def _checks(row: dict[str, Any]) -> list[str]:
    return row["reasons"].split() if row["verdict"] == Outcome.FAIL else [row["verdict"]]


@dataclasses.dataclass
class Detection:
    bug: PlantedBug
    caught: bool
    checks: list[str]  # reasons of the first failing row
    first_case: str  # its summary
    first_index: int  # 1-based position of that case in the sweep's order
    detail: str  # mask / gqa words, else where the worst error is
    repro: str
    cases_run: int
    total: int
    failing: int  # failing rows among cases_run
    reason_counts: Counter
    dtype_counts: Counter  # failing rows per dtype
    problems: list[str]  # rows that errored: a broken plant, not a detection
    seconds: float


def detect(
    bug: PlantedBug, cases: list[Case], baselines: BaselineCache | None = None, exhaustive: bool = False, grad: bool = False
) -> Detection:
    """Run ``bug`` over ``cases`` in order; stop at the first failing row unless ``exhaustive``. ``grad``:
    the backward too (the planted backward bugs of :data:`parity.selftest.bugs.GRAD_BUGS`, whose forwards are
    honest: the forward's probes, which the forward self-test checks, are skipped)."""
    baselines = baselines or BaselineCache("cpu", keep=len(cases) + 1)
    backend = bug.backend()
    t0 = time.perf_counter()
    first: dict[str, Any] | None = None
    first_index = 0
    failing, run = 0, 0
    counts: Counter = Counter()
    dtypes: Counter = Counter()
    problems: list[str] = []
    for n, case in enumerate(cases, 1):
        row = evaluate(backend, case, probes=not grad, baselines=baselines, grad=grad, checks=bug.checks)
        run = n
        if row["verdict"] in (Outcome.ERROR, Outcome.CRASH, Outcome.TIMEOUT):
            problems.append(f"{row['verdict']} on {case.summary()}: {row['detail']}")
        if row["verdict"] != Outcome.FAIL:
            continue
        failing += 1
        counts.update(_checks(row))
        dtypes[case.dtype] += 1
        if first is None:
            first, first_index = row, n
            if not exhaustive:
                break
    detail = ""
    if first is not None:
        if first.get("mask_check") == "mismatch":
            detail = "mask: " + first["mask_detail"]
        elif first.get("gqa_check") == "mismatch":
            detail = "gqa: " + first["gqa_detail"]
        elif first.get("read_check") == "mismatch":
            detail = "reads: " + first["read_detail"]
        elif first.get("grad_check") in ("mismatch", "error"):
            detail = "grad: " + first["grad_detail"]
        elif first.get("lse_check") == "mismatch":
            detail = "lse: " + first["lse_detail"]
        elif first.get("invariance_check") == "mismatch":
            detail = "batch invariance: " + first["invariance_detail"]
        else:
            detail = first.get("worst_where", "")
    return Detection(
        bug=bug,
        caught=first is not None,
        checks=_checks(first) if first else [],
        first_case=Case.from_json(first["case_json"]).summary() if first else "",
        first_index=first_index,
        detail=detail,
        repro=first["repro"] if first else "",
        cases_run=run,
        total=len(cases),
        failing=failing,
        reason_counts=counts,
        dtype_counts=dtypes,
        problems=problems,
        seconds=time.perf_counter() - t0,
    )


@dataclasses.dataclass
class HonestResult:
    variant: HonestVariant
    cases: int = 0
    passed: int = 0
    unsupported: int = 0
    failed: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    worst_budget_frac: float = 0.0  # max over cases of max|err| / allowed
    worst_case: str = ""
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.failed


def check_honest(
    variants: Sequence[HonestVariant], cases: list[Case], baselines: BaselineCache | None = None, grad: bool = False
) -> list[HonestResult]:
    """Every variant on every case (cases outer, so each reference is computed once); ``grad``: the backward too
    (its budget fraction counts in the worst one; the forward's probes, checked by the forward self-test, skipped)."""
    baselines = baselines or BaselineCache("cpu", keep=8)
    results = [HonestResult(v) for v in variants]
    backends = [v.backend() for v in variants]
    for case in cases:
        for res, backend in zip(results, backends):
            t0 = time.perf_counter()
            judged = evaluate_record(backend, case, probes=not grad, baselines=baselines, grad=grad)
            row, frac = judged.row, judged.verdict.budget_frac
            if judged.verdict.grad_budget_frac is not None:
                frac = max(frac or 0.0, judged.verdict.grad_budget_frac)
            res.seconds += time.perf_counter() - t0
            res.cases += 1
            if row["verdict"] == Outcome.UNSUPPORTED:
                res.unsupported += 1
                continue
            if row["verdict"] == Outcome.PASS:
                res.passed += 1
            else:  # fail, error, crash, timeout: a false alarm
                res.failed.append(row)
            if frac is not None and frac > res.worst_budget_frac:
                res.worst_budget_frac = frac
                res.worst_case = case.summary()
    return results


# -- printing -------------------------------------------------------------------------------------------


def detection_table(dets: Sequence[Detection], markdown: bool = False) -> str:
    head = ["bug class", "planted backend", "caught", "checks that flagged it", "first failing case (position in sweep)"]
    rows = []
    for d in dets:
        where = f"{d.first_case} (#{d.first_index} of {d.total})" if d.caught else f"none of {d.cases_run} cases"
        checks = " ".join(d.checks) if d.caught else "-"
        if d.failing > 1:  # exhaustive: how many cases fail, per dtype
            per = ", ".join(f"{dt} {d.dtype_counts[dt]}" for dt in DTYPES if d.dtype_counts[dt])
            checks += f" [{d.failing}/{d.total} cases fail: {per}]"
        rows.append([d.bug.klass, d.bug.name, "yes" if d.caught else "ESCAPED", checks, where])
    return _table(head, rows, markdown)


def honest_table(results: Sequence[HonestResult], markdown: bool = False) -> str:
    head = ["honest variant", "what differs", "cases", "pass", "unsupported", "fail", "worst max|err| / budget"]
    rows = [
        [r.variant.name, r.variant.what, str(r.cases), str(r.passed), str(r.unsupported), str(len(r.failed)), f"{r.worst_budget_frac:.3g}"]
        for r in results
    ]
    return _table(head, rows, markdown)


def _table(head: list[str], rows: list[list[str]], markdown: bool) -> str:
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
        lines += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows]
        return "\n".join(lines)
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(head)]
    fmt = lambda r: "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip()  # noqa: E731
    return "\n".join([fmt(head), "-" * (sum(widths) + 2 * (len(widths) - 1)), *map(fmt, rows)])


def write_csvs(out: Path, dets: Sequence[Detection], results: Sequence[HonestResult]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with (out / "detection.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["bug_class", "backend", "caught", "checks", "first_case", "first_index", "cases_run", "failing", "detail", "repro"])
        for d in dets:
            w.writerow(
                [d.bug.klass, d.bug.backend_name, d.caught, " ".join(d.checks), d.first_case, d.first_index]
                + [d.cases_run, d.failing, d.detail, d.repro]
            )
    with (out / "honest.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["variant", "backend", "cases", "pass", "unsupported", "fail", "worst_budget_frac", "worst_case"])
        for r in results:
            w.writerow(
                [r.variant.name, r.variant.backend_name, r.cases, r.passed, r.unsupported, len(r.failed)]
                + [f"{r.worst_budget_frac:.4g}", r.worst_case]
            )
