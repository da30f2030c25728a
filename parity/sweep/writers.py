"""What a sweep writes and shows as it goes (:class:`RowSink`): ``results.csv`` and ``masks.jsonl``
through :class:`parity.runfolder.ResultsWriter` (flushed row by row), ``stages.jsonl`` (where each row's
time went), the progress line; and the summary table printed at the end."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable, Container, Iterable
from pathlib import Path
from typing import Any

from ..case import Case
from ..expect import entry_ids
from ..results import FAIL_VERDICTS, RAW_FAIL_VERDICTS, VERDICTS, Judged, Outcome
from ..runfolder import STAGES, ResultsWriter, open_jsonl
from .eta import Eta, clock
from .memgate import Admission

__all__ = ["STAGES_FILE", "Progress", "ResultsWriter", "RowSink", "known_vs_new", "summary_table"]

#: One line per row: where its time went (:data:`parity.sweep.timing.STAGES`, in milliseconds); the name is runfolder's.
STAGES_FILE = STAGES


class Progress:
    """A one-line progress bar on a terminal, periodic lines otherwise."""

    def __init__(self, total: int, stream=None, enabled: bool = True):
        # stderr as it is now (a default of sys.stderr would be the stream of whoever first imported this module:
        # under pytest a capture that closes with its test, and the next run's progress line raised)
        self.total, self.n, self.stream = total, 0, sys.stderr if stream is None else stream
        self.enabled = enabled
        self.tty = enabled and hasattr(stream, "isatty") and stream.isatty()
        self.t0 = time.monotonic()
        self.last = 0.0
        self.counts: dict[str, int] = {}

    def update(self, verdict: str, label: str, eta: str | None = None) -> None:
        """One more row; ``eta``: the time left, in words (shown when given)."""
        self.n += 1
        self.counts[verdict] = self.counts.get(verdict, 0) + 1
        if not self.enabled:
            return
        now = time.monotonic()
        if not self.tty and now - self.last < 10 and self.n != self.total:
            return
        self.last = now
        frac = self.n / max(self.total, 1)
        bar = "#" * int(frac * 24)
        counts = " ".join(f"{k}={v}" for k, v in sorted(self.counts.items()))
        left = f" ETA {eta}" if eta and self.n != self.total else ""
        line = f"[{bar:<24}] {self.n}/{self.total} {now - self.t0:5.0f}s{left} {counts} {label[:40]}"
        if self.tty:
            self.stream.write("\r" + line[:150].ljust(150))
            if self.n == self.total:
                self.stream.write("\n")
        else:
            self.stream.write(line + "\n")
        self.stream.flush()


class RowSink:
    """Where a sweep's judged rows go, in order: the rows kept in memory, ``results.csv`` / ``masks.jsonl``
    (with ``out_dir``), ``stages.jsonl``, the caller's ``on_row``, the progress bar and its time left.
    ``failed_fast`` is set by the first failing row under ``--fail-fast``. Call under the sweep's ``lock``."""

    def __init__(
        self,
        out_dir: Path | None,
        resume: bool,
        fail_fast: bool,
        bar: Progress,
        eta: Eta | None,
        on_row: Callable[[dict[str, Any]], None] | None,
        lock: threading.RLock,
        retry: Container[tuple[str, str]] = (),
    ):
        """``retry``: the (backend, case_id) rows of this run (an earlier unavailable one is tried again, :class:`ResultsWriter`)."""
        self.writer = ResultsWriter(out_dir, resume, retry) if out_dir else None
        self.stages_fh = open_jsonl(out_dir, STAGES, append=resume) if out_dir else None
        self.fail_fast, self.bar, self.eta, self.on_row, self.lock = fail_fast, bar, eta, on_row, lock
        self.rows: list[dict[str, Any]] = []
        self.failed_fast = threading.Event()

    def done(self, backend: str, case_id: str) -> bool:
        """Whether the folder already holds this row (``--resume``)."""
        return self.writer is not None and (backend, case_id) in self.writer.done

    def skip(self, backend: str, case_id: str, shown: bool = True) -> None:
        """A row not run here (already in the folder): the bar moves on (``shown``), the time left forgets it."""
        with self.lock:
            if shown:
                self.bar.update("skipped", backend)
            if self.eta:
                self.eta.skip(backend, case_id)

    def stages(self, backend: str, case: Case, res: dict[str, Any], stages: dict[str, float], gate: Admission | None = None) -> None:
        """One line of ``stages.jsonl``: the row's :data:`parity.sweep.timing.STAGES` in milliseconds, whether its inputs
        were the sweep's shared draw (``inputs_shared``), and whether it ran alone at its memory gate and drained the
        card for it (``gate``: its admissions; its wait is the ``gate`` stage)."""
        if self.stages_fh is None:
            return
        ms = {k: (int(v) if k.endswith("_calls") else round(v * 1e3, 3)) for k, v in stages.items()}
        timing = res.get("timing") or {}
        first, shared = bool(timing.get("first_config")), bool(timing.get("inputs_shared"))
        line = {"backend": backend, "case_id": case.case_id, "status": res.get("status"), "first_config": first, "stage_ms": ms}
        line["inputs_shared"] = shared  # its inputs mapped from the sweep's one draw of the case (False: drawn by its worker)
        line.update(ran_alone=bool(gate and gate.alone), drained=bool(gate and gate.drained))
        self.stages_fh.write(json.dumps(line) + "\n")
        self.stages_fh.flush()

    def emit(self, judged: Judged, gpu: str, elapsed: float) -> dict[str, Any]:
        """``judged``'s row, written everywhere; ``elapsed``: seconds since the rows began (the time left)."""
        row = judged.row
        row["gpu"] = gpu
        with self.lock:
            self.rows.append(row)
            if self.fail_fast and row["verdict"] in FAIL_VERDICTS:
                self.failed_fast.set()
            if self.writer:
                self.writer.write(judged)
            if self.on_row:
                self.on_row(row)
            left = self.eta.left(elapsed) if self.eta else None
            self.bar.update(row["verdict"], f"{row['backend']} {judged.summary}", eta=None if left is None else clock(left))
        return row

    def close(self) -> None:
        if self.writer:
            self.writer.close()
        if self.stages_fh:
            self.stages_fh.close()


def summary_table(result: Any) -> str:
    """A fixed-width summary: one line per backend, then known vs new failures at a glance."""
    cols = VERDICTS
    width = max([28, *(len(s) + 2 for s in result.infos)])
    widths = [max(len(c) + 2, 9) for c in cols]
    head = f"{'backend':<{width}}" + "".join(f"{c:>{w}}" for c, w in zip(cols, widths)) + f"{'worst ratio':>13}"
    lines = [head, "-" * len(head)]
    counts = result.counts()
    for backend in result.infos:
        c = counts.get(backend, {})
        ratios = [float(r["err_ratio"]) for r in result.rows if r["backend"] == backend and r.get("err_ratio") not in ("", None)]
        worst = f"{max(ratios):.3g}" if ratios else "-"
        lines.append(f"{backend:<{width}}" + "".join(f"{c.get(k, 0):>{w}}" for k, w in zip(cols, widths)) + f"{worst:>13}")
    for backend, info in result.infos.items():
        if info.get("unavailable"):
            lines.append(f"  {backend}: unavailable: {info['unavailable']}")
    tail = [t for t in (getattr(result, "split", ""), getattr(result, "gate", "")) if t]
    return "\n".join([*lines, *known_vs_new(result.rows), *tail])


def known_vs_new(rows: Iterable[dict[str, Any]]) -> list[str]:
    """Lines saying how many failing rows are known divergences, how many are new (of which how many an
    entry would explain but for the mask probe's words: ``unconfirmed_id``), and which strict entries passed
    (empty when there is nothing to say). The new-failures line names what is not a wrong answer among them:

    ===================================================  =============================================
    new failing row                                      named as
    ===================================================  =============================================
    ``crash`` (worker died, or a CUDA fault of the        "K of them crashes of their backend (B n, ...)"
    kernel, a refusal raised after it included)
    ``error`` whose detail starts "out of memory"         "K of them out of memory"
    anything else                                        counted only
    ===================================================  =============================================
    """
    by_id: dict[str, dict[Outcome, int]] = {}
    unconfirmed: dict[str, int] = {}
    new = oom = known = 0
    crashes: dict[str, int] = {}
    for r in rows:
        if r["verdict"] in (Outcome.EXPECTED, Outcome.UNEXPECTED_PASS):
            known += r["verdict"] == Outcome.EXPECTED
            for k in entry_ids(r.get("expected_id")) or ["?"]:  # a row explained jointly (a+b): for each entry
                n = by_id.setdefault(k, {Outcome.EXPECTED: 0, Outcome.UNEXPECTED_PASS: 0})
                n[r["verdict"]] += 1
        elif r["verdict"] in RAW_FAIL_VERDICTS:
            new += 1
            oom += r["verdict"] == Outcome.ERROR and str(r.get("detail") or "").startswith("out of memory")
            if r.get("unconfirmed_id"):
                unconfirmed[r["unconfirmed_id"]] = unconfirmed.get(r["unconfirmed_id"], 0) + 1
            if r["verdict"] == Outcome.CRASH:
                crashes[str(r.get("backend") or "?")] = crashes.get(str(r.get("backend") or "?"), 0) + 1
    expected = {k: v[Outcome.EXPECTED] for k, v in by_id.items() if v[Outcome.EXPECTED]}
    xpass = {k: v[Outcome.UNEXPECTED_PASS] for k, v in by_id.items() if v[Outcome.UNEXPECTED_PASS]}
    out = []
    if expected or new or xpass:
        out.append(
            f"known divergences: {known} rows expected"
            + (" (" + ", ".join(f"{k} {n}" for k, n in expected.items()) + ")" if expected else "")
        )
        out.append(f"new failures: {new} rows (failing, no known divergence explains them{_new_kinds(crashes, oom)})")
    if unconfirmed:
        out.append(
            f"no mask evidence: {sum(unconfirmed.values())} of the new failures an entry would explain but no mask evidence "
            "(their mask probe did not run; the entry asks for its words): " + ", ".join(f"{k} {n}" for k, n in unconfirmed.items())
        )
    if xpass:
        out.append(
            f"unexpected passes: {sum(xpass.values())} rows covered by strict entries that passed ("
            + ", ".join(f"{k} {n}" for k, n in xpass.items())
            + "): retire or narrow those entries"
        )
    return out


def _new_kinds(crashes: dict[str, int], oom: int) -> str:
    """The new-failures line's words for its crashes (per backend, most first) and out-of-memory rows."""
    out = ""
    if crashes:
        per = ", ".join(f"{b} {n}" for b, n in sorted(crashes.items(), key=lambda kv: (-kv[1], kv[0])))
        out += f"; {sum(crashes.values())} of them crashes of their backend ({per}): its worker died or its kernel faulted"
    if oom:
        out += f"; {oom} of them out of memory: each row's detail says what it was estimated to need and what was free"
    return out
