"""Shrink a failing case to a small one that still fails the same way.

hypothesis shrinks failures inside pytest; the sweep is not a pytest run, so its
failures are shrunk here with a greedy, domain-aware search: drop sequences, shorten
them, fewer heads, smaller head dim, narrower window, no softcap / scale. A candidate is
kept when the backend still fails it with at least one of the original reasons (or the
same error verdict with the same error words: :func:`error_words`). The result is printed
as a reproduction command.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterator
from typing import Any

from .case import Case
from .results import Outcome
from .window import SpecError, Window

Judge = Callable[[Case], dict[str, Any]]


def _lens(case: Case, q: tuple[int, ...], k: tuple[int, ...]) -> dict[str, Any]:
    return {"q_lens": q, "k_lens": k}


def candidates(case: Case) -> Iterator[dict[str, Any]]:
    """Field changes that make ``case`` simpler, most aggressive first (may be invalid)."""
    qs, ks = case.q_lens, case.k_lens
    if case.softcap is not None:
        yield dict(softcap=None)
    if case.scale is not None:
        yield dict(scale=None)
    if case.batch > 1:
        for b in range(case.batch):
            yield _lens(case, qs[:b] + qs[b + 1 :], ks[:b] + ks[b + 1 :])
    for div in (4, 2):
        q2 = tuple(max(1, -(-q // div)) for q in qs)
        k2 = tuple(max(1, -(-k // div)) for k in ks)
        if (q2, k2) != (qs, ks):
            yield _lens(case, q2, k2)
    q3 = tuple(max(1, q - 1) for q in qs)
    k3 = tuple(max(1, k - 1) for k in ks)
    if (q3, k3) != (qs, ks):
        yield _lens(case, q3, k3)
    if case.hkv > 1:
        yield dict(hq=case.group, hkv=1)
        if case.hkv % 2 == 0:
            yield dict(hq=case.hq // 2, hkv=case.hkv // 2)
    if case.group > 1:
        yield dict(hq=case.hkv * max(1, case.group // 2))
    for d in (8, 16, 32):
        if d < case.head_dim:
            yield dict(head_dim=d)
    w = case.window
    for left in [w.left // 2, w.left - 1] if w.left else []:
        yield dict(window=Window(left, w.right, w.align))
    for right in [w.right // 2, w.right - 1] if w.right else []:
        yield dict(window=Window(w.left, right, w.align))
    if case.page_size is not None and case.page_size > 1:
        yield dict(page_size=max(1, case.page_size // 2))


def _size(case: Case) -> tuple[int, ...]:
    return (sum(case.q_lens) * sum(case.k_lens) * case.hq * case.head_dim, case.batch, case.hq, case.head_dim)


def error_words(detail: str, words: int = 8) -> str:
    """The stable part of an error row's detail: code locations dropped, paths and numbers masked,
    the first ``words`` words kept.

    ================================================================================  ==============================================
    detail                                                                            words
    ================================================================================  ==============================================
    ``RuntimeError at f.pxi:1038: Error in 'X' at /a/p.cuh:2854: Invalid ... NUM=1``  ``RuntimeError: Error in 'X': Invalid ... NUM=#``
    ``RuntimeError at cpp_ext.py:445: Ninja build failed. Ninja output:``             ``RuntimeError: Ninja build failed. Ninja output:``
    ``ValueError at k.py:12: head_dim 80 not supported``                              ``ValueError: head_dim # not supported``
    ================================================================================  ==============================================
    """
    text = re.sub(r" at \S+:\d+:", ":", str(detail))  # "at file.py:NN:" locations
    text = re.sub(r"\S*/\S*", "<path>", text)
    text = re.sub(r"\d+", "#", text)
    return " ".join(text.split()[:words])


def same_failure(original: dict[str, Any], row: dict[str, Any]) -> bool:
    """Whether ``row`` fails the way ``original`` did: a shared reason for ``fail``; the same
    verdict for the others, and for ``error`` / ``crash`` also the same :func:`error_words` (a
    smaller case that fails otherwise, e.g. a kernel that does not build, is another failure)."""
    if original["verdict"] != Outcome.FAIL:
        if original["verdict"] in (Outcome.ERROR, Outcome.CRASH) and row["verdict"] == original["verdict"]:
            return error_words(row.get("detail", "")) == error_words(original.get("detail", ""))
        return row["verdict"] == original["verdict"]
    if row["verdict"] != Outcome.FAIL:
        return False
    return bool(set(original["reasons"].split()) & set(row["reasons"].split()))


class Shrunk(tuple):
    """``(smallest failing case, its row, backend calls used)``, and :attr:`exhausted`: whether the
    search stopped at its call budget (a smaller case may exist) instead of running out of
    candidates; :attr:`stopped`: whether a stop signal ended it (``exhausted`` too: a smaller case may exist)."""

    exhausted: bool
    stopped: bool

    def __new__(cls, case: Case, row: dict[str, Any], calls: int, exhausted: bool, stopped: bool = False) -> Shrunk:
        out = super().__new__(cls, (case, row, calls))
        out.exhausted, out.stopped = exhausted or stopped, stopped
        return out


def budget_note(calls: int) -> str:
    """What a shrink that stopped at its budget of ``calls`` says."""
    return f"stopped at the budget of {calls} calls (--shrink {calls}); a smaller case may exist"


def stop_note(calls: int) -> str:
    """What a shrink that a stop signal ended after ``calls`` calls says."""
    return f"stopped by a signal after {calls} calls; a smaller case may exist"


def shrink(case: Case, original: dict[str, Any], judge: Judge, max_calls: int = 60, stop: Callable[[], bool] | None = None) -> Shrunk:
    """Greedy shrink; returns ``(smallest failing case, its row, backend calls used)`` as a
    :class:`Shrunk`, whose ``exhausted`` says whether the budget of ``max_calls`` ended it; ``stop`` (asked
    before each call) true ends it where it is (a stop signal: ``stopped``)."""
    best, best_row, calls = case, original, 0
    improved, exhausted, stopped = True, False, False
    while improved:
        improved = False
        for change in candidates(best):
            try:
                cand = dataclasses.replace(best, **change)  # validates
            except SpecError:
                continue
            if _size(cand) > _size(best) or cand == best:
                continue
            if calls >= max_calls:  # a smaller candidate is left untried
                exhausted = True
                break
            if stop is not None and stop():
                stopped = True
                break
            calls += 1
            row = judge(cand)
            if same_failure(original, row):
                best, best_row, improved = cand, row, True
                break
    return Shrunk(best, best_row, calls, exhausted, stopped)
