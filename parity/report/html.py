"""``report.html`` of a run folder: one self-contained file, inline SVG plots, no JavaScript, no
network. Renders the data layer (:mod:`parity.report.data`) and the loaded run
(:mod:`parity.report.runs`); it does not import the text renderer (:mod:`parity.report.text`).
:mod:`parity.report.write` writes it beside summary.md and junit.xml.

Known divergences (:mod:`parity.expect`): rows a run judged keep their verdicts; rows of older
runs are judged with the expectations given (default: ``$PARITY_EXPECT`` or the packaged file),
so a committed run renders known vs new; results.csv is not rewritten. ``expected`` rows get
their own (amber) chip and a "Known divergences" section, and are not failures;
``unexpected-pass`` rows are failures (red outline chip), listed with the entry they contradict.
"""

from __future__ import annotations

import math
from html import escape
from typing import Any

from .. import coverage, runfolder_decode
from ..results import Outcome
from . import svg
from .data import (
    CHECK_NAMES,
    _finite_or,
    case_dict_text,
    check_words,
    consistency_counts,
    counts_by,
    coverage_data,
    decode_series,
    engine_checks,
    fmt,
    gate_note,
    gpu_text,
    known_rows,
    model_counts,
    n_expected,
    peak_memory,
    records,
    reduced_note,
    smallest_failing,
    stage_rows,
    status_line,
    unmatched_entries,
    why_text,
    work_split,
    worst_rows,
)
from .runs import FAILING, Run, case_text, dtype_order, family_order, partial_words

#: Chips in the matrix, in order: verdicts counted together, css class, label.
CHIPS = (
    ((Outcome.PASS,), "c-pass", "pass"),
    ((Outcome.FAIL,), "c-fail", "fail"),
    ((Outcome.ERROR, Outcome.CRASH, Outcome.TIMEOUT), "c-err", "error / crash / timeout"),
    ((Outcome.UNEXPECTED_PASS,), "c-xpass", "unexpected pass (a strict known divergence passed)"),
    ((Outcome.EXPECTED,), "c-exp", "expected (a known divergence)"),
    ((Outcome.UNSUPPORTED,), "c-unsup", "unsupported"),
    ((Outcome.UNAVAILABLE,), "c-unav", "unavailable"),
)
MAX_MASKS = 6
MAX_ROWS_TABLE = 400
MAX_POINTS = 1500  # per backend and plot: every failing row, a sample of the passing ones
#: decode.csv columns worth a reviewer's eye (parity.decode.run.COLUMNS); other CSVs are shown whole.
DECODE_COLUMNS = (
    "backend",
    "model",
    "dtype",
    "window",
    "prompt_len",
    "steps",
    "verdict",
    "div_class",
    "first_div_step",
    "token_agreement",
    "tf_max_abs_err",
    "margin_over_noise",
    "detail",
)


# ---------------------------------------------------------------- HTML

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;color:#24292f;margin:0;background:#fff;font-size:14px;line-height:1.45}
main{max-width:1180px;margin:0 auto;padding:18px 24px 60px}
h1{font-size:22px;margin:4px 0 6px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #d0d7de;padding-bottom:4px}
h3{font-size:15px;margin:16px 0 6px}
.status{display:inline-block;padding:3px 10px;border-radius:12px;font-weight:600;color:#fff}
.status.bad{background:#cf222e}.status.good{background:#1a7f37}
.meta{color:#57606a}
table{border-collapse:collapse;margin:6px 0}th,td{border:1px solid #d0d7de;padding:4px 7px;vertical-align:top;text-align:left}
th{background:#f6f8fa;font-weight:600}td.num{text-align:right;font-variant-numeric:tabular-nums}
#matrix td{text-align:center;white-space:nowrap}#matrix td.be{text-align:left}
#matrix td.be,#matrix thead tr:first-child th:first-child{position:sticky;left:0;background:#fff;z-index:1}
#known-table td{overflow-wrap:anywhere}#known-table td:nth-child(3){min-width:9em}
#matrix td.bad{background:#ffebe9}#matrix td.good{background:#dafbe1}#matrix td.none{background:#f6f8fa}
.chip{display:inline-block;min-width:18px;padding:0 5px;margin:1px;border-radius:9px;font-size:12px;font-weight:600;text-align:center}
.c-pass{background:#1a7f37;color:#fff}.c-fail{background:#cf222e;color:#fff}.c-err{background:#8250df;color:#fff}
.c-exp{background:#bf8700;color:#fff}.c-xpass{background:#fff;color:#cf222e;border:1px solid #cf222e}
#matrix td.known{background:#fff8c5}.c-unsup{background:#8c959f;color:#fff}.c-unav{background:#fff;color:#57606a;border:1px solid #8c959f}
code,pre{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:12px}
pre.repro{background:#f6f8fa;border:1px solid #d0d7de;padding:6px 8px;white-space:pre-wrap;word-break:break-all;margin:4px 0;
user-select:all}
.worst{border:1px solid #d0d7de;border-left:4px solid #cf222e;padding:6px 10px;margin:8px 0;border-radius:4px}
.worst .why{font-weight:600}.worst.shrunk{border-left-color:#0969da}.small{font-size:12px;color:#57606a}
figure{display:inline-block;margin:6px 14px 10px 0;vertical-align:top;max-width:380px}
figcaption{font-size:12px;color:#57606a;margin-top:4px}
.legend span{display:inline-block;margin-right:12px}
.sw{display:inline-block;width:11px;height:11px;border:1px solid #8c959f;margin-right:4px;vertical-align:-1px}
nav a{margin-right:12px}
details>summary{cursor:pointer;color:#0969da}
.scroll{overflow-x:auto;max-width:100%}
#coverage-table td{text-align:center;white-space:nowrap;font-size:12px;padding:2px 4px}#coverage-table td:first-child{text-align:left}
#coverage-table td.bad{background:#ffebe9}#coverage-table td.good{background:#dafbe1}#coverage-table td.none{background:#f6f8fa}
th.vert{writing-mode:vertical-rl;transform:rotate(180deg);font-size:11px;padding:4px 2px;white-space:nowrap}
"""


def render_html(run: Run) -> str:
    env = run.env
    title = f"attn-parity report: {run.path.name}"
    kind, text = status_line(run)
    status = f'<span class="status {"good" if kind == Outcome.PASS else "bad"}">{escape(text)}</span>'
    meta = " · ".join(
        x
        for x in (
            env.get("date_utc", ""),
            f"torch {env['torch']}" if env.get("torch") else "",
            f"GPU: {gpu_text(env)}",
            f"profile {env['profile']}, seed {env.get('seed')}" if env.get("profile") else "",
            f"{env['wall_seconds']} s" if env.get("wall_seconds") is not None else "",
        )
        if x
    )
    sections = [
        ("matrix", "Matrix", _matrix(run)),
        *([("models", "Models", _models(run))] if model_counts(run) or peak_memory(run) else []),
        *([("checks", "Engine checks", _checks(run))] if engine_checks(run) else []),
        ("coverage", "Coverage", _coverage(run)),
        ("known", "Known divergences", _known(run)),
        ("worst", "Worst cases", _worst(run)),
        ("plots", "Error plots", _plots(run)),
        ("masks", "Effective masks of failing cases", _masks(run)),
    ]
    if run.consistency:
        sections.append(("consistency", "Decode and chunked-prefill consistency", _consistency(run)))
    if run.decode is not None or run.decode_path is not None:
        sections.append(("decode", "Decode divergence", _decode(run)))
    sections += [("environment", "Environment", _environment(run) + _stages(run)), ("rows", "All rows that did not pass", _rows(run))]
    nav = "".join(f'<a href="#{i}">{escape(t)}</a>' for i, t, _ in sections)
    body = "".join(f'<section id="{i}"><h2>{escape(t)}</h2>{html}</section>' for i, t, html in sections)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1"><title>{escape(title)}</title>'
        f"<style>{CSS}</style></head><body><main>"
        f'<h1>{escape(title)}</h1><p id="status">{status}</p><p class="meta">{escape(meta)}</p><nav>{nav}</nav>{body}'
        "</main></body></html>\n"
    )


def _chips(c: dict[str, int]) -> str:
    out = []
    for verdicts, cls, label in CHIPS:
        n = sum(c.get(v, 0) for v in verdicts)
        if n:
            out.append(f'<span class="chip {cls}" title="{n} {label}">{n}</span>')
    return "".join(out)


def _cell_class(c: dict[str, int]) -> str:
    if not c:
        return "none"
    if any(c.get(v, 0) for v in FAILING):
        return "bad"
    if c.get("expected", 0):
        return "known"
    return "good" if c.get("pass", 0) else "none"


def _matrix(run: Run) -> str:
    fams = family_order(run.df["family"])
    dts = dtype_order(run.df["dtype"])
    cells = counts_by(run, "backend", "family", "dtype")
    totals = counts_by(run, "backend")
    legend = "".join(f'<span><span class="chip {cls}">n</span> {escape(label)}</span>' for _, cls, label in CHIPS)
    head1 = (
        '<tr><th rowspan="2">backend</th>'
        + "".join(f'<th colspan="{len(dts)}">{escape(f)}</th>' for f in fams)
        + '<th rowspan="2">all</th></tr>'
    )
    head2 = "<tr>" + "".join(f"<th>{escape(d)}</th>" for _ in fams for d in dts) + "</tr>"
    body = []
    for b in run.backends():
        tds = [f'<td class="be"><code>{escape(b)}</code></td>']
        for f in fams:
            for d in dts:
                c = cells.get((b, f, d), {})
                tds.append(f'<td class="{_cell_class(c)}" data-family="{escape(f)}" data-dtype="{escape(d)}">{_chips(c) or "·"}</td>')
        t = totals.get((b,), {})
        tds.append(f'<td class="{_cell_class(t)}">{_chips(t)}</td>')
        body.append("<tr>" + "".join(tds) + "</tr>")
    unavailable = [
        f"<li><code>{escape(k)}</code>: {escape(str(v.get('unavailable')))}</li>"
        for k, v in (run.env.get("backends") or {}).items()
        if isinstance(v, dict) and v.get("unavailable")
    ]
    extra = f"<p>Unavailable here:</p><ul>{''.join(unavailable)}</ul>" if unavailable else ""
    return (
        f'<p class="legend">Rows per backend, case family and dtype: {legend}</p>'
        # a wide matrix (many families x dtypes) scrolls inside its own box, the backend column stays in view
        f'<div class="scroll" id="matrix-scroll"><table id="matrix-table"><thead>{head1}{head2}</thead>'
        f"<tbody>{''.join(body)}</tbody></table></div>{extra}"
    )


def _models(run: Run) -> str:
    """Per model and layer of a models run, each backend's verdicts; the peak device memory per backend (when recorded)."""
    models, mem, parts = model_counts(run), peak_memory(run), []
    if reduced_note(run):
        parts.append(f'<p class="bad"><b>Reduced lengths</b>: {escape(reduced_note(run))}; not the models\' real lengths.</p>')
    if models:
        backends = run.backends()
        head = "<tr><th>model</th><th>layer</th>" + "".join(f"<th><code>{escape(b)}</code></th>" for b in backends) + "</tr>"
        body = "".join(
            f"<tr><td>{escape(m)}</td><td>{escape(layer)}</td>"
            + "".join(f'<td class="{_cell_class(per.get(b, {}))}">{_chips(per.get(b, {})) or "·"}</td>' for b in backends)
            + "</tr>"
            for (m, layer), per in models.items()
        )
        parts.append(f'<div class="scroll"><table id="models-table"><thead>{head}</thead><tbody>{body}</tbody></table></div>')
    if mem:
        rows = "".join(
            f"<tr><td><code>{escape(b)}</code></td><td>{fmt(mx)}</td><td>{fmt(med)}</td><td>{n}</td></tr>"
            for b, (mx, med, n) in mem.items()
        )
        parts.append(
            '<table id="peak-mem-table"><thead><tr><th>backend</th><th>peak MB (max)</th><th>median</th>'
            f"<th>rows</th></tr></thead><tbody>{rows}</tbody></table>"
        )
    return "".join(parts)


def _worst(run: Run) -> str:
    worst = worst_rows(run)
    if not worst:
        closest = sorted(records(run), key=lambda r: -_finite_or(r["budget_frac_f"], -1.0))[:5]
        items = "".join(
            f"<li><code>{escape(r['backend'])}</code> {escape(case_text(r))}: budget used {fmt(r['budget_frac'])}, "
            f"err ratio {fmt(r['err_ratio'])}</li>"
            for r in closest
            if not math.isnan(r["budget_frac_f"])
        )
        known = f" ({n_expected(run)} expected rows: see Known divergences)" if n_expected(run) else ""
        return f"<p>No failing rows{known}. Closest to the budget:</p><ul>{items}</ul>"
    out = []
    counts = run.df[run.df["verdict"].isin(FAILING)].groupby("backend").size().to_dict()
    smallest = smallest_failing(run)
    for b, rows in worst.items():
        more = counts.get(b, 0) - len(rows)
        out.append(f"<h3><code>{escape(b)}</code>: {counts.get(b, 0)} failing rows{f' (worst {len(rows)} shown)' if more else ''}</h3>")
        if b in smallest:
            out.append(_smallest_html(smallest[b]))
        for s in (x for x in run.shrunk if x.get("backend") == b and x.get("repro")):
            case = s.get("case")
            shape = case_dict_text(case if isinstance(case, dict) else {})
            out.append(
                f'<div class="worst shrunk"><div class="why">Smallest failing case found by shrinking case {escape(str(s.get("from")))} '
                f"({escape(str(s.get('calls')))} calls{'; ' + escape(s['note']) if s.get('note') else ''}): "
                f"{escape(str(s.get('verdict')))} [{escape(str(s.get('reasons', '')))}]</div>"
                f'<div class="small">{escape(shape)}</div><pre class="repro">{escape(str(s["repro"]))}</pre></div>'
            )
        for r in rows:
            why = why_text(r, run)
            lines = [
                f'<div class="why">{escape(r["verdict"].upper())} [{escape(why)}] {escape(case_text(r))} '
                f'<span class="small">case {escape(r["case_id"])}</span></div>'
            ]
            if r.get("verdict") == Outcome.FAIL:
                lines.append(
                    f"<div>err ratio <b>{fmt(r.get('err_ratio'))}</b>, budget used <b>{fmt(r.get('budget_frac'))}</b>x, "
                    f"max |err| {fmt(r.get('max_abs_err'))} (budget {fmt(r.get('threshold_max'))}), "
                    f"{fmt(r.get('mismatch_pct'))}% of elements over budget</div>"
                )
            for k in ("mask_detail", "gqa_detail", "worst_where"):
                if r.get(k) and (k == "worst_where" or r.get(k.replace("detail", "check")) == "mismatch"):
                    lines.append(f'<div class="small">{escape(k.split("_")[0])}: {escape(r[k])}</div>')
            if r.get("lse_check") == "mismatch":
                lines.append(f'<div class="small">lse: {escape(r.get("lse_detail", "")[:600])}</div>')
            for c, name in CHECK_NAMES.items():
                if r.get(f"{c}_check") == "mismatch":
                    lines.append(f'<div class="small">{escape(name)}: {escape(r.get(f"{c}_detail", "")[:600])}</div>')
            if r.get("verdict") != Outcome.FAIL and r.get("detail") and r["detail"].strip() != why:
                lines.append(f'<div class="small">{escape(r["detail"][:600])}</div>')
            if r.get("_same"):
                lines.append(f'<div class="small">and {r["_same"]} more rows of this backend failed with the same message</div>')
            if r.get("repro"):
                lines.append(f'<pre class="repro">{escape(r["repro"])}</pre>')
            out.append(f'<div class="worst">{"".join(lines)}</div>')
    return "".join(out)


def _checks(run: Run) -> str:
    """The engine checks (``--invariance``, ``--graph-replay``): per backend, its rows by each check's value."""
    cells = engine_checks(run)
    head = "".join(f"<th>{escape(n)}</th>" for n in CHECK_NAMES.values())
    body = "".join(
        f"<tr><td><code>{escape(b)}</code></td>"
        + "".join(f"<td>{escape(check_words(cells.get(b, {}).get(c)))}</td>" for c in CHECK_NAMES)
        + "</tr>"
        for b in run.backends()
    )
    note = (
        "<p>Batch invariance: each sequence's output alone and in a rotated batch, bit for bit against the row's own; "
        "graph replay: the call captured in a CUDA graph, replayed on new inputs (and a padded batch), against eager. "
        "A mismatch is a failing reason (docs/engine-checks.md).</p>"
    )
    return f'{note}<table id="checks-table"><thead><tr><th>backend</th>{head}</tr></thead><tbody>{body}</tbody></table>'


def _smallest_html(s: dict[str, Any]) -> str:
    """The smallest failing case of the run for one backend (failing rows and shrunk cases alike)."""
    repro = f'<pre class="repro">{escape(s["repro"])}</pre>' if s.get("repro") else ""
    return (
        f'<div class="worst smallest"><div class="why">Smallest failing case of the run: {escape(s["text"])} '
        f"({s['size']} query x key elements x heads) {escape(str(s['verdict']).upper())} [{escape(str(s['why']))}] "
        f'<span class="small">{escape(s["source"])}</span></div>{repro}</div>'
    )


def _known(run: Run) -> str:
    """The known divergences the rows were judged with: per entry, rows expected and unexpected passes."""
    known = known_rows(run)
    files = ", ".join(f"<code>{escape(f)}</code>" for f in (run.expectations.files if run.expectations else ()))
    intro = (
        '<p class="small">A failing row that a known divergence (<code>--expect</code>, '
        f"{files or 'none loaded'}) describes is <b>expected</b>: counted apart, never a pass; a row a strict entry "
        "covers that passes is an <b>unexpected pass</b>, a failure (the entry is stale).</p>"
    )
    if not known:
        return intro + "<p>No known divergence loaded, and no row judged with one.</p>"
    body = []
    for k in known:
        e = k["entry"]
        link = escape(e.upstream if e else "")  # text, not a link: the report fetches and points nowhere
        body.append(
            f"<tr><td><code>{escape(k['id'])}</code></td><td><code>{escape(e.backend if e else '?')}</code></td>"
            f'<td class="small">{escape(e.condition_text() if e else "(not in the loaded files)")}</td>'
            f'<td class="num">{k["expected"]}</td><td class="num">{k["unexpected"] or ""}</td>'
            f"<td>{'strict' if e and e.strict else ('not strict' if e else '')}</td>"
            f'<td>{escape(e.explanation if e else "")}</td><td class="small">{link}</td></tr>'
        )
    head = "".join(
        f"<th>{h}</th>"
        for h in ("entry", "backend", "condition", "expected rows", "unexpected passes", "strict", "explanation", "upstream")
    )
    return intro + f'<table id="known-table"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>' + _unmatched(run)


def _unmatched(run: Run) -> str:
    """The entries for this run's backends that matched no row (:func:`parity.report.data.unmatched_entries`)."""
    n, unmatched = unmatched_entries(run)
    if not n:
        return ""
    if not unmatched:
        return f'<p id="known-unmatched" class="small">Every one of the {n} known divergences for this run\'s backends matched a row.</p>'
    items = "".join(
        f"<li><code>{escape(u['entry'].id)}</code> ({escape(u['entry'].backend)}){escape(' — ' + u['why'] if u['why'] else '')}</li>"
        for u in unmatched
    )
    return (
        f'<div id="known-unmatched"><p>Entries that matched nothing: {len(unmatched)} of the {n} known divergences for this '
        "run's backends matched no row (a backward entry counts only where a backward was checked; an entry for a "
        f"backend not in the run is not listed):</p><ul>{items}</ul></div>"
    )


def _point_title(r: dict[str, Any]) -> str:
    return (
        f"{r['backend']} {r['verdict']} {case_text(r)}\nerr ratio {fmt(r.get('err_ratio'))}, budget used {fmt(r.get('budget_frac'))}\n"
        f"{r.get('worst_where', '')}"
    )


def thin(recs: list[dict[str, Any]], limit: int) -> tuple[list[dict[str, Any]], int]:
    """At most ``limit`` rows per backend for the plots: every failing row, an even sample of the
    passing ones. Returns the rows kept and how many were left out."""
    kept: list[dict[str, Any]] = []
    left_out = 0
    by_backend: dict[str, list[dict[str, Any]]] = {}
    for r in recs:
        by_backend.setdefault(r["backend"], []).append(r)
    for rows in by_backend.values():
        fails = [r for r in rows if r["verdict"] != Outcome.PASS]
        passes = [r for r in rows if r["verdict"] == Outcome.PASS]
        room = max(limit - len(fails), 0)
        if len(passes) > room:
            step = len(passes) / max(room, 1)
            sample = [passes[int(k * step)] for k in range(room)]
            left_out += len(passes) - len(sample)
            passes = sample
        kept += fails + passes
    return kept, left_out


def _raw(r: dict[str, Any]) -> str:
    """The row's verdict before known divergences (older runs: the verdict)."""
    return r.get("raw_verdict") or r["verdict"]


def _plots(run: Run) -> str:
    recs, thinned = thin([r for r in records(run) if _raw(r) in (Outcome.PASS, Outcome.FAIL)], MAX_POINTS)
    if not recs:
        return "<p>No row ran to a comparison (nothing to plot).</p>"
    series: list[tuple[str, list[tuple[float, float, bool, str]]]] = []
    undrawn = 0
    for b in run.backends():
        pts = []
        for r in recs:
            if r["backend"] != b:
                continue
            if math.isnan(r["worst_left_edge_f"]) or math.isnan(r["budget_frac_f"]):
                undrawn += 1
                continue
            pts.append((r["worst_left_edge_f"], r["budget_frac_f"], _raw(r) == Outcome.FAIL, _point_title(r)))
        if pts:
            series.append((b, pts))
    edge = (
        svg.scatter(
            series,
            "worst element's row, relative to the window's left edge (i + d - left; < 0: window still filling)",
            "budget used (max|err| / budget)",
            hline=1.0,
            hline_label="budget",
            vline=0.0,
            vline_label="window full →",
        )
        if series
        else "<p>No row has a left window edge (all windows unbounded on the left).</p>"
    )
    note = f'<p class="small">{undrawn} rows not drawn: their window has no left edge.</p>' if undrawn else ""
    if thinned:
        note += (
            f'<p class="small">{thinned} passing rows left out of both plots (at most {MAX_POINTS} points per backend; '
            "every failing row is drawn).</p>"
        )
    groups: list[tuple[str, list[tuple[float, str, str]]]] = []
    for b in run.backends():
        vals = [(r["err_ratio_f"], r["verdict"], _point_title(r)) for r in recs if r["backend"] == b and not math.isnan(r["err_ratio_f"])]
        if vals:
            groups.append((b, vals))
    kmax = {float(v["k_max"]) for v in (run.env.get("budgets") or {}).values() if isinstance(v, dict) and v.get("k_max") is not None}
    vline = kmax.pop() if len(kmax) == 1 else None
    ratio = svg.strips(
        groups,
        "error ratio (max|err| / same-dtype baseline error), log scale",
        vline=vline,
        vline_label=f"k_max = {vline:g}" if vline is not None else "",
    )
    return (
        "<h3>Error against query position relative to the window edge</h3>"
        '<p class="small">One point per row that ran: where its worst element sits and how much of the max-|err| budget it used. '
        "Bugs at the window edge sit near x = 0; a point above the dashed line fails the budget. Hover a point for the case.</p>"
        f'<div id="plot-edge">{edge}</div>{note}'
        "<h3>Error-ratio distribution per backend</h3>"
        '<p class="small">Box: quartiles, bar: median; green pass, red fail, amber expected (a known divergence).</p>'
        f'<div id="plot-ratio">{ratio}</div>'
    )


def _mask_legend() -> str:
    items = (("1", "seen, as the spec says"), ("+", "extra key seen"), ("-", "key missing"), ("p", "partial weight"), (".", "masked"))
    return (
        '<p class="legend">'
        + "".join(f'<span><span class="sw" style="background:{svg.MASK_COLOURS[ch]}"></span>{escape(t)}</span>' for ch, t in items)
        + "</p>"
    )


def _masks(run: Run) -> str:
    if not run.masks:
        return "<p>No mask-probe mismatch in this run.</p>"
    by_key = {(r["backend"], r["case_id"]): r for r in records(run)}
    chosen, seen_backends = [], set()
    for m in run.masks:  # one per backend first, then the rest
        if m.get("backend") not in seen_backends:
            chosen.append(m)
            seen_backends.add(m.get("backend"))
    chosen += [m for m in run.masks if m not in chosen]
    figs = []
    for m in chosen[:MAX_MASKS]:
        rows = m.get("rows") or []
        r = by_key.get((m.get("backend"), m.get("case_id")), {})
        shown = f"rows 0..{len(rows) - 1} of {m.get('sq', '?')}, keys 0..{max((len(x) for x in rows), default=0) - 1} of {m.get('sk', '?')}"
        label = f"effective mask of {m.get('backend')} case {m.get('case_id')}"
        figs.append(
            f'<figure class="mask">{svg.mask_image(rows, label)}<figcaption><code>{escape(str(m.get("backend")))}</code> '
            f"{escape(case_text(r) if r else str(m.get('case_id')))}; seq {m.get('seq')} head {m.get('head')}; {escape(shown)} "
            f"(query rows down, keys across).<br>{escape(r.get('mask_detail', ''))}</figcaption></figure>"
        )
    more = f'<p class="small">{len(run.masks) - MAX_MASKS} more in masks.jsonl.</p>' if len(run.masks) > MAX_MASKS else ""
    return _mask_legend() + "".join(figs) + more


def _decode(run: Run) -> str:
    if run.decode is None or run.decode_path is None:
        return f"<p>{escape(str(run.decode_path))} could not be read as CSV.</p>"
    df = run.decode
    rel = run.decode_path.relative_to(run.path)
    parts = [f'<p class="small">From <code>{escape(str(rel))}</code>: {len(df)} rows.</p>']
    if "verdict" in df.columns and "backend" in df.columns:
        counts = df.groupby("backend")["verdict"].value_counts().unstack(fill_value=0)
        parts.append("<h3>Verdicts per backend</h3>" + _table(counts.reset_index().to_dict("records"), ["backend", *counts.columns], 50))
    plot = None
    if run.decode_steps is not None:
        plot = decode_series(run.decode_steps)
        source = runfolder_decode.DECODE_STEPS
    if plot is None:
        plot = decode_series(df)
        source = str(rel.name)
    if plot is not None:
        xcol, ycol, series = plot
        parts.append(
            f"<h3>{escape(ycol)} against {escape(xcol)}</h3>"
            f'<p class="small">From {escape(source)}: the largest {escape(ycol)} per {escape(xcol)}, one line per backend.</p>'
            f'<div id="plot-decode">{svg.lines(series, xcol, ycol)}</div>'
        )
    cols = [c for c in DECODE_COLUMNS if c in df.columns]
    if len(cols) < 4:  # not parity.decode's schema: show whatever the CSV holds
        cols = list(df.columns)
    else:
        parts.append(f'<p class="small">Main columns shown; all {len(df.columns)} are in {escape(str(rel.name))}.</p>')
    parts.append(_table(df.to_dict("records"), cols, MAX_ROWS_TABLE))
    return "".join(parts)


def _consistency(run: Run) -> str:
    verdicts = sorted({r.get("verdict", "") for r in run.consistency}, key=lambda v: (v != Outcome.PASS, v))
    rows = [{"backend": b, **{v: c.get(v, 0) for v in verdicts}} for b, c in consistency_counts(run).items()]
    intro = (
        '<p class="small">consistency.csv (<code>python -m parity.consistency</code>): each decode step (Sq = 1 at '
        "position p) must equal the full prefill's row p, and prefill in odd-sized chunks must equal one-shot "
        "prefill, within twice the case's error budget; both also against the float64 reference.</p>"
    )
    bad = [r for r in run.consistency if r.get("verdict") != Outcome.PASS]
    cols = ["backend", "check", "where", "case", "max_diff_vs_prefill", "max_err_vs_reference", "tolerance", "verdict", "detail"]
    detail = f"<h3>Rows that did not pass</h3>{_table(bad, cols, 60)}" if bad else "<p>Every row passed.</p>"
    return intro + _table(rows, ["backend", *verdicts], 200) + detail


def _table(rows: list[dict[str, Any]], cols: list[str], limit: int) -> str:
    head = "".join(f"<th>{escape(c)}</th>" for c in cols)
    body = []
    for r in rows[:limit]:
        tds = []
        for c in cols:
            v = str(r.get(c, ""))
            cls = ' class="num"' if v and _is_num(v) else ""
            tds.append(f"<td{cls}>{escape(v[:300])}</td>")
        body.append("<tr>" + "".join(tds) + "</tr>")
    more = f'<p class="small">{len(rows) - limit} more rows in the CSV.</p>' if len(rows) > limit else ""
    return f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>{more}'


def _is_num(v: str) -> bool:
    try:
        float(v)
    except ValueError:
        return False
    return True


def _environment(run: Run) -> str:
    env = run.env
    if not env or env.get("missing"):
        return "<p>No environment.json in this folder: the environment is missing (the run did not finish).</p>"
    keys = [
        ("date (UTC)", env.get("date_utc")),
        ("command", env.get("command")),
        ("GPU", gpu_text(env)),
        ("torch", env.get("torch")),
        ("python", env.get("python")),
        ("platform", env.get("platform")),
        ("CPUs", env.get("cpu_count")),
        ("attn-parity", env.get("attn_parity")),
        ("profile / seed / cases", f"{env.get('profile')} / {env.get('seed')} / {env.get('cases')}"),
        ("reference device", env.get("reference_device")),
        ("wall / reference seconds", f"{env.get('wall_seconds')} / {env.get('reference_seconds')}"),
        ("lanes (--jobs)", env.get("jobs")),
        ("work split", work_split(run)),
        ("memory gate", gate_note(run)),
        ("PARTIAL", partial_words(run) or None),
        (
            "resumed",
            f"completed by {len(env['earlier_runs'])} earlier run(s) into this folder plus this one" if env.get("earlier_runs") else None,
        ),
        ("shims", ", ".join(env.get("shims") or []) or "none"),
    ]
    rows = "".join(f"<tr><th>{escape(k)}</th><td>{escape(str(v))}</td></tr>" for k, v in keys if v not in (None, ""))
    bk = []
    for backend, info in (env.get("backends") or {}).items():
        if not isinstance(info, dict):
            continue
        status = f"unavailable: {info['unavailable']}" if info.get("unavailable") else "available"
        bk.append(
            f"<tr><td><code>{escape(backend)}</code></td><td>{escape(str(info.get('name', '')))}</td>"
            f"<td>{escape(str(info.get('device', '')))}</td>"
            f"<td>{escape(str(info.get('version', '')))}</td><td>{escape(status)}</td></tr>"
        )
    btable = (
        "<h3>Backends</h3><table><thead><tr><th>backend</th><th>name</th><th>device</th><th>version</th><th>status</th></tr></thead>"
        f"<tbody>{''.join(bk)}</tbody></table>"
        if bk
        else ""
    )
    budgets = env.get("budgets") or {}
    fields = sorted({k for v in budgets.values() if isinstance(v, dict) for k in v})
    btab = ""
    if budgets:
        btab = (
            "<h3>Error budgets</h3><table><thead><tr><th>dtype</th>"
            + "".join(f"<th>{escape(f)}</th>" for f in fields)
            + "</tr></thead><tbody>"
            + "".join(
                f"<tr><td>{escape(d)}</td>" + "".join(f'<td class="num">{escape(str(v.get(f, "")))}</td>' for f in fields) + "</tr>"
                for d, v in budgets.items()
                if isinstance(v, dict)
            )
            + "</tbody></table>"
        )
    return f'<table id="env-table"><tbody>{rows}</tbody></table>{btable}{btab}'


def _stages(run: Run) -> str:
    """Where each backend's seconds went (timing.json's ``stages``), or "" when not recorded."""
    head, body = stage_rows(run)
    if not body:
        return ""
    cells = "".join(
        "<tr>" + f"<td><code>{escape(r[0])}</code></td>" + "".join(f'<td class="num">{escape(c)}</td>' for c in r[1:]) + "</tr>"
        for r in body
    )
    note = (
        "<p>Seconds summed over each backend's rows (OUT/stages.jsonl has them per row). compile: first-use compilation, "
        "estimated from the first row of each configuration; ipc: time waited beyond the worker's own; "
        "reference: charged to the first backend to meet each case.</p>"
    )
    return (
        f'<h3>Where the time went</h3>{note}<table id="stage-table"><thead><tr>'
        + "".join(f"<th>{escape(h)}</th>" for h in head)
        + f"</tr></thead><tbody>{cells}</tbody></table>"
    )


#: The log-sum-exp columns the rows table shows where some row checked an LSE.
LSE_SHOWN = ("lse_check", "lse_max_abs_err", "lse_budget")
#: The engine checks' columns the rows table shows where some row ran one (--invariance, --graph-replay).
CHECKS_SHOWN = ("invariance_check", "invariance_max_diff", "graph_check", "graph_max_diff")


def _rows(run: Run) -> str:
    recs = [r for r in records(run) if r["verdict"] != Outcome.PASS]
    if not recs:
        return "<p>Every row passed.</p>"
    cols: list[str] = [
        c
        for c in (
            "backend",
            "verdict",
            "family",
            "model",
            "layer",
            "dtype",
            "q_lens",
            "k_lens",
            "window_left",
            "window_right",
            "reasons",
            "expected_id",
            *(("unconfirmed_id",) if any(r.get("unconfirmed_id") for r in recs) else ()),
            "err_ratio",
            *(LSE_SHOWN if any(r.get("lse_check") in ("ok", "mismatch") for r in recs) else ()),
            *(CHECKS_SHOWN if engine_checks(run) else ()),
            "detail",
            "repro",
        )
        if c in run.columns
    ]
    return (
        f"<details><summary>{len(recs)} rows (unsupported and unavailable included)</summary>{_table(recs, cols, MAX_ROWS_TABLE)}</details>"
    )


__all__ = ["render_html"]


def _coverage_cell(n: dict[str, int] | None, gap: bool) -> str:
    if not n or not (n["ran"] or n["unsupported"]):
        return '<td class="none">·</td>'
    cls = "good" if n["ran"] else ("bad" if gap else "none")
    unsup = f' <span class="small">/{n["unsupported"]}</span>' if n["unsupported"] else ""
    return f'<td class="{cls}">{n["ran"]}{unsup}</td>'


def _coverage(run: Run) -> str:
    """The coverage section: a matrix of cells x backends, the window grid, what a backend never ran."""
    d = coverage_data(run)
    cols = [b for b in d.backends if b in d.never]
    head = "".join(f'<th class="vert"><code>{escape(b)}</code></th>' for b in cols)
    body = [f"<tr><td>window grid</td>{''.join(f'<td class=num>{d.grid[b]}/100</td>' for b in cols)}</tr>"]
    for dim, values in coverage.DIMENSIONS.items():
        for v in values:
            tds = "".join(
                _coverage_cell(d.tally.get(b, {}).get((dim, v)), (dim, v) in {c for cs in d.gaps.get(b, {}).values() for c in cs})
                for b in cols
            )
            body.append(f"<tr><td>{escape(dim)} = <code>{escape(v)}</code></td>{tds}</tr>")
    words = []
    for b in cols:
        line = f"<li><code>{escape(b)}</code>: {d.grid[b]} of 100 window-grid cells"
        if d.never[b]:
            line += "; never ran " + ", ".join(escape(f"{x}={y}") for x, y in d.never[b])
        if b in d.gaps:
            line += f". <b>Gap</b>: {escape(coverage.describe_gap(b, d.gaps[b]))}"
        words.append(line + "</li>")
    note = f"<p><b>Sizes capped:</b> {escape(d.note)}.</p>" if d.note else ""
    return (
        "<p>Rows each backend <b>ran</b> (any verdict but unsupported / unavailable) per value of the coverage model "
        "(<code>parity/coverage.py</code>), <span class=small>/unsupported</span>; red: it ran none while a backend of its "
        "family did. The window grid counts left x right x length cells (5 x 5 x 4) of bottom-right fp16/bf16 rows. "
        f"Full table: <code>coverage.csv</code>.</p>{note}"
        f'<div class="scroll"><table id="coverage-table"><thead><tr><th>cell</th>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></div><ul>{''.join(words)}</ul>"
    )
