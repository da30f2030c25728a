"""The text reports of a run: ``summary.md`` (fit for a pull-request comment) and ``junit.xml``.

Known divergences (:mod:`parity.expect`) in the two:

===================  =====================================  ==========================================
verdict              summary.md                             junit.xml
===================  =====================================  ==========================================
``expected``         its own column; "known divergences:    ``<skipped type="parity.expected">``, the
                     n rows expected (entry n, ...)"; a     message: entry id, explanation, the raw
                     details table of the entries           verdict and reasons
``unexpected-pass``  a failing column (bold), listed under  ``<failure type="parity.unexpected-pass">``
                     the worst cases with its entry         naming the entry it contradicts
===================  =====================================  ==========================================
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from typing import Any

from .. import coverage
from ..results import Outcome
from .data import (
    CHECK_NAMES,
    check_words,
    consistency_counts,
    counts_by,
    coverage_data,
    engine_checks,
    fmt,
    gate_note,
    gpu_text,
    known_rows,
    model_counts,
    n_expected,
    n_failing,
    peak_memory,
    records,
    reduced_note,
    shared_note,
    smallest_failing,
    status_line,
    unmatched_entries,
    verdict_words,
    why_text,
    work_split,
    worst_rows,
)
from .runs import FAILING, VERDICTS, Run, case_text, family_order, num, partial_words

#: GitHub refuses comments over 65536 characters.
MAX_MARKDOWN = 60000


def md_cell(v: Any) -> str:
    return str(v).replace("|", "\\|").replace("\n", " ")


def markdown_summary(run: Run) -> str:
    from ..sweep import known_vs_new

    env = run.env
    total, bad = len(run.df), n_failing(run)
    kind, text = status_line(run)
    icons: dict[str, str] = {Outcome.FAIL: "❌", Outcome.PASS: "✅"}
    icon = icons.get(kind, "⚠️")
    head = f"{bad} failing of {total} rows" + (f" ({n_expected(run)} expected)" if n_expected(run) else "") if bad else text
    if bad and partial_words(run):
        head += " · " + partial_words(run)
    out = [f"## attn-parity {icon} {head}", ""]
    env_bits = (
        [f"torch {env.get('torch', '?')}", f"GPU: {gpu_text(env)}"]
        if not env.get("missing")
        else ["environment unknown: no environment.json (the run did not finish)"]
    )
    if env.get("profile"):
        env_bits.append(f"profile `{env['profile']}` seed {env.get('seed')}, {env.get('cases')} cases")
    if env.get("wall_seconds") is not None:
        env_bits.append(f"{env['wall_seconds']} s")
    if env.get("partial"):
        env_bits.append(f"**{partial_words(run)}**")
    if work_split(run):
        env_bits.append(work_split(run))
    if gate_note(run):
        env_bits.append(gate_note(run))
    out += [" · ".join(env_bits), ""]
    totals = counts_by(run, "backend")
    out.append("| backend | " + " | ".join(VERDICTS) + " | worst err ratio |")
    out.append("|---|" + "---:|" * (len(VERDICTS) + 1))
    for b in run.backends():
        c = totals.get((b,), {})
        ratios = run.df.loc[run.df["backend"] == b, "err_ratio_f"]
        worst = fmt(ratios.max()) if ratios.notna().any() else "–"
        counts = [(f"**{c.get(v, 0)}**" if v in FAILING and c.get(v, 0) else str(c.get(v, 0))) for v in VERDICTS]
        out.append(f"| `{md_cell(b)}` | " + " | ".join(counts) + f" | {worst} |")
    glance = known_vs_new(records(run)) + unmatched_line(run)
    if glance:
        out += [""] + [f"- {md_cell(line)}" for line in glance]
    if bad:
        out += _md_failing(run, bad)
    out += _md_models(run)
    out += _md_checks(run)
    out += _md_coverage(run)
    out += _known_details(run)
    out += _md_extras(run)
    text = "\n".join(out) + "\n"
    if len(text) > MAX_MARKDOWN:
        text = text[: MAX_MARKDOWN - 80].rsplit("\n", 1)[0] + "\n\n… (truncated; see report.html)\n"
    return text


def _md_failing(run: Run, bad: int) -> list[str]:
    """The failing part of summary.md: counts by case family, the worst cases, the shrunk repros."""
    fams = family_order(run.df["family"])
    cells = counts_by(run, "backend", "family")
    out = ["", "Failing / ran, by case family:", "", "| backend | " + " | ".join(fams) + " |", "|---|" + "---:|" * len(fams)]
    for b in run.backends():
        row = []
        for f in fams:
            c = cells.get((b, f), {})
            ran = sum(c.get(v, 0) for v in (Outcome.PASS, Outcome.EXPECTED, *FAILING))
            failing = sum(c.get(v, 0) for v in FAILING)
            row.append("–" if not ran else (f"**{failing}** / {ran}" if failing else f"0 / {ran}"))
        out.append(f"| `{md_cell(b)}` | " + " | ".join(row) + " |")
    out += ["", "### Worst cases", ""]
    for b, rows in worst_rows(run, per_backend=3).items():
        for r in rows:
            why = why_text(r, run, 200)
            line = f"- `{md_cell(b)}` **{r['verdict']}** [{md_cell(why)}] {md_cell(case_text(r))}"
            if r["verdict"] == Outcome.FAIL:
                line += f": err ratio {fmt(r.get('err_ratio'))}, budget used {fmt(r.get('budget_frac'))}x"
            if r.get("_same"):
                line += f" (and {r['_same']} more rows with the same message)"
            out.append(line)
            if r.get("mask_check") == "mismatch":
                out.append(f"  - mask: {md_cell(r['mask_detail'][:400])}")
            if r.get("unconfirmed_id"):
                out.append(f"  - no mask evidence: `{md_cell(r['unconfirmed_id'])}` would explain it, but the mask probe did not run")
            if r.get("gqa_check") == "mismatch":
                out.append(f"  - gqa: {md_cell(r['gqa_detail'][:400])}")
            if r.get("read_check") == "mismatch":
                out.append(f"  - reads: {md_cell(r['read_detail'][:400])}")
            if r.get("lse_check") == "mismatch":
                out.append(f"  - lse: {md_cell(r['lse_detail'][:400])}")
            for check, name in CHECK_NAMES.items():
                if r.get(f"{check}_check") == "mismatch":
                    out.append(f"  - {name}: {md_cell(r[f'{check}_detail'][:400])}")
            if r.get("repro"):
                out += ["", "  ```bash", f"  {r['repro']}", "  ```"]
    for b, s in smallest_failing(run).items():
        out += [
            "",
            f"- `{md_cell(b)}` smallest failing case of the run: {md_cell(s['text'])} ({s['size']} query x key "
            f"elements x heads) **{s['verdict']}** [{md_cell(s['why'])}] ({s['source']})",
        ]
        out += ["", "  ```bash", f"  {s['repro']}", "  ```"] if s.get("repro") else []
    for s in (x for x in run.shrunk if x.get("repro")):
        note = f" ({s['note']})" if s.get("note") else ""
        out += ["", f"- `{md_cell(s.get('backend'))}` smallest failing case found by shrinking case {s.get('from')}{note}:"]
        out += ["", "  ```bash", f"  {s['repro']}", "  ```"]
    rest = bad - sum(1 + r.get("_same", 0) for v in worst_rows(run, per_backend=3).values() for r in v)
    if rest > 0:
        out += ["", f"… and {rest} more failing rows: see `report.html` / `results.csv`."]
    return out


def _md_checks(run: Run) -> list[str]:
    """The engine checks (``--invariance``, ``--graph-replay``): per backend, its rows by each check's value; no
    lines where no row ran either (docs/engine-checks.md)."""
    cells = engine_checks(run)
    if not cells:
        return []
    out = ["", "Engine checks (rows by value; a mismatch is a failing reason):", ""]
    out += ["| backend | " + " | ".join(CHECK_NAMES.values()) + " |", "|---|" + "---|" * len(CHECK_NAMES)]
    for b in run.backends():
        mine = cells.get(b, {})
        out.append(f"| `{md_cell(b)}` | " + " | ".join(md_cell(check_words(mine.get(c))) for c in CHECK_NAMES) + " |")
    return out


def _md_extras(run: Run) -> list[str]:
    """The tail of summary.md: unavailable backends, decode results, consistency counts."""
    env = run.env
    out: list[str] = []
    unavailable = [(k, v["unavailable"]) for k, v in (env.get("backends") or {}).items() if isinstance(v, dict) and v.get("unavailable")]
    if unavailable:
        out += ["", "<details><summary>Unavailable backends</summary>", ""]
        out += [f"- `{md_cell(k)}`: {md_cell(v)}" for k, v in unavailable]
        out += ["", "</details>"]
    if run.decode is not None and run.decode_path is not None:
        line = f"Decode results: {len(run.decode)} rows in `{run.decode_path.relative_to(run.path)}`"
        if "verdict" in run.decode.columns:
            vc = run.decode["verdict"].value_counts().to_dict()
            line += " (" + ", ".join(f"{k}: {v}" for k, v in sorted(vc.items())) + ")"
        out += ["", line + "."]
    if run.consistency:
        parts = []
        for b, c in consistency_counts(run).items():
            not_pass = {k: v for k, v in c.items() if k != Outcome.PASS}
            extra = " (" + ", ".join(f"{k} {v}" for k, v in sorted(not_pass.items())) + ")" if not_pass else ""
            parts.append(f"`{md_cell(b)}` {c.get('pass', 0)}/{sum(c.values())}{extra}")
        out += ["", "Decode / chunked-prefill consistency (pass / rows): " + ", ".join(parts) + "."]
    return out


def unmatched_line(run: Run) -> list[str]:
    """One line naming the entries for this run's backends that matched no row (none: no line)."""
    n, unmatched = unmatched_entries(run)
    if not unmatched:
        return []
    names = ", ".join(f"{u['entry'].id}" + (f" ({u['why']})" if u["why"] else "") for u in unmatched)
    return [f"entries that matched nothing: {len(unmatched)} of the {n} known divergences for this run's backends matched no row: {names}"]


def _known_details(run: Run) -> list[str]:
    """A collapsed table of the known divergences that matched rows (none: no lines)."""

    hit = [k for k in known_rows(run) if k["expected"] or k["unexpected"]]
    if not hit:
        return []
    n = n_expected(run)  # rows: a row explained jointly counts for each of its entries in the table
    out = [
        "",
        f"<details><summary>Known divergences ({n} rows expected)</summary>",
        "",
        "| entry | expected | unexpected passes | explanation | upstream |",
        "|---|---:|---:|---|---|",
    ]
    for k in hit:
        e = k["entry"]
        out.append(
            f"| `{md_cell(k['id'])}` | {k['expected']} | {k['unexpected']} | "
            f"{md_cell(e.explanation if e else '(not in the loaded files)')} | {md_cell(e.upstream if e else '')} |"
        )
    return out + ["", "</details>"]


def _entry_text(run: Run, r: dict[str, Any]) -> tuple[str, str]:
    """(entry id, "id: explanation") of an expected / unexpected-pass row."""
    eid = r.get("expected_id") or "?"
    return eid, run.expectations.describe_id(eid) if run.expectations else eid


def junit_xml(run: Run) -> str:
    """One ``<testsuite>`` per backend, one ``<testcase>`` per row.

    ``fail`` -> ``<failure>``; ``error`` / ``crash`` / ``timeout`` -> ``<error>``;
    ``unsupported`` / ``unavailable`` -> ``<skipped>`` with the reason; ``expected`` ->
    ``<skipped type="parity.expected">`` naming the known divergence; ``unexpected-pass`` ->
    ``<failure type="parity.unexpected-pass">`` naming the strict entry that no longer fails.
    """

    root = ET.Element("testsuites", name="attn-parity")
    suites: dict[str, ET.Element] = {}
    stats: dict[str, dict[str, float]] = {}
    if partial_words(run):  # a cut-short run: a property and one failing test case say so
        suites["(run)"] = ET.SubElement(root, "testsuite", name="parity.run")
        props = ET.SubElement(suites["(run)"], "properties")
        ET.SubElement(props, "property", name="parity.partial", value=partial_words(run))
        tc = ET.SubElement(suites["(run)"], "testcase", classname="parity.run", name="the run is complete", time="0")
        ET.SubElement(tc, "failure", message=partial_words(run), type="parity.partial")
        stats["(run)"] = {"tests": 1, "failures": 1, "errors": 0, "skipped": 0, "time": 0.0}
    for r in records(run):
        b = r["backend"]
        if b not in suites:
            suites[b] = ET.SubElement(root, "testsuite", name=f"parity.{b}")
            stats[b] = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0, "time": 0.0}
        t = num(r.get("time_ms")) / 1000.0
        t = 0.0 if math.isnan(t) else t
        tc = ET.SubElement(
            suites[b], "testcase", classname=f"parity.{b}.{r['family']}", name=f"{r['case_id']} {case_text(r)}", time=f"{t:.4f}"
        )
        st = stats[b]
        st["tests"] += 1
        st["time"] += t
        v = r["verdict"]
        if v in (Outcome.EXPECTED, Outcome.UNEXPECTED_PASS):
            _junit_known(tc, st, run, r)
        elif v == Outcome.FAIL:
            st["failures"] += 1
            msg = f"[{r.get('reasons', '')}] err ratio {r.get('err_ratio', '')}, budget used {r.get('budget_frac', '')}"
            el = ET.SubElement(tc, "failure", message=msg, type="parity.fail")
            el.text = "\n".join(
                x
                for x in (
                    r.get("mask_detail") if r.get("mask_check") == "mismatch" else "",
                    r.get("worst_where", ""),
                    f"repro: {r.get('repro', '')}",
                )
                if x
            )
        elif v in FAILING:
            st["errors"] += 1
            el = ET.SubElement(tc, "error", message=f"{v}: {r.get('detail', '')[:300]}", type=f"parity.{v}")
            el.text = f"{r.get('detail', '')}\nrepro: {r.get('repro', '')}"
        elif v in (Outcome.UNSUPPORTED, Outcome.UNAVAILABLE):
            st["skipped"] += 1
            ET.SubElement(tc, "skipped", message=f"{v}: {r.get('detail', '')}")
        elif v != Outcome.PASS:
            st["errors"] += 1
            ET.SubElement(tc, "error", message=f"unknown verdict {v!r}", type="parity.unknown")
    for b, el in suites.items():
        for k, v in stats[b].items():
            el.set(k, f"{v:.4f}" if k == "time" else str(int(v)))
    tot = {k: sum(s[k] for s in stats.values()) for k in ("tests", "failures", "errors", "skipped")}
    for k, v in tot.items():
        root.set(k, str(int(v)))
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _junit_known(tc: ET.Element, st: dict[str, float], run: Run, r: dict[str, Any]) -> None:
    """An expected row as a skip with the entry's words; an unexpected pass as a failure naming the entry."""
    eid, text = _entry_text(run, r)
    if r["verdict"] == Outcome.EXPECTED:
        st["skipped"] += 1
        raw = r.get("raw_verdict") or "fail"
        why = f" [{r['reasons']}]" if r.get("reasons") else (f": {r.get('detail', '')[:200]}" if r.get("detail") else "")
        ET.SubElement(tc, "skipped", message=f"expected (known divergence {text}); raw verdict {raw}{why}", type="parity.expected")
        return
    st["failures"] += 1
    e = run.expectations.get(eid) if run.expectations else None
    el = ET.SubElement(
        tc,
        "failure",
        type="parity.unexpected-pass",
        message=f"unexpected pass: the strict known divergence {text} expects {e.verdict if e else 'a failure'}",
    )
    el.text = f"retire or narrow the entry {eid} ({e.source if e else 'its file'})\nrepro: {r.get('repro', '')}"


def _md_coverage(run: Run) -> list[str]:
    d = coverage_data(run)
    out: list[str] = ["", "### Coverage", ""]
    out += ["| backend | window-grid cells run (of 100) | ran none of (its family did) |", "|---|---:|---|"]
    for b in (b for b in d.backends if b in d.never):
        gap = coverage.describe_gap(b, d.gaps[b]).split(" ran none of: ", 1)[1] if b in d.gaps else ""
        out.append(f"| `{b}` | {d.grid[b]} | {gap.replace('|', '/')} |")
    if d.note:
        out += ["", f"Sizes capped: {d.note}."]
    return out


def _md_models(run: Run) -> list[str]:
    """Per model and layer of a models run, each backend's verdicts; peak device memory per backend (when recorded)."""
    out: list[str] = []
    models = model_counts(run)
    if models:
        out += ["", "### Models", ""]
        if reduced_note(run):
            out += [f"**Reduced lengths**: {md_cell(reduced_note(run))}; not the models' real lengths.", ""]
        backends = run.backends()
        out += ["| model | layer | " + " | ".join(f"`{md_cell(b)}`" for b in backends) + " |", "|---|---|" + "---|" * len(backends)]
        for (m, layer), per in models.items():
            out.append(
                f"| {md_cell(m)} | {md_cell(layer)} | " + " | ".join(md_cell(verdict_words(per.get(b, {})) or "–") for b in backends) + " |"
            )
        if shared_note(run):
            out += ["", f"Run once: {md_cell(shared_note(run))}."]
    mem = peak_memory(run)
    if mem:
        out += [
            "",
            "Peak device memory per backend (`peak_mem_mb`): "
            + ", ".join(f"`{md_cell(b)}` max {fmt(mx)} MB, median {fmt(med)} MB ({n} rows)" for b, (mx, med, n) in mem.items())
            + ".",
        ]
    return out
