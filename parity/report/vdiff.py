"""A version diff: one backend (kernel) at two versions on the same cases (``python -m parity vdiff``,
:mod:`parity.cli.vdiff`; rendered by :mod:`parity.report.vdiff_page`; docs/version-diff.md).

**Pairs.** A pair is (BASE backend, HEAD backend): the same kernel at two versions. From two run
folders (one version each), a backend present in both whose recorded version (``environment.json``)
differs pairs with itself; from one run folder, ``X`` pairs with ``X@TAG`` (the same kernel staged a second
time under a tagged name); ``--pair A=B`` names pairs in either case. Rows are matched on ``case_id``.

**Judging.** Every row is judged anew from its raw verdict against the known divergences, under the BASE
backend's name (the entries speak of the kernel by its registry name, whatever the second copy is called)
and its own side's version, twice:

* ``verdict`` / ``entry``: with the entries as written (the verdict ``parity run`` gives at that version);
* ``mechanism``: with every entry's ``versions`` ignored: the entry whose mechanism explains a raw
  failure, also at a version its range leaves out (``finding still present at HEAD, outside the range``).

**Sections** ("failing" = a raw fail / error / crash / timeout):

==================  =====================================================================  ==========
section             rows                                                                   regression
==================  =====================================================================  ==========
verdict changes     the verdict differs between BASE and HEAD (both present)               no
findings            per entry explaining a BASE row (by mechanism; each of a joint         no
                    ``a+b``): its rows at HEAD pass (fixed), fail the same way (still
                    present), fail otherwise (changed)
new findings        failing at HEAD, not failing at BASE (passing, refused, absent), or     yes
                    failing at BASE by an entry's mechanism and at HEAD not by it (nor by
                    entries all among BASE's joint ``a+b``)
coverage lost       ran at BASE (any verdict), unsupported / unavailable at HEAD            yes [1]
error ratio up      same raw verdict (pass or fail), ``err_ratio`` (error / the same-dtype  yes
                    baseline's) up by more than ``ratio_threshold`` x and ``min_ratio_delta``
numbers moved       raw pass at both: ``max_abs_err``, ``mean_abs_err``, ``lse_max_abs_err``  no
                    head / base; moved = by ``factor`` (default 2) or more, either way
==================  =====================================================================  ==========

[1] unless ``allow_coverage_loss``. A ratio of two zeros is 1, of x / 0 is infinite.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import math
import statistics
from typing import Any

from .. import runfolder
from ..case import Case
from ..errors import UserError
from ..expect import Expectations, entry_ids
from ..results import RAW_FAIL_VERDICTS, SKIP_VERDICTS, Outcome, raw_verdict_of
from .runs import Run

SKIPPED = SKIP_VERDICTS
#: The numbers compared where both sides pass: (column, label).
METRICS = (("max_abs_err", "max abs error"), ("mean_abs_err", "mean abs error"), ("lse_max_abs_err", "LSE max abs error"))
TAG = "@"  # X@TAG: the kernel X staged a second time (docs/version-diff.md)


@dataclasses.dataclass(frozen=True)
class Pair:
    base: str  # the backend's name in the BASE run (the name the rows are judged under)
    head: str  # ... in the HEAD run
    base_version: str
    head_version: str

    @property
    def label(self) -> str:
        names = self.base if self.base == self.head else f"{self.base} → {self.head}"
        return f"{names}: {self.base_version or '(version not recorded)'} → {self.head_version or '(version not recorded)'}"


@dataclasses.dataclass(frozen=True)
class Side:
    """One row of a pair at one version, judged (module docstring)."""

    row: dict[str, Any]
    raw: Outcome | None  # raw verdict (None: a row of no known verdict)
    verdict: str  # judged with the entries as written
    entry: str  # expected_id / the unexpected pass's entry (as written)
    mechanism: str  # the entry explaining a raw failure with versions ignored ("" for none, and for a pass)

    @property
    def failing(self) -> bool:
        return self.raw in RAW_FAIL_VERDICTS

    def num(self, column: str) -> float:
        try:
            return float(self.row.get(column) or "nan")
        except ValueError:
            return math.nan


@dataclasses.dataclass(frozen=True)
class RowPair:
    pair: Pair
    case_id: str
    base: Side | None
    head: Side | None

    @property
    def row(self) -> dict[str, Any]:
        return (self.head or self.base).row  # type: ignore[union-attr]

    def ratio(self, column: str) -> float:
        """head / base of a number (1 for two zeros, inf for x / 0, nan where either is missing)."""
        b, h = self.base.num(column), self.head.num(column)  # type: ignore[union-attr]
        if math.isnan(b) or math.isnan(h):
            return math.nan
        if b == 0:
            return 1.0 if h == 0 else math.inf
        return h / b


@dataclasses.dataclass
class Finding:
    """A known divergence explaining BASE rows (by mechanism), and what its rows do at HEAD."""

    entry: str
    pairs: list[str]
    base_rows: int = 0
    still: int = 0  # fail at HEAD as the entry describes
    fixed: int = 0  # pass at HEAD
    other: int = 0  # fail at HEAD otherwise
    not_run: int = 0  # unsupported / unavailable / absent at HEAD
    versions: str = ""  # the entry's versions as written
    in_range: tuple[bool, bool] = (True, True)  # the range admits (BASE, HEAD) versions
    example: RowPair | None = None

    @property
    def status(self) -> str:
        ran = self.still + self.fixed + self.other
        if not ran:
            return "not run at HEAD"
        if self.fixed == ran:
            return "fixed"
        if self.still == ran:
            return "still present"
        if self.other == 0:
            return "partly fixed"
        return "changed"

    @property
    def note(self) -> str:
        """What the entry's ``versions`` should say given this evidence ('' where it agrees)."""
        head_in = self.in_range[1]
        if self.status in ("still present", "partly fixed", "changed") and self.still and not head_in:
            return "HEAD's version is outside `versions`: widen it (seen at HEAD)"
        if self.status == "fixed" and head_in:
            return "HEAD's version is inside `versions`: narrow it (not seen at HEAD)"
        return ""


@dataclasses.dataclass(frozen=True)
class Spread:
    """The head / base ratios of one number over the rows passing at both versions."""

    column: str
    label: str
    ratios: tuple[float, ...]
    factor: float
    top: tuple[tuple[RowPair, float], ...]  # the rows that moved most (either way), most first

    @property
    def up(self) -> int:
        return sum(1 for r in self.ratios if r >= self.factor)

    @property
    def down(self) -> int:
        return sum(1 for r in self.ratios if r <= 1 / self.factor)

    def quantiles(self) -> dict[str, float]:
        if not self.ratios:
            return {}
        s = sorted(self.ratios)
        q = (lambda p: s[min(len(s) - 1, int(p * (len(s) - 1) + 0.5))]) if len(s) > 1 else (lambda p: s[0])
        return {"min": s[0], "p10": q(0.1), "median": statistics.median(s), "p90": q(0.9), "max": s[-1]}


@dataclasses.dataclass
class VersionDiff:
    base: Run
    head: Run
    pairs: list[Pair]
    factor: float
    ratio_threshold: float
    min_ratio_delta: float
    allow_coverage_loss: bool
    rows: list[RowPair] = dataclasses.field(default_factory=list)
    changes: list[RowPair] = dataclasses.field(default_factory=list)
    findings: list[Finding] = dataclasses.field(default_factory=list)
    new: list[RowPair] = dataclasses.field(default_factory=list)
    coverage_lost: list[RowPair] = dataclasses.field(default_factory=list)
    ratio_up: list[RowPair] = dataclasses.field(default_factory=list)
    moved: list[Spread] = dataclasses.field(default_factory=list)
    only_base: int = 0
    only_head: int = 0

    @property
    def regressions(self) -> int:
        return len(self.new) + len(self.ratio_up) + (0 if self.allow_coverage_loss else len(self.coverage_lost))

    @property
    def matched(self) -> int:
        return sum(1 for r in self.rows if r.base and r.head)


# ---------------------------------------------------------------- pairs


def version_of(run: Run, backend: str) -> str:
    return runfolder.backend_versions(run.env).get(backend, "")


def find_pairs(base: Run, head: Run, named: list[tuple[str, str]], globs: list[str], one_folder: bool) -> list[Pair]:
    """The pairs to compare (module docstring); a :class:`UserError` saying what to pass when there are none."""
    b_names, h_names = base.backends(), head.backends()
    if named:
        for b, h in named:
            if b not in b_names:
                raise UserError(f"--pair {b}={h}: no rows of {b} in {base.path} (it has: {', '.join(b_names) or 'none'})")
            if h not in h_names:
                raise UserError(f"--pair {b}={h}: no rows of {h} in {head.path} (it has: {', '.join(h_names) or 'none'})")
        found = named
    elif one_folder:
        found = [(n.split(TAG, 1)[0], n) for n in h_names if TAG in n and n.split(TAG, 1)[0] in b_names]
        if not found:
            raise UserError(
                f"{head.path}: no backend X beside X{TAG}TAG (the same kernel at another version); "
                "name the pairs with --pair BASE=HEAD, or give two run folders"
            )
    else:
        common = [n for n in h_names if n in b_names]
        if globs:
            found = [(n, n) for n in common if any(fnmatch.fnmatchcase(n, g) for g in globs)]
        else:
            found = [(n, n) for n in common if version_of(base, n) != version_of(head, n)]
        if not found:
            why = "matches --backend" if globs else "changed version between BASE and HEAD"
            raise UserError(f"no backend of the {len(common)} in both runs {why}; name them with --backend NAME or --pair BASE=HEAD")
    if globs and (named or one_folder):
        found = [(b, h) for b, h in found if any(fnmatch.fnmatchcase(b, g) for g in globs)]
    return [Pair(b, h, version_of(base, b), version_of(head, h)) for b, h in found]


# ---------------------------------------------------------------- judging


def versionless(expectations: Expectations) -> Expectations:
    """The same entries with their ``versions`` ignored: which mechanism explains a row at any version."""
    return Expectations(tuple(dataclasses.replace(e, versions=None) for e in expectations.entries), expectations.files)


class Judge:
    """Judges rows under a pair's BASE name, with and without the entries' version ranges; cases parsed once."""

    def __init__(self, expectations: Expectations):
        self.expectations, self.blind = expectations, versionless(expectations)
        self._cases: dict[str, Case | None] = {}

    def side(self, row: dict[str, Any] | None, backend: str, version: str, torch_version: str) -> Side | None:
        if row is None:
            return None
        raw = raw_verdict_of(row)
        if not self.expectations or raw not in (*RAW_FAIL_VERDICTS, Outcome.PASS):
            return Side(row, raw, str(raw or ""), "", "")
        mine = {**row, "backend": backend, "raw_verdict": raw}
        case = self._case(str(row.get("case_json") or ""))
        if case is None:  # a row without its case cannot be matched to an entry
            return Side(row, raw, str(raw or ""), "", "")
        out = self.expectations.judge(mine, version, torch_version, case)
        blind = self.blind.judge(mine, version, torch_version, case) if raw != Outcome.PASS else {}
        mechanism = blind.get("expected_id", "") if blind.get("verdict") == Outcome.EXPECTED else ""
        return Side(row, raw, out["verdict"], out.get("expected_id", ""), mechanism)

    def _case(self, case_json: str) -> Case | None:
        if case_json not in self._cases:
            try:
                self._cases[case_json] = Case.from_json(case_json) if case_json else None
            except Exception:  # noqa: BLE001 - a row whose case does not parse is judged as written
                self._cases[case_json] = None
        return self._cases[case_json]


# ---------------------------------------------------------------- the diff


def compare_versions(
    base: Run,
    head: Run,
    pairs: list[Pair],
    expectations: Expectations,
    factor: float = 2.0,
    ratio_threshold: float = 1.5,
    min_ratio_delta: float = 0.25,
    allow_coverage_loss: bool = False,
) -> VersionDiff:
    d = VersionDiff(base, head, pairs, factor, ratio_threshold, min_ratio_delta, allow_coverage_loss)
    judge = Judge(expectations)
    torch_b, torch_h = runfolder.torch_version(base.env), runfolder.torch_version(head.env)
    b_recs, h_recs = base.df.to_dict("records"), head.df.to_dict("records")
    for p in pairs:
        b_rows = {r["case_id"]: r for r in b_recs if r["backend"] == p.base}
        h_rows = {r["case_id"]: r for r in h_recs if r["backend"] == p.head}
        d.only_base += sum(1 for c in b_rows if c not in h_rows)
        d.only_head += sum(1 for c in h_rows if c not in b_rows)
        for case_id in [*b_rows, *(c for c in h_rows if c not in b_rows)]:
            rp = RowPair(
                p,
                case_id,
                judge.side(b_rows.get(case_id), p.base, p.base_version, torch_b),
                judge.side(h_rows.get(case_id), p.base, p.head_version, torch_h),
            )
            d.rows.append(rp)
            _classify(d, rp)
    d.findings = findings(d.rows, expectations)
    d.moved = [spread(d.rows, col, label, factor) for col, label in METRICS]
    d.ratio_up.sort(key=lambda rp: -rp.ratio("err_ratio"))
    if not d.matched:
        raise UserError("the pairs have no case in common: not runs of the same cases (same --profile, --seed, --dtype?)")
    return d


def _classify(d: VersionDiff, rp: RowPair) -> None:
    b, h = rp.base, rp.head
    if h is None:
        return
    if b is not None and b.verdict != h.verdict:
        d.changes.append(rp)
    if h.failing and (b is None or not b.failing or (b.mechanism and not _within(h.mechanism, b.mechanism))):
        d.new.append(rp)
    if b is not None and b.raw not in SKIPPED and h.raw in SKIPPED:
        d.coverage_lost.append(rp)
    if b is not None and b.raw == h.raw and h.raw in (Outcome.PASS, Outcome.FAIL):
        rb, rh = b.num("err_ratio"), h.num("err_ratio")
        if not (math.isnan(rb) or math.isnan(rh)) and rh > rb * d.ratio_threshold and rh - rb > d.min_ratio_delta:
            d.ratio_up.append(rp)


def _within(head: str, base: str) -> bool:
    """A HEAD mechanism no newer than BASE's: explained, and by entries that all explained the BASE row (the same
    entry; or, of a joint ``a+b``, some of its entries: a finding fixed beside one still present)."""
    return bool(head) and set(entry_ids(head)) <= set(entry_ids(base))


def findings(rows: list[RowPair], expectations: Expectations) -> list[Finding]:
    """Per entry explaining a BASE row by its mechanism (each entry of a joint ``a+b``): what those rows do at HEAD
    (:class:`Finding`; still present where HEAD's mechanism names the entry too)."""
    out: dict[str, Finding] = {}
    for rp in rows:
        b, h = rp.base, rp.head
        for entry in entry_ids(b.mechanism) if b is not None else ():
            f = out.setdefault(entry, _finding(entry, rp, expectations))
            f.base_rows += 1
            if rp.pair.label not in f.pairs:
                f.pairs.append(rp.pair.label)
            if h is None or h.raw in SKIPPED:
                f.not_run += 1
            elif entry in entry_ids(h.mechanism):
                f.still += 1
            elif h.raw == Outcome.PASS:
                f.fixed += 1
            else:
                f.other += 1
    order = {"changed": 0, "fixed": 1, "partly fixed": 2, "still present": 3, "not run at HEAD": 4}
    return sorted(out.values(), key=lambda f: (order[f.status], f.entry))


def _finding(entry_id: str, rp: RowPair, expectations: Expectations) -> Finding:
    entry = expectations.get(entry_id)
    rng = entry.versions if entry is not None else None
    admits = (lambda v: rng.admits(v)) if rng is not None else (lambda v: True)
    in_range = (admits(rp.pair.base_version), admits(rp.pair.head_version))
    return Finding(entry_id, [], versions=rng.text if rng is not None else "", in_range=in_range, example=rp)


def spread(rows: list[RowPair], column: str, label: str, factor: float, top: int = 10) -> Spread:
    """head / base of ``column`` over the rows whose raw verdict is pass at both versions."""
    both = [(rp, rp.ratio(column)) for rp in rows if rp.base and rp.head and rp.base.raw == rp.head.raw == Outcome.PASS]
    both = [(rp, r) for rp, r in both if not math.isnan(r)]
    moved = sorted((x for x in both if x[1] >= factor or x[1] <= 1 / factor), key=lambda x: -_size(x[1]))[:top]
    return Spread(column, label, tuple(r for _, r in both), factor, tuple(moved))


def _size(ratio: float) -> float:
    """How far a ratio is from 1, either way (|log|; infinite for 0 and inf)."""
    return abs(math.log(ratio)) if 0 < ratio < math.inf else math.inf
