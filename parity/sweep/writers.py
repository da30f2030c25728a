"""What a sweep writes as it goes: ``results.csv`` and ``masks.jsonl`` (flushed row by row), the
progress line, and the summary table printed at the end."""

from __future__ import annotations

import csv
import json
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..errors import UserError
from ..results import COLUMNS, RAW_FAIL_VERDICTS, VERDICTS, Judged


class ResultsWriter:
    """Appends rows to ``DIR/results.csv`` (flushed per row) and mask images to ``masks.jsonl``."""

    def __init__(self, out_dir: Path, resume: bool = False):
        self.dir = out_dir
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / "results.csv"
        self.done: set[tuple[str, str]] = set()
        mode = "w"
        if resume and self.path.exists() and self._drop_torn_row():
            with self.path.open(newline="") as fh:
                reader = csv.DictReader(fh)
                if reader.fieldnames and not {"backend", "case_id", "verdict"} <= set(reader.fieldnames):
                    raise UserError(f"--resume: {self.path} is not a results.csv of this tool (no backend/case_id/verdict columns)")
                if reader.fieldnames and list(reader.fieldnames) != COLUMNS:
                    raise UserError(f"--resume: {self.path} has other columns than this attn-parity writes "
                                     "(an older version's run); finish it with that version, or start a new --out")
                for r in reader:
                    if r.get("verdict"):  # a complete row
                        self.done.add((r["backend"], r["case_id"]))
            mode = "a"
        self._fh = self.path.open(mode, newline="")
        self._csv = csv.DictWriter(self._fh, fieldnames=COLUMNS, extrasaction="ignore")
        if mode == "w":
            self._csv.writeheader()
            self._fh.flush()
        self._masks = (self.dir / "masks.jsonl").open("a" if resume else "w")

    def _drop_torn_row(self) -> int:
        """A run killed mid-write can leave a last line without its newline: cut it off; the size left."""
        data = self.path.read_bytes()
        if data and not data.endswith(b"\n"):
            data = data[: data.rfind(b"\n") + 1]
            with self.path.open("r+b") as fh:
                fh.truncate(len(data))
        return len(data)

    def write(self, judged: Judged) -> None:
        row = judged.row
        self._csv.writerow(row)
        self._fh.flush()
        if judged.mask_image:
            self._masks.write(json.dumps({"backend": row["backend"], "case_id": row["case_id"], **judged.mask_image}) + "\n")
            self._masks.flush()

    def close(self) -> None:
        self._fh.close()
        self._masks.close()


class Progress:
    """A one-line progress bar on a terminal, periodic lines otherwise."""

    def __init__(self, total: int, stream=sys.stderr, enabled: bool = True):
        self.total, self.n, self.stream = total, 0, stream
        self.enabled = enabled
        self.tty = enabled and hasattr(stream, "isatty") and stream.isatty()
        self.t0 = time.monotonic()
        self.last = 0.0
        self.counts: dict[str, int] = {}

    def update(self, verdict: str, label: str) -> None:
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
        line = f"[{bar:<24}] {self.n}/{self.total} {now - self.t0:5.0f}s {counts} {label[:40]}"
        if self.tty:
            self.stream.write("\r" + line[:150].ljust(150))
            if self.n == self.total:
                self.stream.write("\n")
        else:
            self.stream.write(line + "\n")
        self.stream.flush()


def summary_table(result: Any) -> str:
    """A fixed-width summary: one line per backend, then known vs new failures at a glance."""
    cols = VERDICTS
    width = max([28, *(len(s) + 2 for s in result.infos)])
    widths = [max(len(c) + 2, 9) for c in cols]
    head = f"{'backend':<{width}}" + "".join(f"{c:>{w}}" for c, w in zip(cols, widths)) + f"{'worst ratio':>13}"
    lines = [head, "-" * len(head)]
    counts = result.counts()
    for spec in result.infos:
        c = counts.get(spec, {})
        ratios = [float(r["err_ratio"]) for r in result.rows if r["backend"] == spec and r.get("err_ratio") not in ("", None)]
        worst = f"{max(ratios):.3g}" if ratios else "-"
        lines.append(f"{spec:<{width}}" + "".join(f"{c.get(k, 0):>{w}}" for k, w in zip(cols, widths)) + f"{worst:>13}")
    for spec, info in result.infos.items():
        if info.get("unavailable"):
            lines.append(f"  {spec}: unavailable: {info['unavailable']}")
    split = getattr(result, "split", "")
    return "\n".join([*lines, *known_vs_new(result.rows), *([split] if split else [])])


def known_vs_new(rows: Iterable[dict[str, Any]]) -> list[str]:
    """Lines saying how many failing rows are known divergences, how many are new, and which
    strict entries passed (empty when there is nothing to say)."""
    by_id: dict[str, dict[str, int]] = {}
    new = 0
    for r in rows:
        if r["verdict"] in ("expected", "unexpected-pass"):
            n = by_id.setdefault(r.get("expected_id") or "?", {"expected": 0, "unexpected-pass": 0})
            n[r["verdict"]] += 1
        elif r["verdict"] in RAW_FAIL_VERDICTS:
            new += 1
    expected = {k: v["expected"] for k, v in by_id.items() if v["expected"]}
    xpass = {k: v["unexpected-pass"] for k, v in by_id.items() if v["unexpected-pass"]}
    out = []
    if expected or new or xpass:
        out.append(f"known divergences: {sum(expected.values())} rows expected"
                   + (" (" + ", ".join(f"{k} {n}" for k, n in expected.items()) + ")" if expected else ""))
        out.append(f"new failures: {new} rows (failing, no known divergence explains them)")
    if xpass:
        out.append(f"unexpected passes: {sum(xpass.values())} rows covered by strict entries that passed ("
                   + ", ".join(f"{k} {n}" for k, n in xpass.items()) + "): retire or narrow those entries")
    return out
