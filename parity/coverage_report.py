"""The coverage section of the reports: which cells of the coverage model each backend ran.

Data from :func:`parity.coverage.tally` over the run's rows; rendered as HTML (a matrix of
cells x backends, ran / unsupported counts, the window grid per backend, and in words what
a backend never ran) and as Markdown (one line per backend). Both renderers use :func:`data`.
"""

from __future__ import annotations

import dataclasses
from html import escape

from . import coverage
from .backends import marker_for
from .runs import Run


@dataclasses.dataclass
class CoverageData:
    backends: list[str]
    tally: coverage.Tally
    grid: dict[str, int]  # backend -> window-grid cells run (of 100)
    never: dict[str, list[coverage.Cell]]  # backend -> model values (not grid) it ran none of
    gaps: dict[str, dict[str, list[coverage.Cell]]]  # backend -> family member -> cells only the member ran
    note: str  # the long-case cap, when the run had one


def data(run: Run) -> CoverageData:
    t = coverage.tally(run.df.to_dict("records"))
    ran_any = [b for b in run.backends() if any(n["ran"] for n in t.get(b, {}).values())]
    never = {}
    for b in ran_any:
        per = t.get(b, {})
        never[b] = [(d, v) for d, vs in coverage.DIMENSIONS.items() for v in vs if not per.get((d, v), {}).get("ran")]
    design = run.env.get("design") or {}
    return CoverageData(run.backends(), t, {b: coverage.grid_count(t, b) for b in run.backends()}, never,
                        coverage.gaps(t, marker_for), str(design.get("long_cap_why") or ""))


def _cell(n: dict[str, int] | None, gap: bool) -> str:
    if not n or not (n["ran"] or n["unsupported"]):
        return '<td class="none">·</td>'
    cls = "good" if n["ran"] else ("bad" if gap else "none")
    unsup = f' <span class="small">/{n["unsupported"]}</span>' if n["unsupported"] else ""
    return f'<td class="{cls}">{n["ran"]}{unsup}</td>'


def html(run: Run) -> str:
    d = data(run)
    cols = [b for b in d.backends if b in d.never]
    head = "".join(f'<th class="vert"><code>{escape(b)}</code></th>' for b in cols)
    body = [f"<tr><td>window grid</td>{''.join(f'<td class=num>{d.grid[b]}/100</td>' for b in cols)}</tr>"]
    for dim, values in coverage.DIMENSIONS.items():
        for v in values:
            tds = "".join(_cell(d.tally.get(b, {}).get((dim, v)), (dim, v) in {c for cs in d.gaps.get(b, {}).values() for c in cs})
                          for b in cols)
            body.append(f"<tr><td>{escape(dim)} = <code>{escape(v)}</code></td>{tds}</tr>")
    words = []
    for b in cols:
        line = f"<li><code>{escape(b)}</code>: {d.grid[b]} of 100 window-grid cells"
        if d.never[b]:
            line += "; never ran " + ", ".join(escape(f"{x}={y}") for x, y in d.never[b])
        if b in d.gaps:
            line += f'. <b>Gap</b>: {escape(coverage.describe_gap(b, d.gaps[b]))}'
        words.append(line + "</li>")
    note = f"<p><b>Sizes capped:</b> {escape(d.note)}.</p>" if d.note else ""
    return (
        "<p>Rows each backend <b>ran</b> (any verdict but unsupported / unavailable) per value of the coverage model "
        "(<code>parity/coverage.py</code>), <span class=small>/unsupported</span>; red: it ran none while a backend of its "
        "family did. The window grid counts left x right x length cells (5 x 5 x 4) of bottom-right fp16/bf16 rows. "
        f"Full table: <code>coverage.csv</code>.</p>{note}"
        f'<div class="scroll"><table id="coverage-table"><thead><tr><th>cell</th>{head}</tr></thead>'
        f'<tbody>{"".join(body)}</tbody></table></div><ul>{"".join(words)}</ul>'
    )


def markdown(run: Run) -> list[str]:
    d = data(run)
    out: list[str] = ["", "### Coverage", ""]
    out += ["| backend | window-grid cells run (of 100) | ran none of (its family did) |", "|---|---:|---|"]
    for b in (b for b in d.backends if b in d.never):
        gap = coverage.describe_gap(b, d.gaps[b]).split(" ran none of: ", 1)[1] if b in d.gaps else ""
        out.append(f"| `{b}` | {d.grid[b]} | {gap.replace('|', '/')} |")
    if d.note:
        out += ["", f"Sizes capped: {d.note}."]
    return out

