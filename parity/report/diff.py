"""What changed between two runs of the same cases (``python -m parity diff BASE_DIR HEAD_DIR``,
:mod:`parity.cli.diff`).

Rows are matched on ``(backend, case_id)``. Reported: new failures, fixed cases, error-ratio
changes beyond a threshold, coverage changes (pass <-> unsupported / unavailable), backends that
appeared or vanished, and known divergences (:mod:`parity.expect`). Written as ``diff.html``
and ``diff.md`` (default: into HEAD_DIR).

Known divergences: rows the runs judged keep their verdicts, rows of older runs are judged with
the default expectations (``--expect FILE`` / ``none``: every row of both runs anew). "failing"
below = fail / error / crash / timeout / unexpected-pass; ``expected`` is not failing:

=====================  ===================  =======================  ===========
BASE                   HEAD                 section                  regression
=====================  ===================  =======================  ===========
not failing / absent   failing              new failures             yes
(incl. expected)       (not unexp. pass)    (expected -> fail shows)
not unexpected-pass    unexpected-pass      unexpected passes        yes
failing                failing              still failing            no
pass / fail / absent   expected             newly expected           no
failing                pass                 fixed                    no
expected               pass                 fixed                    no
failing / expected     unsupported / -able  coverage lost            yes [1]
=====================  ===================  =======================  ===========

[1] unless ``--allow-coverage-loss``. Exit codes: 0 no regression; 1 a regression (the table,
or an error ratio that grew beyond the threshold, or a vanished backend); 2 bad input (missing
folder, a CSV without the columns, runs of different schemas, runs with no case in common, a bad
expectations file).
"""

from __future__ import annotations

import dataclasses
import math
from html import escape
from typing import Any

from ..errors import UserError
from ..results import SKIP_VERDICTS, Outcome
from .runs import FAILING, Run, case_text

SKIPPED = SKIP_VERDICTS


@dataclasses.dataclass
class Change:
    backend: str
    case_id: str
    base: dict[str, Any] | None
    head: dict[str, Any] | None

    @property
    def row(self) -> dict[str, Any]:
        return self.head or self.base or {}

    @property
    def factor(self) -> float:
        b, h = _ratio(self.base), _ratio(self.head)
        return h / b if b > 0 else math.inf


@dataclasses.dataclass
class Diff:
    base: Run
    head: Run
    ratio_threshold: float
    min_ratio_delta: float
    allow_coverage_loss: bool = False
    new_failures: list[Change] = dataclasses.field(default_factory=list)
    fixed: list[Change] = dataclasses.field(default_factory=list)
    still_failing: list[Change] = dataclasses.field(default_factory=list)
    ratio_up: list[Change] = dataclasses.field(default_factory=list)
    ratio_down: list[Change] = dataclasses.field(default_factory=list)
    coverage_lost: list[Change] = dataclasses.field(default_factory=list)
    coverage_gained: list[Change] = dataclasses.field(default_factory=list)
    unexpected_passes: list[Change] = dataclasses.field(default_factory=list)
    newly_expected: list[Change] = dataclasses.field(default_factory=list)
    still_expected: list[Change] = dataclasses.field(default_factory=list)
    backends_appeared: list[str] = dataclasses.field(default_factory=list)
    backends_vanished: list[str] = dataclasses.field(default_factory=list)
    only_base: int = 0
    only_head: int = 0
    matched: int = 0

    @property
    def regressions(self) -> int:
        n = len(self.new_failures) + len(self.ratio_up) + len(self.unexpected_passes)
        if not self.allow_coverage_loss:
            n += len(self.coverage_lost) + len(self.backends_vanished)
        return n


def _ratio(r: dict[str, Any] | None) -> float:
    if not r:
        return math.nan
    v = r.get("err_ratio_f", math.nan)
    return float(v) if v is not None else math.nan


def _classify(bv: str | None, hv: str) -> str | None:
    """The section a (BASE verdict or None if absent, HEAD verdict) pair goes to (module docstring), or None."""
    b_bad, h_bad = bv in FAILING, hv in FAILING
    if hv == Outcome.UNEXPECTED_PASS:
        return "still_failing" if bv == Outcome.UNEXPECTED_PASS else "unexpected_passes"
    if h_bad:
        return "still_failing" if b_bad else "new_failures"
    if hv == Outcome.EXPECTED:
        return "still_expected" if bv == Outcome.EXPECTED else "newly_expected"
    if bv is None:
        return None
    if b_bad or bv == Outcome.EXPECTED:
        return "fixed" if hv == Outcome.PASS else "coverage_lost"
    if bv == Outcome.PASS and hv in SKIPPED:
        return "coverage_lost"
    if bv in SKIPPED and hv == Outcome.PASS:
        return "coverage_gained"
    return None


def compare_runs(
    base: Run, head: Run, ratio_threshold: float = 1.5, min_ratio_delta: float = 0.25, allow_coverage_loss: bool = False
) -> Diff:
    if base.columns != head.columns:
        only_b = [c for c in base.columns if c not in head.columns]
        only_h = [c for c in head.columns if c not in base.columns]
        what = (
            "; ".join(
                x
                for x in (f"only in BASE: {', '.join(only_b)}" if only_b else "", f"only in HEAD: {', '.join(only_h)}" if only_h else "")
                if x
            )
            or "same columns, different order"
        )
        raise UserError(f"BASE and HEAD results.csv have different schemas ({what}); rerun both with the same attn-parity")
    common_cases = set(base.df["case_id"]) & set(head.df["case_id"])
    if not common_cases:
        raise UserError("BASE and HEAD have no case in common: not two runs of the same cases (same --profile, --seed, --dtype?)")
    d = Diff(base, head, ratio_threshold, min_ratio_delta, allow_coverage_loss)
    b_rows = {(r["backend"], r["case_id"]): r for r in base.df.to_dict("records")}
    h_rows = {(r["backend"], r["case_id"]): r for r in head.df.to_dict("records")}
    b_backends, h_backends = base.backends(), head.backends()
    d.backends_appeared = [b for b in h_backends if b not in b_backends]
    d.backends_vanished = [b for b in b_backends if b not in h_backends]
    for key, h in h_rows.items():
        b = b_rows.get(key)
        if b is None and key[0] not in d.backends_appeared:
            d.only_head += 1
        d.matched += b is not None
        section = _classify(b["verdict"] if b else None, h["verdict"])
        if section:
            getattr(d, section).append(Change(key[0], key[1], b, h))
        # a changed verdict is listed above
        if b is not None and b["verdict"] == h["verdict"] and h["verdict"] in (Outcome.PASS, Outcome.FAIL):
            rb, rh = _ratio(b), _ratio(h)
            if not (math.isnan(rb) or math.isnan(rh)):
                if rh > rb * ratio_threshold and rh - rb > min_ratio_delta:
                    d.ratio_up.append(Change(key[0], key[1], b, h))
                elif rb > rh * ratio_threshold and rb - rh > min_ratio_delta:
                    d.ratio_down.append(Change(key[0], key[1], b, h))
    d.only_base = sum(1 for k in b_rows if k not in h_rows and k[0] not in d.backends_vanished)
    d.ratio_up.sort(key=lambda c: -c.factor)
    d.ratio_down.sort(key=lambda c: c.factor)
    return d


# ---------------------------------------------------------------- rendering


def _fmt(v: float) -> str:
    return "–" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.3g}"


def headline(d: Diff) -> str:
    if d.regressions:
        parts = [f"{len(d.new_failures)} new failures"] if d.new_failures else []
        if d.unexpected_passes:
            parts.append(f"{len(d.unexpected_passes)} unexpected passes of strict known divergences")
        if d.ratio_up:
            parts.append(f"{len(d.ratio_up)} error ratios up more than {d.ratio_threshold:g}x")
        if not d.allow_coverage_loss and d.coverage_lost:
            parts.append(f"coverage lost on {len(d.coverage_lost)} rows")
        if not d.allow_coverage_loss and d.backends_vanished:
            parts.append(f"{len(d.backends_vanished)} backends vanished")
        return "REGRESSION: " + ", ".join(parts)
    known = f", {len(d.newly_expected)} newly expected" if d.newly_expected else ""
    return f"no regression ({len(d.fixed)} fixed{known}, {d.matched} rows compared)"


SECTIONS = (
    (
        "new_failures",
        "New failures",
        "failing in HEAD with no known divergence explaining it, not failing in BASE (or expected there, or not in BASE at all)",
    ),
    (
        "unexpected_passes",
        "Unexpected passes",
        "passing in HEAD though a strict known divergence covers the row: the entry is stale (fixed upstream?); retire or narrow it",
    ),
    (
        "newly_expected",
        "Newly expected",
        "failing in HEAD as a known divergence describes, not so in BASE (passing, failing without an entry, or absent)",
    ),
    ("ratio_up", "Error ratio up", "error ratio grew beyond the threshold"),
    ("coverage_lost", "Coverage lost", "passed (or failed) in BASE, unsupported / unavailable in HEAD"),
    ("fixed", "Fixed", "failing in BASE, passing in HEAD"),
    ("ratio_down", "Error ratio down", "error ratio shrank beyond the threshold"),
    ("coverage_gained", "Coverage gained", "unsupported / unavailable in BASE, passing in HEAD"),
    ("still_failing", "Still failing", "failing in both"),
    ("still_expected", "Still expected", "a known divergence in both"),
)


def _change_cells(c: Change) -> tuple[str, str, str, str, str]:
    bv = c.base["verdict"] if c.base else "(absent)"
    hv = c.head["verdict"] if c.head else "(absent)"
    why = (c.head or {}).get("reasons") or (c.head or {}).get("detail", "") or (c.base or {}).get("reasons", "")
    eid = (c.head or {}).get("expected_id") or (c.base or {}).get("expected_id")
    if eid:
        why = f"{why} (known divergence {eid})".strip()
    elif uid := (c.head or {}).get("unconfirmed_id"):  # an entry would explain it, but the row has no mechanism evidence
        why = f"{why} (no mask evidence for known divergence {uid})".strip()
    ratio = f"{_fmt(_ratio(c.base))} → {_fmt(_ratio(c.head))}"
    return f"{bv} → {hv}", why[:300], ratio, case_text(c.row), c.row.get("repro", "")


def render_markdown(d: Diff, limit: int = 20) -> str:
    from .text import md_cell

    icon = "❌" if d.regressions else "✅"
    out = [
        f"## attn-parity diff {icon} {headline(d)}",
        "",
        f"BASE `{d.base.path}` → HEAD `{d.head.path}`; {d.matched} rows matched "
        f"on (backend, case); threshold: ratio x{d.ratio_threshold:g} and +{d.min_ratio_delta:g}.",
        "",
    ]
    if d.backends_appeared:
        out.append("Backends appeared: " + ", ".join(f"`{b}`" for b in d.backends_appeared))
    if d.backends_vanished:
        out.append("Backends vanished: " + ", ".join(f"`{b}`" for b in d.backends_vanished))
    if d.only_base or d.only_head:
        out.append(f"Rows only in BASE: {d.only_base}; only in HEAD: {d.only_head}.")
    counts = " · ".join(f"{title}: {len(getattr(d, attr))}" for attr, title, _ in SECTIONS)
    out += ["", counts, ""]
    for attr, title, what in SECTIONS:
        items = getattr(d, attr)
        if not items or attr in ("still_failing", "still_expected"):
            continue
        out += [
            f"### {title} ({len(items)})",
            "",
            f"_{what}_",
            "",
            "| backend | verdict | reasons | err ratio | case |",
            "|---|---|---|---|---|",
        ]
        for c in items[:limit]:
            v, why, ratio, case, _ = _change_cells(c)
            out.append(f"| `{md_cell(c.backend)}` | {md_cell(v)} | {md_cell(why)} | {ratio} | {md_cell(case)} |")
        if len(items) > limit:
            out.append(f"\n… and {len(items) - limit} more (see diff.html).")
        if attr == "new_failures":
            out += ["", "<details><summary>Reproduce</summary>", "", "```bash"]
            out += [c.row.get("repro", "") for c in items[:limit]]
            out += ["```", "", "</details>"]
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def render_html(d: Diff, limit: int = 200) -> str:
    from .html import CSS

    cls = "bad" if d.regressions else "good"
    info = []
    if d.backends_appeared:
        info.append("Backends appeared: " + ", ".join(f"<code>{escape(b)}</code>" for b in d.backends_appeared))
    if d.backends_vanished:
        info.append("Backends vanished: " + ", ".join(f"<code>{escape(b)}</code>" for b in d.backends_vanished))
    if d.only_base or d.only_head:
        info.append(f"Rows only in BASE: {d.only_base}; only in HEAD: {d.only_head}.")
    summary = "".join(f'<li><a href="#{a}">{escape(t)}</a>: {len(getattr(d, a))}</li>' for a, t, _ in SECTIONS)
    body = []
    for attr, title, what in SECTIONS:
        items = getattr(d, attr)
        rows = []
        for c in items[:limit]:
            v, why, ratio, case, repro = _change_cells(c)
            rows.append(
                f"<tr><td><code>{escape(c.backend)}</code></td><td>{escape(v)}</td><td>{escape(why)}</td>"
                f'<td class="num">{escape(ratio)}</td>'
                f'<td>{escape(case)}<br><span class="small">case {escape(c.case_id)}</span></td>'
                f'<td><pre class="repro">{escape(repro)}</pre></td></tr>'
            )
        more = f'<p class="small">{len(items) - limit} more not shown.</p>' if len(items) > limit else ""
        table = (
            "<table><thead><tr><th>backend</th><th>verdict</th><th>reasons</th><th>err ratio</th><th>case</th><th>repro</th></tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table>{more}"
            if rows
            else '<p class="small">none</p>'
        )
        body.append(f'<section id="{attr}"><h2>{escape(title)} ({len(items)})</h2><p class="small">{escape(what)}</p>{table}</section>')
    title = f"attn-parity diff: {d.base.path.name} → {d.head.path.name}"
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>'
        f"<style>{CSS}</style></head><body><main>"
        f'<h1>{escape(title)}</h1><p id="status"><span class="status {cls}">{escape(headline(d))}</span></p>'
        f'<p class="meta">BASE {escape(str(d.base.path))} → HEAD {escape(str(d.head.path))}; {d.matched} rows matched on (backend, case); '
        f"threshold: ratio x{d.ratio_threshold:g} and +{d.min_ratio_delta:g}</p>"
        + "".join(f"<p>{x}</p>" for x in info)
        + f"<ul>{summary}</ul>{''.join(body)}</main></body></html>\n"
    )
