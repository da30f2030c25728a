"""Small inline-SVG plots for the reports: no matplotlib, no JavaScript, works offline.

Every function returns one ``<svg>`` element as a string. Points carry a ``<title>`` so a
browser shows what each one is on hover.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

from ..results import Outcome

#: Okabe-Ito, colour-blind safe; yellow dropped (unreadable on white).
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#999999")
VERDICT_COLOURS: dict[str, str] = {
    Outcome.PASS: "#1a7f37",
    Outcome.FAIL: "#cf222e",
    Outcome.ERROR: "#8250df",
    Outcome.CRASH: "#8250df",
    Outcome.TIMEOUT: "#8250df",
    Outcome.EXPECTED: "#bf8700",
    Outcome.UNEXPECTED_PASS: "#cf222e",
}
MASK_COLOURS = {"1": "#57606a", "+": "#cf222e", "-": "#f0a30a", "p": "#8250df", ".": "#ffffff"}


def colour(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


class Axis:
    """Maps data to pixels: ``linear``, ``log`` (positive values, clamped) or ``symlog``."""

    def __init__(self, lo: float, hi: float, p0: float, p1: float, scale: str = "linear"):
        self.scale, self.p0, self.p1 = scale, p0, p1
        self.lo, self.hi = self._t(lo), self._t(hi)
        if self.hi <= self.lo:
            self.lo, self.hi = self.lo - 1.0, self.hi + 1.0

    def _t(self, v: float) -> float:
        if self.scale == "log":
            return math.log10(max(v, 1e-300))
        if self.scale == "symlog":
            return math.copysign(math.log10(1.0 + abs(v)), v)
        return v

    def __call__(self, v: float) -> float:
        f = (self._t(v) - self.lo) / (self.hi - self.lo)
        return self.p0 + f * (self.p1 - self.p0)

    def ticks(self) -> list[tuple[float, str]]:
        if self.scale == "log":
            return [
                (10.0**e, _fmt_pow(e)) for e in range(math.floor(self.lo), math.ceil(self.hi) + 1) if self.lo - 1e-9 <= e <= self.hi + 1e-9
            ]
        if self.scale == "symlog":
            out = [(0.0, "0")]
            for e in range(0, 7):
                v = 10.0**e
                if self._t(v) <= self.hi + 1e-9:
                    out.append((v, f"{v:g}"))
                if self._t(-v) >= self.lo - 1e-9:
                    out.append((-v, f"{-v:g}"))
            return sorted(out)
        step = _nice_step((self.hi - self.lo) / 5)
        first = math.ceil(self.lo / step) * step
        return [(first + k * step, f"{first + k * step:g}") for k in range(0, 12) if first + k * step <= self.hi + 1e-9]


def _fmt_pow(e: int) -> str:
    return {-3: "0.001", -2: "0.01", -1: "0.1", 0: "1", 1: "10", 2: "100", 3: "1000"}.get(e, f"1e{e}")


def _nice_step(raw: float) -> float:
    if raw <= 0:
        return 1.0
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 5, 10):
        if raw <= m * mag:
            return m * mag
    return 10 * mag


def _frame(w: int, h: int, label: str, body: list[str]) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img" '
        f'aria-label="{escape(label)}" font-family="system-ui, sans-serif" font-size="11">' + "".join(body) + "</svg>"
    )


def _axes(x: Axis, y: Axis | None, left: float, top: float, right: float, bottom: float, xlabel: str, ylabel: str) -> list[str]:
    out = [f'<rect x="{left}" y="{top}" width="{right - left}" height="{bottom - top}" fill="#fafbfc" stroke="#d0d7de"/>']
    for v, t in x.ticks():
        px = x(v)
        out.append(f'<line x1="{px:.1f}" y1="{top}" x2="{px:.1f}" y2="{bottom}" stroke="#eaeef2"/>')
        out.append(f'<text x="{px:.1f}" y="{bottom + 14}" text-anchor="middle" fill="#57606a">{escape(t)}</text>')
    if y is not None:
        for v, t in y.ticks():
            py = y(v)
            out.append(f'<line x1="{left}" y1="{py:.1f}" x2="{right}" y2="{py:.1f}" stroke="#eaeef2"/>')
            out.append(f'<text x="{left - 5}" y="{py + 4:.1f}" text-anchor="end" fill="#57606a">{escape(t)}</text>')
        out.append(
            f'<text x="12" y="{(top + bottom) / 2:.0f}" text-anchor="middle" transform="rotate(-90 12 {(top + bottom) / 2:.0f})" '
            f'fill="#24292f">{escape(ylabel)}</text>'
        )
    out.append(f'<text x="{(left + right) / 2:.0f}" y="{bottom + 32}" text-anchor="middle" fill="#24292f">{escape(xlabel)}</text>')
    return out


def _clamp_log(v: float, lo: float, hi: float) -> tuple[float, bool]:
    """Value to draw on a log axis and whether it was clamped (0, negative, inf, beyond range)."""
    if not math.isfinite(v) or v > hi:
        return hi, True
    if v < lo:
        return lo, True
    return v, False


def scatter(
    series: Sequence[tuple[str, Sequence[tuple[float, float, bool, str]]]],
    xlabel: str,
    ylabel: str,
    hline: float | None = None,
    hline_label: str = "",
    vline: float | None = None,
    vline_label: str = "",
    width: int = 900,
    height: int = 340,
) -> str:
    """Points ``(x, y, failed, title)`` per named series; x symlog, y log. Failed points are filled."""
    left, top, right, bottom = 62.0, 14.0, width - 250.0, height - 44.0
    xs = [p[0] for _, pts in series for p in pts if math.isfinite(p[0])]
    ys = [p[1] for _, pts in series for p in pts if math.isfinite(p[1]) and p[1] > 0]
    xlo, xhi = (min(xs + [0.0]), max(xs + [1.0])) if xs else (-10.0, 10.0)
    ymin = 10.0 ** math.floor(math.log10(min(ys + [hline or 1.0]))) if ys else 1e-3
    ymin = max(ymin, 1e-4)
    ymax = 10.0 ** math.ceil(math.log10(max(ys + [hline or 1.0]))) if ys else 10.0
    ymax = max(ymax, 10 * ymin)
    x = Axis(xlo - 0.5, xhi + 0.5, left, right, "symlog")
    y = Axis(ymin, ymax, bottom, top, "log")
    body = _axes(x, y, left, top, right, bottom, xlabel, ylabel)
    if vline is not None:
        px = x(vline)
        body.append(f'<line x1="{px:.1f}" y1="{top}" x2="{px:.1f}" y2="{bottom}" stroke="#8c959f" stroke-dasharray="2 3"/>')
        body.append(f'<text x="{px + 3:.1f}" y="{top + 11}" fill="#57606a">{escape(vline_label)}</text>')
    if hline is not None:
        py = y(hline)
        body.append(f'<line x1="{left}" y1="{py:.1f}" x2="{right}" y2="{py:.1f}" stroke="#cf222e" stroke-dasharray="5 3"/>')
        body.append(f'<text x="{right - 4}" y="{py - 4:.1f}" text-anchor="end" fill="#cf222e">{escape(hline_label)}</text>')
    for i, (name, pts) in enumerate(series):
        c = colour(i)
        for px_, py_, failed, title in pts:
            if not math.isfinite(px_):
                continue
            yv, clamped = _clamp_log(py_, ymin, ymax)
            shape = "rect" if clamped else "circle"
            cx, cy = x(px_), y(yv)
            fill = c if failed else "none"
            tip = f"<title>{escape(title)}</title>"
            if shape == "circle":
                body.append(
                    f'<circle class="pt" cx="{cx:.1f}" cy="{cy:.1f}" r="3.6" fill="{fill}" stroke="{c}" stroke-width="1.4">{tip}</circle>'
                )
            else:
                body.append(
                    f'<rect class="pt" x="{cx - 3.5:.1f}" y="{cy - 3.5:.1f}" width="7" height="7" fill="{fill}" stroke="{c}" '
                    f'stroke-width="1.4">{tip}</rect>'
                )
        ly = top + 12 + 16 * i
        body.append(f'<circle cx="{right + 16}" cy="{ly - 4}" r="4" fill="{c}" stroke="{c}"/>')
        body.append(f'<text x="{right + 26}" y="{ly}" fill="#24292f">{escape(_short(name, 36))}<title>{escape(name)}</title></text>')
    ly = top + 12 + 16 * len(series) + 8
    body.append(f'<text x="{right + 10}" y="{ly}" fill="#57606a">filled: failing row</text>')
    body.append(f'<text x="{right + 10}" y="{ly + 14}" fill="#57606a">hollow: passing row</text>')
    body.append(f'<text x="{right + 10}" y="{ly + 28}" fill="#57606a">square: off the scale</text>')
    return _frame(width, height, f"{ylabel} against {xlabel}", body)


def strips(
    groups: Sequence[tuple[str, Sequence[tuple[float, str, str]]]],
    xlabel: str,
    vline: float | None = None,
    vline_label: str = "",
    width: int = 900,
) -> str:
    """One row per group of values ``(value, verdict, title)`` on a log axis, with quartile box."""
    left, right = 250.0, width - 20.0
    row_h = 34.0
    top = 22.0
    bottom = top + row_h * max(len(groups), 1)
    height = int(bottom + 44)
    vals = [v for _, pts in groups for v, _, _ in pts if math.isfinite(v) and v > 0]
    lo = 10.0 ** math.floor(math.log10(min(vals + [vline or 1.0]))) if vals else 1e-3
    lo = max(lo, 1e-4)
    hi = 10.0 ** math.ceil(math.log10(max(vals + [vline or 1.0]))) if vals else 10.0
    hi = max(hi, 10 * lo)
    x = Axis(lo, hi, left, right, "log")
    body = _axes(x, None, left, top, right, bottom, xlabel, "")
    if vline is not None:
        px = x(vline)
        body.append(f'<line x1="{px:.1f}" y1="{top}" x2="{px:.1f}" y2="{bottom}" stroke="#cf222e" stroke-dasharray="5 3"/>')
        body.append(f'<text x="{px:.1f}" y="{top - 6}" text-anchor="middle" fill="#cf222e">{escape(vline_label)}</text>')
    for gi, (name, pts) in enumerate(groups):
        cy = top + row_h * gi + row_h / 2
        body.append(
            f'<text x="{left - 8}" y="{cy + 4:.1f}" text-anchor="end" fill="#24292f">{escape(_short(name, 40))}'
            f"<title>{escape(name)}</title></text>"
        )
        finite = sorted(v for v, _, _ in pts if math.isfinite(v))
        if finite:
            q1, med, q3 = _quantile(finite, 0.25), _quantile(finite, 0.5), _quantile(finite, 0.75)
            a, b = x(_clamp_log(q1, lo, hi)[0]), x(_clamp_log(q3, lo, hi)[0])
            body.append(f'<rect x="{a:.1f}" y="{cy - 10:.1f}" width="{max(b - a, 1):.1f}" height="20" fill="#eaeef2" stroke="#8c959f"/>')
            m = x(_clamp_log(med, lo, hi)[0])
            body.append(f'<line x1="{m:.1f}" y1="{cy - 10:.1f}" x2="{m:.1f}" y2="{cy + 10:.1f}" stroke="#24292f" stroke-width="2"/>')
        for k, (v, verdict, title) in enumerate(pts):
            vv, clamped = _clamp_log(v, lo, hi)
            jitter = ((k * 7919) % 13 - 6) * 1.2
            c = VERDICT_COLOURS.get(verdict, "#57606a")
            body.append(
                f'<circle class="pt" cx="{x(vv):.1f}" cy="{cy + jitter:.1f}" r="{3.4 if not clamped else 2.4}" fill="{c}" '
                f'fill-opacity="0.75"><title>{escape(title)}</title></circle>'
            )
    return _frame(width, height, f"{xlabel} per backend", body)


def lines(
    series: Sequence[tuple[str, Sequence[tuple[float, float]]]],
    xlabel: str,
    ylabel: str,
    log_y: bool = True,
    width: int = 900,
    height: int = 300,
) -> str:
    """Line per series (e.g. error against decode step)."""
    left, top, right, bottom = 62.0, 14.0, width - 250.0, height - 44.0
    xs = [p[0] for _, pts in series for p in pts if math.isfinite(p[0])]
    ys = [p[1] for _, pts in series for p in pts if math.isfinite(p[1]) and (p[1] > 0 or not log_y)]
    x = Axis(min(xs, default=0.0), max(xs, default=1.0), left, right, "linear")
    if log_y:
        lo = max(10.0 ** math.floor(math.log10(min(ys, default=1e-3))), 1e-8)
        hi = max(10.0 ** math.ceil(math.log10(max(ys, default=1.0))), 10 * lo)
        y = Axis(lo, hi, bottom, top, "log")
    else:
        lo, hi = min(ys, default=0.0), max(ys, default=1.0)
        y = Axis(lo, hi, bottom, top, "linear")
    body = _axes(x, y, left, top, right, bottom, xlabel, ylabel)
    for i, (name, pts) in enumerate(series):
        c = colour(i)
        good = [(a, b) for a, b in sorted(pts) if math.isfinite(a) and math.isfinite(b) and (b > 0 or not log_y)]
        if good:
            d = " ".join(f"{'M' if k == 0 else 'L'}{x(a):.1f},{y(b):.1f}" for k, (a, b) in enumerate(good))
            body.append(f'<path d="{d}" fill="none" stroke="{c}" stroke-width="1.6"><title>{escape(name)}</title></path>')
        ly = top + 12 + 16 * i
        body.append(f'<line x1="{right + 10}" y1="{ly - 4}" x2="{right + 22}" y2="{ly - 4}" stroke="{c}" stroke-width="2"/>')
        body.append(f'<text x="{right + 26}" y="{ly}" fill="#24292f">{escape(_short(name, 36))}<title>{escape(name)}</title></text>')
    return _frame(width, height, f"{ylabel} against {xlabel}", body)


def mask_image(rows: Sequence[str], label: str, max_px: int = 360) -> str:
    """The mask probe's character image: one run-length-encoded rect per run of equal cells."""
    n_rows = len(rows)
    n_cols = max((len(r) for r in rows), default=0)
    if not n_rows or not n_cols:
        return _frame(10, 10, label, [])
    cw = max(1.0, min(8.0, max_px / max(n_rows, n_cols)))
    ch_ = max(cw, min(16.0, 48.0 / n_rows))  # a decode row (Sq = 1) stays visible
    w, h = n_cols * cw, n_rows * ch_
    body = [f'<rect x="0" y="0" width="{w:.1f}" height="{h:.1f}" fill="{MASK_COLOURS["."]}" stroke="#d0d7de"/>']
    for i, line in enumerate(rows):
        j = 0
        while j < len(line):
            ch = line[j]
            k = j
            while k < len(line) and line[k] == ch:
                k += 1
            if ch != ".":
                col = MASK_COLOURS.get(ch, "#000000")
                body.append(
                    f'<rect class="m{"x" if ch in "+-p" else "s"}" x="{j * cw:.1f}" y="{i * ch_:.1f}" width="{(k - j) * cw:.1f}" '
                    f'height="{ch_:.1f}" fill="{col}"/>'
                )
            j = k
    return _frame(int(math.ceil(w)) + 1, int(math.ceil(h)) + 1, label, body).replace("<svg ", '<svg shape-rendering="crispEdges" ', 1)


def _quantile(sorted_vals: list[float], q: float) -> float:
    if len(sorted_vals) == 1:
        return sorted_vals[0]
    pos = q * (len(sorted_vals) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_vals) - 1)
    return sorted_vals[lo] + (sorted_vals[hi] - sorted_vals[lo]) * (pos - lo)


def _short(s: str, n: int) -> str:
    return s if len(s) <= n else s[: n - 1] + "…"
