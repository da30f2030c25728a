"""The version diff's one page (``vdiff.md`` and ``vdiff.html``): the same tables in both, built once
from a :class:`parity.report.vdiff.VersionDiff` (:func:`tables`) and rendered twice."""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Sequence
from html import escape
from typing import Any

from .runs import Run, case_text
from .vdiff import RowPair, Side, VersionDiff


@dataclasses.dataclass(frozen=True)
class Table:
    key: str  # the html anchor
    title: str
    note: str
    header: tuple[str, ...]
    rows: Sequence[tuple[str, ...]]
    more: int = 0  # rows left out past the limit
    repro: tuple[str, ...] = ()  # repro lines (new findings)


def _fmt(v: float) -> str:
    if math.isnan(v):
        return "–"
    return "∞" if v == math.inf else f"{v:.3g}"


def headline(d: VersionDiff) -> str:
    fixed = sum(1 for f in d.findings if f.status == "fixed")
    still = sum(1 for f in d.findings if f.status != "fixed")
    known = f"{fixed} finding{'s' * (fixed != 1)} fixed, {still} not fixed"
    if d.regressions:
        parts = [f"{len(d.new)} rows with new findings at HEAD"] if d.new else []
        if d.ratio_up:
            parts.append(f"{len(d.ratio_up)} error ratios up more than {d.ratio_threshold:g}x")
        if d.coverage_lost and not d.allow_coverage_loss:
            parts.append(f"coverage lost on {len(d.coverage_lost)} rows")
        return f"REGRESSION: {', '.join(parts)} ({known})"
    return f"no regression ({known}, {d.matched} rows compared)"


def _where(run: Run) -> str:
    env = run.env
    if env.get("missing"):  # no environment.json (a run killed before writing it): nothing of its machine is known
        return f"{run.path} (no environment.json: its date, torch, GPU and backend versions were not recorded)"
    gpu = (env.get("gpu") or {}).get("name") if isinstance(env.get("gpu"), dict) else ""
    bits = [str(env.get("date_utc") or "date not recorded"), f"torch {env.get('torch') or '?'}", gpu or "no GPU"]
    if env.get("partial"):  # a run cut short (a time limit, a signal, killed while in progress): its rows are some of the cases
        bits.append(f"PARTIAL: {env.get('partial_why') or 'cut short'}")
    return f"{run.path} ({', '.join(bits)})"


def _pairs_table(d: VersionDiff) -> Table:
    rows = []
    for p in d.pairs:
        mine = [rp for rp in d.rows if rp.pair == p]
        n = sum(1 for rp in mine if rp.base and rp.head)
        changed = sum(1 for rp in d.changes if rp.pair == p)
        new = sum(1 for rp in d.new if rp.pair == p)
        rows.append(
            (
                p.base if p.base == p.head else f"{p.base} → {p.head}",
                p.base_version or "?",
                p.head_version or "?",
                str(n),
                str(changed),
                str(new),
            )
        )
    return Table(
        "pairs", "Versions", "", ("backend", "BASE version", "HEAD version", "cases in both", "verdict changes", "new at HEAD"), rows
    )


def _changes_table(d: VersionDiff, limit: int) -> Table:
    counts = Counter((rp.base.verdict, rp.head.verdict) for rp in d.changes)  # type: ignore[union-attr]
    summary = ", ".join(f"{b} → {h}: {n}" for (b, h), n in counts.most_common())
    rows = [
        (rp.pair.head, f"{rp.base.verdict} → {rp.head.verdict}", _entries(rp), _why(rp), case_text(rp.row), rp.case_id)  # type: ignore[union-attr]
        for rp in d.changes[:limit]
    ]
    note = f"the verdict `parity run` gives at each version (entries as written). {summary}".rstrip(". ")
    return Table(
        "changes",
        f"Verdict changes ({len(d.changes)})",
        note,
        ("backend", "verdict", "entry", "reasons at HEAD", "case", "case id"),
        rows,
        max(0, len(d.changes) - limit),
    )


def _entries(rp: RowPair) -> str:
    b = rp.base.mechanism or rp.base.entry if rp.base else ""
    h = rp.head.mechanism or rp.head.entry if rp.head else ""
    return b if b == h else f"{b or '–'} → {h or '–'}"


def _why(rp: RowPair) -> str:
    r = rp.head.row if rp.head else {}
    return str(r.get("reasons") or r.get("detail") or "")[:160]


def _findings_table(d: VersionDiff) -> Table:
    rows = [
        (f.entry, f.status, str(f.base_rows), str(f.still), str(f.fixed), str(f.other), str(f.not_run), f.versions or "(any)", f.note)
        for f in d.findings
    ]
    note = (
        "each known divergence explaining BASE rows (by its mechanism, version range ignored), and what those rows do at HEAD: "
        "fail the same way (still), pass (fixed), fail otherwise, or do not run"
    )
    header = ("entry", "status", "BASE rows", "still", "fixed", "otherwise", "not run", "versions", "versions vs evidence")
    return Table("findings", f"Findings fixed and still present ({len(d.findings)} entries)", note, header, rows)


def _new_table(d: VersionDiff, limit: int) -> Table:
    groups: dict[tuple[str, str, str, str], list[RowPair]] = {}
    for rp in d.new:
        h = rp.head
        key = (rp.pair.head, str(h.raw or ""), str(h.row.get("reasons") or str(h.row.get("detail") or "")[:100]), h.mechanism)  # type: ignore[union-attr]
        groups.setdefault(key, []).append(rp)
    ordered = sorted(groups.items(), key=lambda kv: -len(kv[1]))
    rows = [
        (backend, raw, why, mech or "none", f"{rps[0].base.verdict if rps[0].base else '(absent)'}", str(len(rps)), case_text(rps[0].row))
        for (backend, raw, why, mech), rps in ordered[:limit]
    ]
    note = (
        "failing at HEAD, not at BASE (or failing there by a known divergence's mechanism and at HEAD not by it); grouped, one example each"
    )
    repro = tuple(str(rps[0].row.get("repro") or "") for _, rps in ordered[:limit] if rps[0].row.get("repro"))
    header = ("backend", "HEAD verdict", "reasons / detail", "entry (by mechanism)", "BASE verdict", "rows", "example case")
    return Table(
        "new", f"New findings at HEAD ({len(d.new)} rows, {len(groups)} kinds)", note, header, rows, max(0, len(ordered) - limit), repro
    )


def _side(side: Side | None) -> Side:
    """A side of a pair these tables list (both present: rows that ran at both versions)."""
    assert side is not None, "a row listed here ran at both versions"
    return side


def _rows_table(key: str, title: str, note: str, items: list[RowPair], limit: int) -> Table:
    rows = [
        (
            rp.pair.head,
            f"{_side(rp.base).verdict} → {_side(rp.head).verdict}",
            _fmt(_side(rp.base).num("err_ratio")) + " → " + _fmt(_side(rp.head).num("err_ratio")),
            case_text(rp.row),
        )
        for rp in items[:limit]
    ]
    return Table(key, f"{title} ({len(items)})", note, ("backend", "verdict", "err ratio", "case"), rows, max(0, len(items) - limit))


def _moved_tables(d: VersionDiff) -> list[Table]:
    stats = []
    for s in d.moved:
        q = s.quantiles()
        stats.append(
            (
                s.label,
                str(len(s.ratios)),
                str(s.up),
                str(s.down),
                *(_fmt(q.get(k, math.nan)) for k in ("min", "p10", "median", "p90", "max")),
            )
        )
    f = f"{d.factor:g}"
    note = f"rows passing at both versions: HEAD / BASE of each number; moved = x{f} or more, or 1/{f} or less (--factor)"
    note += "; 0 / 0 = 1, x / 0 = ∞"
    header = ("number", "rows", f"up x{f}+", f"down x{f}+", "min", "p10", "median", "p90", "max")
    out = [Table("moved", "Numbers moved where both pass", note, header, stats)]
    top = [
        (rp.pair.head, s.label, _fmt(rp.base.num(s.column)), _fmt(rp.head.num(s.column)), _fmt(r), case_text(rp.row))  # type: ignore[union-attr]
        for s in d.moved
        for rp, r in s.top
    ]
    out.append(
        Table(
            "moved-rows",
            f"Rows that moved most ({len(top)})",
            "up to 10 per number",
            ("backend", "number", "BASE", "HEAD", "ratio", "case"),
            top,
        )
    )
    return out


def tables(d: VersionDiff, limit: int) -> list[Table]:
    return [
        _pairs_table(d),
        _changes_table(d, limit),
        _findings_table(d),
        _new_table(d, limit),
        _rows_table("coverage", "Coverage lost", "ran at BASE, unsupported / unavailable at HEAD", d.coverage_lost, limit),
        _rows_table(
            "ratio",
            "Error ratio up",
            f"err ratio (error / the same-dtype baseline's) up more than x{d.ratio_threshold:g} and +{d.min_ratio_delta:g}",
            d.ratio_up,
            limit,
        ),
        *_moved_tables(d),
    ]


def _intro(d: VersionDiff) -> list[str]:
    lines = [f"BASE {_where(d.base)}", f"HEAD {_where(d.head)}", f"{d.matched} rows matched on (pair, case)"]
    if d.only_base or d.only_head:
        lines.append(f"rows only at BASE: {d.only_base}; only at HEAD: {d.only_head}")
    return lines


def render_markdown(d: VersionDiff, limit: int = 20) -> str:
    from .text import md_cell

    out = [f"## attn-parity version diff {'❌' if d.regressions else '✅'} {headline(d)}", ""]
    out += [f"- {md_cell(x)}" for x in _intro(d)] + [""]
    for t in tables(d, limit):
        out += [f"### {t.title}", ""] + ([f"_{t.note}_", ""] if t.note else [])
        if not t.rows:
            out += ["none", ""]
            continue
        out += ["| " + " | ".join(t.header) + " |", "|" + "---|" * len(t.header)]
        out += ["| " + " | ".join(md_cell(c) for c in row) + " |" for row in t.rows]
        if t.more:
            out.append(f"\n… and {t.more} more (vdiff.html shows more).")
        if t.repro:
            out += ["", "<details><summary>Reproduce</summary>", "", "```bash", *t.repro, "```", "", "</details>"]
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def render_html(d: VersionDiff, limit: int = 200) -> str:
    from .html import CSS

    def table(t: Table) -> str:
        if not t.rows:
            return '<p class="small">none</p>'
        head = "".join(f"<th>{escape(h)}</th>" for h in t.header)
        body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>" for row in t.rows)
        more = f'<p class="small">{t.more} more not shown.</p>' if t.more else ""
        repro = "".join(f'<pre class="repro">{escape(r)}</pre>' for r in t.repro)
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{more}{repro}"

    sections: list[Any] = [
        f'<section id="{t.key}"><h2>{escape(t.title)}</h2>'
        + (f'<p class="small">{escape(t.note)}</p>' if t.note else "")
        + table(t)
        + "</section>"
        for t in tables(d, limit)
    ]
    title = f"attn-parity version diff: {d.base.path.name} → {d.head.path.name}"
    status = f'<span class="status {"bad" if d.regressions else "good"}">{escape(headline(d))}</span>'
    meta = "".join(f'<p class="meta">{escape(x)}</p>' for x in _intro(d))
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title><style>{CSS}</style></head>'
        f'<body><main><h1>{escape(title)}</h1><p id="status">{status}</p>{meta}{"".join(sections)}</main></body></html>\n'
    )
