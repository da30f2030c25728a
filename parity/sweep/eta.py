"""The time left of a sweep, for its progress line.

Each row's seconds are modelled per backend in one of two ways, whichever has predicted that
backend's rows better so far (each row is predicted before it joins the fit, and the absolute errors
are summed): the backend's mean row, or a line ``a + r x case_cost`` (``case_cost``: the query-key
pairs the window lets through, times heads and head dim) fitted by least squares. The line is used
only once it has seen 10 rows and its summed error is under 0.8 x the mean's: on the CPU backends a
row's seconds follow compilation and overheads more than its cost (a first run of 684 rows, replayed
in tests/test_first_run.py, had the line 10x off), while on kernels whose time follows the work the
line wins. A row the backend declines (``unsupported``) costs that backend's mean declined row. A
row costing more than 4x the costliest row done is weighted as one costing that. The rows left,
weighted by the model, over the rows done, weighted the same way, times the wall time so far is the
estimate: the wall clock carries what the model leaves out (the reference, other lanes, a busy machine).
"""

from __future__ import annotations

from collections.abc import Iterable

from ..case import Case

Key = tuple[str, str]  # (backend, case id)
LINE_MIN_ROWS = 10  # rows of a backend before its cost line may be used
LINE_BETTER = 0.8  # ... and only while its summed error is under this share of the mean row's


def case_cost(case: Case) -> float:
    """The work of ``case``: sum over sequences of the visible (query, key) pairs, x heads x head dim."""
    pairs = 0
    for sq, sk in zip(case.q_lens, case.k_lens):
        lo, hi = case.band(sq, sk)  # (Sq,), (Sq,)
        pairs += int((hi - lo + 1).clamp(min=0).sum())
    return float(max(pairs, 1) * case.hq * case.head_dim)


class _Fit:
    """Running sums of one backend's rows (cost, seconds): a least-squares line through them."""

    def __init__(self) -> None:
        self.n = 0
        self.c = self.t = self.cc = self.ct = 0.0

    def add(self, cost: float, seconds: float) -> None:
        self.n += 1
        self.c += cost
        self.t += seconds
        self.cc += cost * cost
        self.ct += cost * seconds

    def line(self) -> tuple[float, float] | None:
        """``(a, r)`` with both >= 0; None with no row."""
        if not self.n:
            return None
        var = self.n * self.cc - self.c * self.c
        r = (self.n * self.ct - self.c * self.t) / var if self.n > 1 and var > 1e-12 * self.cc * self.n else -1.0
        a = (self.t - r * self.c) / self.n
        if r < 0 or a < 0:  # too few or too alike rows: one of the two terms alone
            return (self.t / self.n, 0.0) if r < 0 else (0.0, self.t / max(self.c, 1e-12))
        return a, r


class Eta:
    """Planned rows ``(backend, case id, cost, runs)`` (``runs``: the backend is expected to run the
    case, not decline it); :meth:`done` as rows finish; :meth:`left` the seconds left, or None."""

    def __init__(self, planned: Iterable[tuple[str, str, float, bool]]):
        self.plan: dict[Key, tuple[float, bool]] = {}
        self.left_n: dict[tuple[str, bool], int] = {}
        self.left_c: dict[tuple[str, bool], float] = {}
        for backend, case_id, cost, runs in planned:
            self.plan[(backend, case_id)] = (cost, runs)
            self._count(backend, runs, cost, 1)
        self.done_n: dict[tuple[str, bool], int] = {}
        self.done_c: dict[tuple[str, bool], float] = {}
        self.fits: dict[str, _Fit] = {}
        self.all_fit = _Fit()
        self.declined: dict[str, list[float]] = {}  # per backend: [rows, seconds] of declined rows
        self.finished: list[tuple[str, bool, float]] = []  # (backend, ran, cost) of the rows done
        self.top = 0.0  # the costliest row done that ran
        self.errors: dict[str, list[float]] = {}  # per backend: summed |error| of [the line, the mean] before each row
        self._last: tuple[float, float | None] | None = None  # (elapsed, estimate): recomputed once a second

    def _count(self, backend: str, runs: bool, cost: float, sign: int) -> None:
        self.left_n[(backend, runs)] = self.left_n.get((backend, runs), 0) + sign
        self.left_c[(backend, runs)] = self.left_c.get((backend, runs), 0.0) + sign * cost

    def done(self, backend: str, case_id: str, seconds: float, ran: bool = True) -> None:
        """A row finished in ``seconds`` (``ran``: not declined); a row not planned is ignored."""
        planned = self.plan.pop((backend, case_id), None)
        if planned is None:
            return
        cost, runs = planned
        self._count(backend, runs, cost, -1)
        self.done_n[(backend, ran)] = self.done_n.get((backend, ran), 0) + 1
        self.done_c[(backend, ran)] = self.done_c.get((backend, ran), 0.0) + cost
        self.finished.append((backend, ran, cost))
        self._last = None
        if ran:
            self._score(backend, min(cost, 4 * self.top) if self.top else cost, seconds)
            self.top = max(self.top, cost)
            self.fits.setdefault(backend, _Fit()).add(cost, seconds)
            self.all_fit.add(cost, seconds)
        else:
            d = self.declined.setdefault(backend, [0.0, 0.0])
            d[0] += 1
            d[1] += seconds

    def _score(self, backend: str, cost: float, seconds: float) -> None:
        """Each model's error on this row, predicted before the row joins the fit."""
        fit = self.fits.get(backend)
        line = fit.line() if fit is not None else None
        if fit is None or line is None:
            return
        err = self.errors.setdefault(backend, [0.0, 0.0])
        err[0] += abs(line[0] + line[1] * cost - seconds)
        err[1] += abs(fit.t / fit.n - seconds)

    def _use_line(self, backend: str, fit: _Fit) -> bool:
        err = self.errors.get(backend)
        return fit.n >= LINE_MIN_ROWS and err is not None and err[0] < LINE_BETTER * err[1]

    def skip(self, backend: str, case_id: str) -> None:
        """A planned row that will not run here (already in the folder, backend unavailable)."""
        planned = self.plan.pop((backend, case_id), None)
        if planned is not None:
            self._count(backend, planned[1], planned[0], -1)

    def _weight(self, backend: str, runs: bool, n: int, cost: float) -> float:
        """The modelled seconds of ``n`` rows of ``backend`` costing ``cost`` in all."""
        if not n:
            return 0.0
        if not runs:
            d = self.declined.get(backend)
            return n * d[1] / d[0] if d else 0.0
        fit = self.fits.get(backend) or self.all_fit
        if not fit.n:
            return 0.0
        line = fit.line()
        if line is not None and self._use_line(backend, fit):
            return n * line[0] + line[1] * cost
        return n * fit.t / fit.n

    def left(self, elapsed: float) -> float | None:
        """Seconds left after ``elapsed`` seconds of rows; None before the model has a row to go by."""
        if self._last is not None and 0 <= elapsed - self._last[0] < 1.0:
            return None if self._last[1] is None else max(0.0, self._last[1] - (elapsed - self._last[0]))
        value = self._left(elapsed)
        self._last = (elapsed, value)
        return value

    def _left(self, elapsed: float) -> float | None:
        if not self.all_fit.n and not self.declined:
            return None
        cap = 4 * self.top if self.top else float("inf")
        done = sum(self._weight(s, ran, 1, min(c, cap)) for s, ran, c in self.finished)
        left = sum(self._weight(s, runs, 1, min(c, cap)) for (s, _), (c, runs) in self.plan.items())
        if done <= 0:
            return None
        return elapsed * left / done


def clock(seconds: float | None) -> str:
    """``seconds`` as ``1h02m``, ``3m05s`` or ``42s``; ``?`` for None."""
    if seconds is None:
        return "?"
    s = int(round(seconds))
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"
