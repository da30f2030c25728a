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
from ..files import read_text
from ..results import ADDED_COLUMNS, COLUMNS, RAW_FAIL_VERDICTS, VERDICTS, Judged


class ResultsWriter:
    """Appends rows to ``DIR/results.csv`` (flushed per row) and mask images to ``masks.jsonl``."""

    def __init__(self, out_dir: Path, resume: bool = False):
        self.dir = out_dir
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / "results.csv"
        self.done: set[tuple[str, str]] = set()
        mode = "w"
        if resume and not self.path.exists() and (self.dir / "results.csv.gz").exists():
            self._unpack_gz()
        if resume and self.path.exists() and self._drop_torn_row():
            self._read_earlier_rows()
            mode = "a"
        self._fh = self.path.open(mode, newline="")
        self._csv = csv.DictWriter(self._fh, fieldnames=COLUMNS, extrasaction="ignore")
        if mode == "w":
            self._csv.writeheader()
            self._fh.flush()
        self._masks = (self.dir / "masks.jsonl").open("a" if resume else "w")

    def _unpack_gz(self) -> None:
        """--resume on a folder that keeps its rows gzipped (a committed report): they move to results.csv,
        the one file the rows are appended to and the reports read first."""
        gz = self.dir / "results.csv.gz"
        self.path.write_text(read_text(gz), encoding="utf-8")
        gz.unlink()
        print(f"parity: --resume: {gz} unpacked into results.csv (gzip it again to commit the folder)", file=sys.stderr)

    def _read_earlier_rows(self) -> None:
        """--resume: the finished rows of results.csv go into ``done``. One written before a column of
        ADDED_COLUMNS existed is rewritten with the full header (those cells empty; stderr says so);
        one without another column of COLUMNS, or with a column this version does not write, is refused."""
        with self.path.open(newline="") as fh:
            reader = csv.DictReader(fh)
            fields = list(reader.fieldnames or [])
            rows = list(reader)
        missing = [c for c in COLUMNS if c not in fields]
        essential = [c for c in missing if c not in ADDED_COLUMNS]
        if essential:
            named = ", ".join(essential[:8]) + (f" and {len(essential) - 8} more" if len(essential) > 8 else "")
            raise UserError(f"--resume: {self.path} is not a results.csv of this tool (it lacks the columns {named}); start a new --out")
        extra = [c for c in fields if c not in COLUMNS]
        if extra:
            raise UserError(
                f"--resume: {self.path} has columns this attn-parity does not write ({', '.join(extra)}): "
                "a newer version's run; finish it with that version, or start a new --out"
            )
        if fields != COLUMNS:
            self._rewrite(rows)
        if missing:
            s = "s" if len(missing) > 1 else ""
            words = "its rows have no GPU recorded" if missing == ["gpu"] else "they are left empty in its rows"
            print(f"parity: resuming a run written before the {', '.join(missing)} column{s}: {words}", file=sys.stderr)
        self.done = {(r["backend"], r["case_id"]) for r in rows if r.get("verdict")}

    def _rewrite(self, rows: list[dict[str, str]]) -> None:
        """results.csv anew with the header of COLUMNS (cells of columns it lacked empty), through a temporary file."""
        tmp = self.path.with_name(self.path.name + ".tmp")
        with tmp.open("w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=COLUMNS, restval="", extrasaction="ignore")
            w.writeheader()
            w.writerows(rows)
        tmp.replace(self.path)

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
