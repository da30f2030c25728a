"""Known divergences: committed expectations that turn a known failing row into ``expected``.

The data lives in ``parity/known_divergences.toml`` (:data:`DEFAULT_FILE`), one
``[[divergence]]`` table per entry:

===============  =============================================================================
``id``           unique name, what reports, JUnit and pytest's xfail message show
``backend``      :mod:`fnmatch` glob over the backend name (``"fa4-*"``, ``"mypkg.k:Kernel"``)
``versions``     optional ``"PACKAGE SPECIFIERS"``, e.g. ``"xformers>=0.0.35,<0.0.36"``: applies
                 only where the backend's version string (``environment.json`` /
                 ``parity backends``) holds ``PACKAGE <version>`` inside the range (for ``torch``
                 also a bare version string, ``Backend.version()``'s default, else the run's
                 torch version). A version that cannot be found
                 is **not** in the range: the entry then matches nothing, never everything.
                 Specifiers: ``>= > <= < == !=`` (``==2.11.*`` a prefix), comma = and.
``condition``    coverage-model terms (:mod:`parity.coverage`): ``{dim = value or [values]}``,
                 passed to :func:`parity.coverage.matches`; unknown dims / values are errors
``verdict``      the failing verdict expected: ``fail`` (default), ``error``, ``crash``, ``timeout``
                 (a sticky CUDA fault of the kernel is a ``crash``, also in a row written before
                 faults were crashes, whose raw verdict says ``error``: :func:`parity.results.raw_verdict_of`)
``reasons``      optional, for ``fail``: reasons that must all be among the row's ``reasons``;
                 the backward's (:data:`GRAD_REASONS`, ``parity run --grad``) make a *backward*
                 entry: it covers only rows whose backward was checked, and only it can
                 explain a row that failed in its backward
``any_reasons``  optional, for ``fail``: at least one of them must be among the row's ``reasons``
                 (one backward bug shows in whichever gradients it reaches: ``["dq_err",
                 "dk_err", "dv_err"]``); backward reasons here make a backward entry too
``detail``       optional: a regular expression that must be found in the row's ``detail``
                 (the library's own words of an ``error``, as pytest's ``raises(match=)``)
``mask_detail``  optional: a regular expression that must be found in the row's ``mask_detail``
                 (the mask probe's words: ``"wider on the right|sees every key"``; an exact mask
                 says ``"see exactly the spec's keys"``). It, or ``mask`` among ``reasons``, makes
                 the entry ask for **mask evidence** (below)
``read_detail``  optional: a regular expression that must be found in the row's ``read_detail``
                 (the read probe's words: ``"unused tail"``, ``"poisoned keys"``)
``invariance_detail``  optional: a regular expression found in the row's ``invariance_detail`` (the batch
                 invariance check's words: ``"alone"``, ``"rotated"``); with ``batch_invariance`` among
                 ``reasons`` (or alone) it makes an **engine-check entry** (below)
``graph_detail`` optional: the same for ``graph_detail`` (the CUDA graph replay's words: ``"padded"``)
``features``     optional: mechanism features of the case (:data:`FEATURES`, :func:`case_features`),
                 ``{name = value or [values]}``, matched as ``condition`` is
``explanation``  one sentence
``upstream``     an issue URL, or ``"not reported"``
``strict``       default true: a row the entry covers that *passes* is ``unexpected-pass``
===============  =============================================================================

How a row is judged (:meth:`Expectations.judge`; ``covers`` = backend, versions and condition
match; the row's own verdict is kept in ``raw_verdict``, its reasons stay in ``reasons``):

==========================  =====================================  ===================  ===========  ==============
raw verdict                 entries that cover the row             verdict              expected_id  unconfirmed_id
==========================  =====================================  ===================  ===========  ==============
fail / error / crash /      one whose ``verdict`` is the row's,    ``expected``         its id       ""
timeout                     whose ``reasons`` the row has (and
                            one of ``any_reasons``, if given) and
                            whose regular expressions match
fail                        none explains it alone; several        ``expected``         their ids,   ""
                            explain it jointly (below)                                  ``a+b``
fail                        none explains it; one asks for mask    ``fail``             ""           its id
                            evidence, the row's mask probe did
                            not run, the row failed on values and
                            the rest of the entry matches
fail / error / ...          only ones describing another failure   unchanged            ""           ""
pass                        a strict one                           ``unexpected-pass``  its id       ""
pass                        only non-strict ones                   ``pass``             ""           ""
any                         none                                   unchanged            ""           ""
unsupported / unavailable   (never covered)                        unchanged            ""           ""
==========================  =====================================  ===================  ===========  ==============

The first entry in file order wins; a joint explanation only where no entry alone explains the row. ``expected``
is never a pass and never a failure: a run
whose only non-passing rows are ``expected`` exits 0; ``unexpected-pass`` makes it exit 1
(pytest's strict xfail), so a fix upstream is noticed and the entry retired.

**Joint explanations.** A row that failed for two known reasons at once (vLLM FA3's paged varlen decode batch on an
H100, case ddb1214eefd2 with ``--invariance``: ``reads_outside_window`` from a last page's tail and ``batch_invariance``
from its split count) is explained by no single entry, yet each of its failures is known. Such a ``fail`` row is
``expected`` when its reasons split among entries that each cover it and each explain the row restricted to the
reasons they name, every reason of the row named by one of them (:func:`joint_explanation`, its table); its
``expected_id`` joins their ids with :data:`JOINT` in file order (``a+b``; :func:`entry_ids` splits it), and each
entry counts as matched, seen and explaining (reports, ``parity evidence``, ``export-repro --known``).

**Mask evidence.** An entry whose mechanism is a mask (``mask`` among its ``reasons``) or an exact mask
(``mask_detail``, e.g. numerics "with exact masks") explains a row only with the mask probe's words. Where the
probe could not run (``mask_check`` ``not_run``: too many passes at that length), a value failure
(:data:`VALUE_REASONS`) of a case the entry covers is not silently expected: the row stays a failure, and
``unconfirmed_id`` names the entry that would explain it (:meth:`Expectation.explains_but_for_mask`); the
summary counts such rows apart ("failures an entry would explain but no mask evidence").

**Engine checks.** ``batch_invariance`` and ``graph_replay`` (:data:`CHECK_REASONS`: ``--invariance``,
``--graph-replay``) are the reasons of the engine checks; an entry naming one of them (in ``reasons``,
``any_reasons``, or by ``invariance_detail`` / ``graph_detail``) is an engine-check entry, the path for "this
library does not promise batch invariance" (docs/engine-checks.md). Such an entry covers only rows whose check
ran (``ok`` / ``close`` / ``mismatch``: a row of one sequence, or of a run without the option, is not an unexpected
pass); an entry whose reasons are all engine-check reasons explains only a row that failed in its checks alone
(never a numeric failure beside them); and a row that failed an engine check is explained only by an entry naming
that check's reason (a numeric finding's entry does not swallow it: the two explain such a row jointly). Such an
entry is usually ``strict = false``: a kernel that does not promise invariance can still be invariant on a given case.

Which files (:func:`load`): ``--expect FILE`` (repeatable; it replaces the default file;
``default`` names it, ``none`` alone disables), else ``$PARITY_EXPECT`` (files separated by
``os.pathsep``, same words), else :data:`DEFAULT_FILE`. Bad input raises
:class:`ExpectationError` (a ``ValueError``), one line naming the file, the entry and the field.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import itertools
import os
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .case import Case, pages_seen
from .coverage import DIMENSIONS, GRID_CELLS, matches
from .errors import UserError
from .results import RAW_FAIL_VERDICTS, Outcome, raw_verdict_of

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - python 3.10
    import tomli as tomllib

DEFAULT_FILE = Path(__file__).with_name("known_divergences.toml")
ENV_VAR = "PARITY_EXPECT"
EXPECTED, UNEXPECTED_PASS = Outcome.EXPECTED, Outcome.UNEXPECTED_PASS
#: The verdicts an entry can expect (the failing ones of :mod:`parity.sweep`).
RAW_FAILS = RAW_FAIL_VERDICTS
#: Failure reasons of :mod:`parity.verdict` and the probes.
REASONS: tuple[str, ...] = (
    "max_err", "mean_err", "nan", "nan_masked_rows", "inf", "unwritten", "mask", "gqa", "reads_outside_window", "lse",
)  # fmt: skip
#: Failure reasons of the backward (:mod:`parity.grad`, ``--grad``).
GRAD_REASONS = ("dq_err", "dk_err", "dv_err", "dsinks_err", "grad_outside", "grad_nan", "grad_error")
#: Failure reasons of the engine checks (``--invariance``, ``--graph-replay``; :func:`parity.judge.judge_checks`).
CHECK_REASONS = ("batch_invariance", "graph_replay")
REASONS = (*REASONS, *GRAD_REASONS, *CHECK_REASONS)
#: ``grad_check`` values of a row whose backward ran and was judged.
GRAD_CHECKED = ("ok", "mismatch", "error")
#: ``invariance_check`` / ``graph_check`` values of a row whose engine check ran and was judged.
CHECK_RAN = ("ok", "close", "mismatch")
#: Each engine-check reason's column and pattern field.
CHECK_COLUMN = {"batch_invariance": "invariance", "graph_replay": "graph"}
FIELDS = (
    "id", "backend", "versions", "condition", "features", "verdict", "reasons", "any_reasons", "detail", "mask_detail", "read_detail",
    "invariance_detail", "graph_detail", "explanation", "upstream", "strict",
)  # fmt: skip
#: The regular-expression fields: each is searched in the row's column of the same name.
PATTERN_FIELDS = ("detail", "mask_detail", "read_detail", "invariance_detail", "graph_detail")
#: Reasons of a failure on values (forward or backward): what a missing mask probe leaves unexplained.
VALUE_REASONS = ("max_err", "mean_err", "nan", "inf", "nan_masked_rows", "dq_err", "dk_err", "dv_err", "dsinks_err", "grad_nan")
#: ``mask_check`` of a row whose mask probe could not run (too many passes at its length).
MASK_NOT_RUN = "not_run"
#: Mechanism features of a case (``features``), :func:`case_features`; not coverage-model dimensions (no kernel
#: branches on them), but what a paged-read finding is caused by:
#:
#: ========================  ==================================================================================
#: feature                   ``yes`` when
#: ========================  ==================================================================================
#: ``pages_outside_window``  a paged case where some sequence has a page no query row's window reaches (what an
#:                           engine frees or reuses: the read probe poisons it)
#: ``last_page_tail``        a paged case where some sequence's ``Sk`` is not a multiple of the page size (its
#:                           last page has unused positions past ``Sk``)
#: ========================  ==================================================================================
#:
#: Both are ``no`` for a contiguous (unpaged) case. ``outside_window_reach`` says how far the pages outside the window
#: lie from it (:func:`outside_window_reach`): ``none`` (no such page, or unpaged), ``<=128`` (every such page within
#: :data:`NEAR_KEYS` keys of its sequence's visible keys: a kernel that loads whole key tiles of 128 around the window
#: reads no other), ``>128`` (some page farther, or a sequence whose rows see no key). The probe poisons every such
#: page at once, so a NaN row of a ``>128`` case may come from a far page: an entry of near reads does not cover it.
FEATURES: dict[str, tuple[str, ...]] = {
    "pages_outside_window": ("no", "yes"),
    "last_page_tail": ("no", "yes"),
    "outside_window_reach": ("none", "<=128", ">128"),
}
#: ``outside_window_reach`` ``<=128``: every page outside the window within this many keys of it.
NEAR_KEYS = 128
REQUIRED = ("id", "backend", "condition", "explanation", "upstream")
#: Joins the ids of the entries that explain a row together (``expected_id`` ``a+b``); no id may hold it.
JOINT = "+"


class ExpectationError(UserError):
    """A bad expectations file or ``--expect`` value; the message is one line."""


# ---------------------------------------------------------------- versions

_VERSION = re.compile(r"v?(\d+(?:\.\d+)*)(?:[-_.]?(a|b|rc|c)[-_.]?(\d*))?(?:[-_.]?(post|dev)[-_.]?(\d*))?(?:\+[\w.]+)?", re.I)
_CLAUSE = re.compile(r"\s*(>=|<=|==|!=|>|<)\s*([0-9][\w.+-]*?)(\.\*)?\s*$")
_PRE_RANK = {"a": 0, "b": 1, "rc": 2, "c": 2}


def version_key(text: str) -> tuple[Any, ...] | None:
    """A sortable key of a PEP 440-like version (``4.0.0b36 < 4.0.0 < 4.0.0.post1``; ``+local``
    ignored), or None when ``text`` does not start with one."""
    m = _VERSION.fullmatch(text.strip()) or _VERSION.match(text.strip())
    if not m:
        return None
    release = tuple(int(x) for x in m.group(1).split("."))
    release = release + (0,) * (8 - len(release))
    pre: tuple[float, int] = (_PRE_RANK[m.group(2).lower()], int(m.group(3) or 0)) if m.group(2) else (3, 0)
    kind, n = (m.group(4) or "").lower(), int(m.group(5) or 0)
    if kind == "dev":
        pre = (pre[0] - 0.5, n) if m.group(2) else (-1, n)  # 1.0.dev1 < 1.0a1 < 1.0
    post = n if kind == "post" else -1
    return (release, pre, post)


_OPS = {
    ">=": lambda a, b: a >= b,
    ">": lambda a, b: a > b,
    "<=": lambda a, b: a <= b,
    "<": lambda a, b: a < b,
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
}


def _holds(key: tuple[Any, ...], op: str, version: str, prefix: bool) -> bool:
    """One specifier: ``key`` (of the found version) against ``op version`` (``prefix``: ``==X.*``)."""
    if prefix:
        want = tuple(int(x) for x in version.split("."))
        same = tuple(key[0][: len(want)]) == want
        return same if op == "==" else not same
    return bool(_OPS[op](key, version_key(version)))


@dataclasses.dataclass(frozen=True)
class VersionRange:
    """``"PACKAGE SPECIFIERS"``: see the module docstring."""

    package: str
    clauses: tuple[tuple[str, str, bool], ...]  # (operator, version, prefix: "==X.*")
    text: str

    @classmethod
    def parse(cls, text: str) -> VersionRange:
        """Raises ValueError with the reason (the caller adds file and entry)."""
        m = re.match(r"\s*([A-Za-z][A-Za-z0-9._-]*?)\s*((?:[<>=!]=?).*)$", text)
        if not m:
            raise ValueError(f"{text!r} is not 'PACKAGE SPECIFIERS' (e.g. 'xformers>=0.0.35,<0.0.36')")
        clauses = []
        for part in m.group(2).split(","):
            c = _CLAUSE.match(part)
            if not c or version_key(c.group(2)) is None or (c.group(3) and c.group(1) not in ("==", "!=")):
                raise ValueError(f"{part.strip()!r} in {text!r} is not a version specifier (>=, >, <=, <, ==, != and a version)")
            clauses.append((c.group(1), c.group(2), bool(c.group(3))))
        rng = cls(m.group(1), tuple(clauses), text.strip())
        rng._check_satisfiable()
        return rng

    def _check_satisfiable(self) -> None:
        lows = [(version_key(v), op == ">") for op, v, p in self.clauses if op in (">=", ">") or (op == "==" and not p)]
        highs = [(version_key(v), op == "<") for op, v, p in self.clauses if op in ("<=", "<") or (op == "==" and not p)]
        if lows and highs:
            lo, lo_strict = max(lows, key=lambda x: (x[0], x[1]))
            hi, hi_strict = min(highs, key=lambda x: (x[0], not x[1]))
            assert lo is not None and hi is not None  # checked by parse
            if lo > hi or (lo == hi and (lo_strict or hi_strict)):
                raise ValueError(f"{self.text!r} matches no version")

    def contains(self, version: str) -> bool:
        key = version_key(version)
        return key is not None and all(_holds(key, op, v, prefix) for op, v, prefix in self.clauses)

    def find(self, version_text: str, torch_version: str = "") -> str | None:
        """The package's version in a backend's version string, or None."""
        m = re.search(rf"(?<![\w.-]){re.escape(self.package)}[\s=:]+v?(\d(?:[\w.+-]*\w)?)", version_text or "", re.I)
        if m:
            return m.group(1)
        if self.package.lower() != "torch":
            return None
        bare = (version_text or "").strip()  # Backend.version()'s default: torch's version, bare
        return bare if bare and re.fullmatch(r"v?\d[\w.+-]*", bare) else (torch_version or None)

    def admits(self, version_text: str, torch_version: str = "") -> bool:
        found = self.find(version_text, torch_version)
        return found is not None and self.contains(found)


# ---------------------------------------------------------------- entries


def case_features(case: Case) -> dict[str, str]:
    """The case's :data:`FEATURES` (the table there says when each is ``yes``)."""
    ps = case.page_size
    if ps is None:
        return {"pages_outside_window": "no", "last_page_tail": "no", "outside_window_reach": "none"}
    outside = any(not bool(pages_seen(case, ps, b).all()) for b in range(case.batch))
    tail = any(sk % ps for sk in case.k_lens)
    reach = outside_window_reach(case) if outside else None
    words = "none" if reach is None else f"<={NEAR_KEYS}" if reach <= NEAR_KEYS else f">{NEAR_KEYS}"
    return {"pages_outside_window": "yes" if outside else "no", "last_page_tail": "yes" if tail else "no", "outside_window_reach": words}


def outside_window_reach(case: Case) -> float | None:
    """How far, in keys, the farthest page wholly outside every window of a paged case lies from its sequence's
    visible keys: a page before them, from its first key to the earliest visible key; after them, from the last
    visible key to its last key. ``inf`` where a sequence's rows see no key; None where no page lies outside."""
    ps, far = case.page_size or 1, None
    for b, (sq, sk) in enumerate(zip(case.q_lens, case.k_lens)):
        seen = pages_seen(case, ps, b)  # (pages_b,)
        if bool(seen.all()):
            continue
        lo, hi = case.band(sq, sk)  # (Sq,), (Sq,)
        rows = lo <= hi  # (Sq,) rows that see a key
        if not bool(rows.any()):
            return float("inf")
        first, last = int(lo[rows].min()), int(hi[rows].max())
        for p in (~seen).nonzero().flatten().tolist():
            start, end = p * ps, min(sk, (p + 1) * ps) - 1
            dist = first - start if end < first else end - last
            far = dist if far is None else max(far, dist)
    return far


@dataclasses.dataclass(frozen=True)
class Expectation:
    """One ``[[divergence]]`` entry (see the module docstring for the fields)."""

    id: str
    backend: str
    condition: tuple[tuple[str, tuple[str, ...]], ...]
    explanation: str
    upstream: str
    verdict: Outcome = Outcome.FAIL
    reasons: tuple[str, ...] = ()
    any_reasons: tuple[str, ...] = ()  # at least one of them among the row's (empty: no such requirement)
    strict: bool = True
    versions: VersionRange | None = None
    detail: str = ""  # a regular expression searched in the row's detail ("": any)
    mask_detail: str = ""  # ... in the row's mask_detail (the mask probe's words)
    read_detail: str = ""  # ... in the row's read_detail (the read probe's words)
    invariance_detail: str = ""  # ... in the row's invariance_detail (the batch invariance check's words)
    graph_detail: str = ""  # ... in the row's graph_detail (the CUDA graph replay's words)
    features: tuple[tuple[str, tuple[str, ...]], ...] = ()  # FEATURES: (name, values)
    source: str = ""

    def covers(self, backend: str, case: Case, version_text: str = "", torch_version: str = "") -> bool:
        """The entry speaks about this row: backend glob, version range, condition and features all match."""
        if not fnmatch.fnmatchcase(backend, self.backend):
            return False
        if self.versions is not None and not self.versions.admits(version_text, torch_version):
            return False
        if not matches(case, {dim: list(values) for dim, values in self.condition}):
            return False
        have = case_features(case) if self.features else {}
        return all(have[name] in values for name, values in self.features)

    @property
    def backward(self) -> bool:
        """The entry names a failure of the backward (a reason of :data:`GRAD_REASONS`)."""
        return any(r in GRAD_REASONS for r in (*self.reasons, *self.any_reasons))

    @property
    def checks(self) -> tuple[str, ...]:
        """The engine-check reasons (:data:`CHECK_REASONS`) the entry names: in its reasons, or by a pattern field."""
        named = set(self.reasons) | set(self.any_reasons)
        named |= {r for r, col in CHECK_COLUMN.items() if getattr(self, f"{col}_detail")}
        return tuple(r for r in CHECK_REASONS if r in named)

    def checks_ran(self, row: Mapping[str, Any]) -> bool:
        """Every engine check the entry names ran on the row (its column ``ok`` / ``close`` / ``mismatch``)."""
        return all(str(row.get(f"{CHECK_COLUMN[r]}_check") or "") in CHECK_RAN for r in self.checks)

    @property
    def needs_mask(self) -> bool:
        """The entry asks for mask evidence: ``mask`` among its reasons, or the mask probe's words."""
        return "mask" in self.reasons or bool(self.mask_detail)

    def explains(self, row: Mapping[str, Any]) -> bool:
        """The row's raw verdict is the one expected, with every ``reasons`` and one of ``any_reasons`` (if
        given) among its reasons and every regular expression found in its column; a row that failed in its
        backward only by an entry that names the backward."""
        if self.mask_detail and not re.search(self.mask_detail, str(row.get("mask_detail") or "")):
            return False
        return self._explains_without_mask(row, set(self.reasons))

    def explains_but_for_mask(self, row: Mapping[str, Any]) -> bool:
        """The entry asks for mask evidence, the row's mask probe did not run, the row failed on values, and
        everything else the entry asks for holds: the row it would explain had the probe run (``unconfirmed``).

        ==================  =====================  =======================  =========================  ======
        entry needs mask    row's ``mask_check``    a :data:`VALUE_REASONS`  rest of :meth:`explains`    result
        ==================  =====================  =======================  =========================  ======
        no                  any                     any                      any                        False
        yes                 other than not_run      any                      any                        False
        yes                 not_run                 none                     any                        False
        yes                 not_run                 one or more              no                         False
        yes                 not_run                 one or more              yes                        True
        ==================  =====================  =======================  =========================  ======
        """
        if not self.needs_mask or str(row.get("mask_check") or "") != MASK_NOT_RUN:
            return False
        if not set(str(row.get("reasons", "")).split()) & set(VALUE_REASONS):
            return False
        return self._explains_without_mask(row, set(self.reasons) - {"mask"})

    def _explains_without_mask(self, row: Mapping[str, Any], wanted: set[str]) -> bool:
        """:meth:`explains` but for ``mask_detail``, with ``wanted`` the reasons the row must have."""
        raw = raw_verdict_of(row)
        for name in ("detail", "read_detail", "invariance_detail", "graph_detail"):
            pattern = getattr(self, name)
            if pattern and not re.search(pattern, str(row.get(name) or "")):
                return False
        reasons = set(str(row.get("reasons", "")).split())
        if reasons & set(GRAD_REASONS) and not self.backward:
            return False
        if not self._explains_checks(reasons):
            return False
        if self.any_reasons and not reasons & set(self.any_reasons):
            return False
        return raw == self.verdict and wanted <= reasons

    def _explains_checks(self, reasons: set[str]) -> bool:
        """The engine-check rules (the module docstring): every check reason of the row named by the entry, and
        an entry of check reasons alone explains only a row with no other reason."""
        if reasons & set(CHECK_REASONS) - set(self.checks):
            return False
        named = set(self.reasons) | set(self.any_reasons)
        return not (self.checks and named <= set(CHECK_REASONS) and reasons - set(CHECK_REASONS))

    @property
    def named(self) -> frozenset[str]:
        """Every reason the entry speaks of: its ``reasons``, ``any_reasons`` and engine checks (:attr:`checks`)."""
        return frozenset((*self.reasons, *self.any_reasons, *self.checks))

    def explains_part(self, row: Mapping[str, Any]) -> tuple[str, ...]:
        """The row's reasons this entry names, where it explains the row restricted to them (:meth:`explains` of the
        row with only those reasons; its patterns on the row's columns as they are): its share of a joint
        explanation. ``()`` where it names none of them or does not explain that part."""
        part = tuple(r for r in str(row.get("reasons", "")).split() if r in self.named)
        return part if part and self.explains({**row, "reasons": " ".join(part)}) else ()

    def describe(self) -> str:
        return f"{self.id}: {self.explanation}"

    def condition_text(self) -> str:
        """The condition and features, then the probe words asked for: ``paged=yes, pages_outside_window=yes;
        read_detail ~ poisoned keys``."""
        text = ", ".join(f"{d}={'|'.join(v)}" for d, v in (*self.condition, *self.features))
        words = [f"{name} ~ {getattr(self, name)}" for name in PATTERN_FIELDS[1:] if getattr(self, name)]
        return "; ".join([text, *words])


def entry_ids(expected_id: Any) -> list[str]:
    """The entry ids an ``expected_id`` names: one, or each of a joint explanation (``a+b``); ``[]`` for none."""
    return [part for part in str(expected_id or "").split(JOINT) if part] if isinstance(expected_id, str) else []


def joint_explanation(entries: Sequence[Expectation], row: Mapping[str, Any], including: str = "") -> tuple[Expectation, ...]:
    """The entries (two or more, of ``entries``: those covering the row) that explain a ``fail`` row jointly, in
    the order given; ``()`` where none do. Each must explain its part (:meth:`Expectation.explains_part`: the row's
    reasons it names, its patterns holding on the row), and the parts together must be every reason of the row,
    value reasons too. The fewest entries that do win, the first in order among as few; ``including``: only sets
    holding that entry id (``parity evidence``: is this entry part of a joint explanation).

    ==================================  =========================================  ==================
    row                                 entries explaining a part                  result
    ==================================  =========================================  ==================
    raw verdict not ``fail``            any                                        ``()``
    ``fail``, fewer than two reasons    any                                        ``()``
    ``fail``                            parts that leave a reason unnamed          ``()``
    ``fail``                            one entry's part is every reason           ``()`` (explains
                                                                                   it alone, or the
                                                                                   row needs no split)
    ``fail``                            two or more whose parts are every reason   those entries
    ==================================  =========================================  ==================

    A part is the entry's only if it explains that part: a check entry (``batch_invariance``) explains its check's
    reason whatever else failed beside it, a read entry its read; a reason no entry names (``max_err`` beside them)
    leaves the row a failure."""
    reasons = set(str(row.get("reasons", "")).split())
    if raw_verdict_of(row) != Outcome.FAIL or len(reasons) < 2:
        return ()
    parts = [(e, set(part)) for e in entries if (part := e.explains_part(row))]
    if any(part == reasons for _, part in parts):
        return ()
    for size in range(2, min(len(parts), len(reasons)) + 1):
        for chosen in itertools.combinations(parts, size):
            if set().union(*(part for _, part in chosen)) == reasons and (not including or any(e.id == including for e, _ in chosen)):
                return tuple(e for e, _ in chosen)
    return ()


@dataclasses.dataclass(frozen=True)
class Expectations:
    """The entries of one or more files, in order; empty = ``--expect none``."""

    entries: tuple[Expectation, ...] = ()
    files: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.entries)

    def get(self, entry_id: str) -> Expectation | None:
        return next((e for e in self.entries if e.id == entry_id), None)

    def describe_id(self, expected_id: str) -> str:
        """``id: explanation`` of each entry an ``expected_id`` names (a joint one: each, ``; ``-joined); an id not
        loaded as itself."""
        return "; ".join(e.describe() if (e := self.get(i)) else i for i in entry_ids(expected_id)) or str(expected_id)

    def judge(self, row: dict[str, Any], version_text: str = "", torch_version: str = "", case: Case | None = None) -> dict[str, Any]:
        """``row`` judged against the entries (the module docstring's table); a new dict.

        The verdict is recomputed from ``raw_verdict`` (or ``verdict`` where that is empty); the row's
        ``reasons``, ``detail``, ``mask_check``, ``mask_detail`` and ``read_detail`` are what the entries read (a CUDA
        fault recorded as ``error`` before faults were crashes is a ``crash``: :func:`parity.results.raw_verdict_of`)."""
        out = dict(row)
        raw = raw_verdict_of(row)
        word = raw if raw is not None else str(row.get("raw_verdict") or row.get("verdict") or "")  # a word of no verdict: kept
        out.update(raw_verdict=word, verdict=word, expected_id="", unconfirmed_id="")
        if raw not in (*RAW_FAILS, Outcome.PASS) or not self.entries:
            return out
        backend = str(row.get("backend", ""))
        candidates = [e for e in self.entries if fnmatch.fnmatchcase(backend, e.backend)]
        if not candidates:
            return out
        covering = self.covering(row, case or Case.from_json(row["case_json"]), version_text, torch_version, candidates)
        if raw == Outcome.PASS:
            hit = next((e for e in covering if e.strict), None)
            if hit:
                out.update(verdict=UNEXPECTED_PASS, expected_id=hit.id)
            return out
        hit = next((e for e in covering if e.explains(out)), None)
        if hit:
            out.update(verdict=EXPECTED, expected_id=hit.id)
            return out
        joint = joint_explanation(covering, out)
        if joint:
            out.update(verdict=EXPECTED, expected_id=JOINT.join(e.id for e in joint))
            return out
        unconfirmed = next((e for e in covering if e.explains_but_for_mask(out)), None)
        if unconfirmed:
            out.update(unconfirmed_id=unconfirmed.id)
        return out

    def covering(
        self, row: Mapping[str, Any], case: Case, version_text: str = "", torch_version: str = "", among: Sequence[Expectation] = ()
    ) -> list[Expectation]:
        """The entries (of ``among``, else all) that cover ``row`` of ``case``, in order: backend, versions, condition
        and features (:meth:`Expectation.covers`); a backward entry only a row whose backward was checked, an
        engine-check entry only a row whose checks it names ran."""
        backend = str(row.get("backend", ""))
        checked = row.get("grad_check") in GRAD_CHECKED  # a backward entry speaks only of rows whose backward ran
        return [
            e
            for e in (among or self.entries)
            if (checked or not e.backward) and e.checks_ran(row) and e.covers(backend, case, version_text, torch_version)
        ]

    def summary(self) -> dict[str, Any]:
        """What environment.json records."""
        return {"files": list(self.files), "entries": [e.id for e in self.entries]}


# ---------------------------------------------------------------- loading


def _fail(path: Path, where: str, msg: str) -> ExpectationError:
    return ExpectationError(f"{path}: {where}: {msg}")


def _condition(path: Path, where: str, raw: Any) -> tuple[tuple[str, tuple[str, ...]], ...]:
    if not isinstance(raw, dict) or not raw:
        raise _fail(path, where, "field 'condition' must be a non-empty table of coverage dimension = value or [values]")
    out = []
    for dim, want in raw.items():
        values = [want] if isinstance(want, str) else want
        if not isinstance(values, list) or not values or not all(isinstance(v, str) for v in values):
            raise _fail(path, where, f"condition {dim!r} must be a string or a non-empty list of strings, got {want!r}")
        known = GRID_CELLS if dim == "grid" else DIMENSIONS.get(dim)
        if known is None:
            raise _fail(path, where, f"condition: unknown coverage dimension {dim!r} (known: {', '.join([*DIMENSIONS, 'grid'])})")
        bad = [v for v in values if v not in known]
        if bad:
            raise _fail(path, where, f"condition {dim!r}: unknown value(s) {bad} (known: {', '.join(known)})")
        out.append((dim, tuple(values)))
    return tuple(out)


def _text(path: Path, where: str, raw: dict[str, Any], key: str) -> str:
    v = raw.get(key)
    if not isinstance(v, str) or not v.strip():
        raise _fail(path, where, f"field {key!r} must be a non-empty string")
    return v.strip()


def _reasons(path: Path, where: str, raw: dict[str, Any], key: str, verdict: Outcome) -> tuple[str, ...]:
    """``reasons`` / ``any_reasons``: a list of known reasons, for verdict ``fail`` only."""
    reasons = raw.get(key, [])
    if not isinstance(reasons, list) or any(r not in REASONS for r in reasons):
        raise _fail(path, where, f"field {key!r} must be a list of {', '.join(REASONS)}, got {reasons!r}")
    if reasons and verdict != Outcome.FAIL:
        raise _fail(path, where, f"field {key!r} only applies to verdict 'fail'")
    return tuple(reasons)


def _pattern(path: Path, where: str, raw: dict[str, Any], key: str, verdict: Outcome) -> str:
    """A regular-expression field (:data:`PATTERN_FIELDS`); the probes' words exist only on a ``fail`` row."""
    pattern = raw.get(key, "")
    if not isinstance(pattern, str):
        raise _fail(path, where, f"field {key!r} must be a string (a regular expression), got {pattern!r}")
    try:
        re.compile(pattern)
    except re.error as exc:
        raise _fail(path, where, f"field {key!r} is not a regular expression ({exc})") from None
    if pattern and key != "detail" and verdict != Outcome.FAIL:
        raise _fail(path, where, f"field {key!r} only applies to verdict 'fail' (only a row that ran has the probes' words)")
    return pattern


def _features(path: Path, where: str, raw: Any) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """``features``: a table of :data:`FEATURES` names = value or [values]."""
    if raw is None:
        return ()
    if not isinstance(raw, dict) or not raw:
        raise _fail(path, where, f"field 'features' must be a non-empty table of feature = value or [values] ({', '.join(FEATURES)})")
    out = []
    for name, want in raw.items():
        if name not in FEATURES:
            raise _fail(path, where, f"field 'features': unknown feature {name!r} (known: {', '.join(FEATURES)})")
        values = [want] if isinstance(want, str) else want
        if not isinstance(values, list) or not values or any(v not in FEATURES[name] for v in values):
            known = ", ".join(FEATURES[name])
            raise _fail(path, where, f"field 'features': {name!r} must be one of {known} or a list of them, got {want!r}")
        out.append((name, tuple(values)))
    return tuple(out)


def _versions(path: Path, where: str, raw: dict[str, Any]) -> VersionRange | None:
    if "versions" not in raw:
        return None
    if not isinstance(raw["versions"], str):
        raise _fail(path, where, "field 'versions' must be a string such as 'xformers>=0.0.35,<0.0.36'")
    try:
        return VersionRange.parse(raw["versions"])
    except ValueError as exc:
        raise _fail(path, where, f"field 'versions': {exc}") from None


def _entry(path: Path, n: int, raw: Any, builtin: Sequence[str]) -> Expectation:
    where = f"entry #{n}"
    if not isinstance(raw, dict):
        raise _fail(path, where, "each [[divergence]] must be a table")
    if isinstance(raw.get("id"), str) and raw["id"].strip():
        where = f"entry {raw['id'].strip()!r}"
    unknown = sorted(set(raw) - set(FIELDS))
    if unknown:
        raise _fail(path, where, f"unknown field(s) {unknown} (known: {', '.join(FIELDS)})")
    missing = [k for k in REQUIRED if k not in raw]
    if missing:
        raise _fail(path, where, f"missing field(s) {missing}")
    backend = _text(path, where, raw, "backend")
    if ":" not in backend and not fnmatch.filter(builtin, backend):
        raise _fail(path, where, f"field 'backend': {backend!r} matches no known backend (a plugin spec has a ':')")
    verdict = Outcome.of(raw.get("verdict", Outcome.FAIL)) if isinstance(raw.get("verdict", ""), str) else None
    if verdict not in RAW_FAILS or verdict is None:
        raise _fail(path, where, f"field 'verdict' must be one of {', '.join(RAW_FAILS)}, got {raw.get('verdict')!r}")
    reasons, any_reasons = (_reasons(path, where, raw, key, verdict) for key in ("reasons", "any_reasons"))
    patterns = {key: _pattern(path, where, raw, key, verdict) for key in PATTERN_FIELDS}
    strict = raw.get("strict", True)
    if not isinstance(strict, bool):
        raise _fail(path, where, f"field 'strict' must be true or false, got {strict!r}")
    return Expectation(
        id=_text(path, where, raw, "id"),
        backend=backend,
        condition=_condition(path, where, raw["condition"]),
        explanation=_text(path, where, raw, "explanation"),
        upstream=_text(path, where, raw, "upstream"),
        verdict=verdict,
        reasons=reasons,
        any_reasons=any_reasons,
        strict=strict,
        versions=_versions(path, where, raw),
        features=_features(path, where, raw.get("features")),
        source=str(path),
        **patterns,
    )


def load_file(path: Path | str) -> tuple[Expectation, ...]:
    """The entries of one TOML file; :class:`ExpectationError` on anything wrong in it."""
    from . import backends

    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ExpectationError(f"{path}: no such expectations file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ExpectationError(f"{path}: cannot read it ({exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ExpectationError(f"{path}: not valid TOML ({exc})") from None
    extra = sorted(set(data) - {"divergence"})
    if extra:
        raise ExpectationError(f"{path}: unknown top-level key(s) {extra}; entries are [[divergence]] tables")
    raw = data.get("divergence", [])
    if not isinstance(raw, list):
        raise ExpectationError(f"{path}: 'divergence' must be an array of tables ([[divergence]])")
    names = backends.names()
    entries = tuple(_entry(path, n, r, names) for n, r in enumerate(raw, 1))
    seen: set[str] = set()
    for e in entries:
        if JOINT in e.id:
            raise ExpectationError(f"{path}: entry {e.id!r}: field 'id' must not hold {JOINT!r} (it joins the ids of a joint explanation)")
        if e.id in seen:
            raise ExpectationError(f"{path}: entry {e.id!r}: duplicate id")
        seen.add(e.id)
    return entries


def load(specs: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> Expectations:
    """The expectations to use: ``specs`` (``--expect`` values), else ``$PARITY_EXPECT``, else the
    default file. ``"default"`` names :data:`DEFAULT_FILE`; ``"none"`` alone means no entries."""
    environ = os.environ if environ is None else environ
    origin = "--expect"
    if not specs:
        env = environ.get(ENV_VAR, "").strip()
        specs, origin = ([s for s in env.split(os.pathsep) if s.strip()], f"${ENV_VAR}") if env else (["default"], "")
    specs = [s.strip() for s in specs]
    if "none" in specs:
        if len(specs) > 1:
            raise ExpectationError(f"{origin} none cannot be combined with other files ({', '.join(s for s in specs if s != 'none')})")
        return Expectations((), ())
    paths = [DEFAULT_FILE if s == "default" else Path(s) for s in specs]
    entries: list[Expectation] = []
    for p in paths:
        for e in load_file(p):
            if any(x.id == e.id for x in entries):
                raise ExpectationError(f"{p}: entry {e.id!r}: id already defined in {next(x.source for x in entries if x.id == e.id)}")
            entries.append(e)
    return Expectations(tuple(entries), tuple(str(p) for p in paths))


def load_checked(specs: Sequence[str] | None = None) -> Expectations:
    """:func:`load` for a command's ``--expect`` values: a bad file is a plain :class:`UserError` (one line)."""
    try:
        return load(specs)
    except ExpectationError as exc:
        raise UserError(str(exc)) from None
