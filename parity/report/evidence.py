"""Where each known divergence was seen: entry x version, from runs of the entries' cases on several versions
(``python -m parity evidence RUN_DIR ...``, :mod:`parity.cli.evidence`; docs/version-diff.md).

For every entry and every row of the runs whose backend the entry's glob names (``X@TAG`` counts as ``X``,
the same kernel staged a second time) and whose case the entry covers with its ``versions`` ignored: the
version is the entry's package's in the row's backend version (``environment.json``; ``PACKAGE ? (FOLDER)`` where it
is not found, one column per run folder; the whole version string for an entry without ``versions``), and the row counts as

=====================================  ==========
row (raw verdict)                      counts as
=====================================  ==========
failing as the entry describes         seen
fail that the entry explains jointly   seen
with others (``expected_id`` ``a+b``)
pass                                   clean
failing otherwise                      other
fail that the entry would explain      other (unconfirmed: no mask evidence)
but for the mask probe's words
unsupported / unavailable              not run
=====================================  ==========

A cell (entry, version) says ``seen`` (one row or more seen), ``not seen`` (rows ran, none seen) or
``not run``. From the cells, the range the evidence supports: ``PACKAGE>=LOWEST_SEEN`` and
``,<FIRST_NOT_SEEN_ABOVE_THE_HIGHEST_SEEN`` where there is one; ``agrees`` says whether the entry's
``versions`` holds every version seen and none of those not seen. Nothing is edited: a person sets
``versions`` from the table.

A joint explanation (:func:`parity.expect.joint_explanation`) is looked for with every entry's ``versions`` ignored,
the others' as this one's: a row failing with the entry's reason beside another entry's (a page tail read and a
batch invariance finding in one row) is evidence of both.
"""

from __future__ import annotations

import dataclasses
import fnmatch
from pathlib import Path
from typing import Any

from .. import runfolder
from ..case import Case
from ..expect import Expectation, Expectations, joint_explanation, version_key
from ..results import RAW_FAIL_VERDICTS, SKIP_VERDICTS, Outcome, raw_verdict_of
from .runs import Run

SKIPPED = SKIP_VERDICTS


@dataclasses.dataclass
class Cell:
    seen: int = 0
    clean: int = 0
    other: int = 0
    not_run: int = 0
    runs: list[str] = dataclasses.field(default_factory=list)
    example: str = ""  # a case id seen (or, where none, one that ran)

    @property
    def ran(self) -> int:
        return self.seen + self.clean + self.other

    @property
    def status(self) -> str:
        return "seen" if self.seen else "not seen" if self.ran else "not run"

    @property
    def text(self) -> str:
        return f"{self.status} {self.seen}/{self.ran}" if self.ran else "not run"


@dataclasses.dataclass
class EntryEvidence:
    entry: Expectation
    cells: dict[str, Cell] = dataclasses.field(default_factory=dict)  # version -> cell

    @property
    def package(self) -> str:
        return self.entry.versions.package if self.entry.versions is not None else ""

    def versions(self) -> list[str]:
        return sorted(self.cells, key=_sort_key)

    def _numbers(self, status: str) -> list[str]:
        return [v for v in self.versions() if self.cells[v].status == status and version_key(_bare(v)) is not None]

    @property
    def suggested(self) -> str:
        """The range the evidence supports (module docstring), or why there is none."""
        if not self.package:
            return "(the entry has no versions field)"
        seen, not_seen = self._numbers("seen"), self._numbers("not seen")
        if not seen:
            return "(never seen in these runs)"
        lo, top = seen[0], version_key(_bare(seen[-1]))
        above = [v for v in not_seen if version_key(_bare(v)) > top]  # type: ignore[operator]
        gaps = [v for v in not_seen if version_key(_bare(lo)) < version_key(_bare(v)) < top]  # type: ignore[operator]
        text = f"{self.package}>={_bare(lo)}" + (f",<{_bare(above[0])}" if above else "")
        return text + (f" (not seen at {', '.join(gaps)} between: not one range)" if gaps else "")

    @property
    def agrees(self) -> str:
        """``yes`` where ``versions`` holds each version seen and none not seen; else the versions that disagree."""
        rng = self.entry.versions
        if rng is None:
            return "-"
        bad = [
            f"{v} {c.status} but {'outside' if c.status == 'seen' else 'inside'} the range"
            for v, c in self.cells.items()
            if c.status != "not run" and version_key(_bare(v)) is not None and (c.status == "seen") != rng.contains(_bare(v))
        ]
        return "; ".join(bad) if bad else "yes"


def _bare(label: str) -> str:
    """``vllm 0.33.0`` -> ``0.33.0``."""
    return label.rsplit(" ", 1)[-1]


def _sort_key(label: str) -> tuple[Any, ...]:
    key = version_key(_bare(label))
    return (0, key, label) if key is not None else (1, (), label)


def version_label(entry: Expectation, version_text: str, torch_version: str, where: Path | None = None) -> str:
    """The column a row counts in: the entry's package and the version the run recorded (``vllm 0.33.0``). Where the
    run recorded none (no ``environment.json``: a run killed before writing it), ``?`` and the run's folder
    (``vllm ? (runs/v033)``): runs of unknown versions are never counted as one version."""
    found = version_text if entry.versions is None else entry.versions.find(version_text, torch_version)
    if found:
        return found if entry.versions is None else f"{entry.versions.package} {found}"
    unknown = "?" if entry.versions is None else f"{entry.versions.package} ?"
    return unknown if where is None else f"{unknown} ({'/'.join(where.parts[-2:])})"


def collect(runs: list[Run], expectations: Expectations, globs: list[str] | None = None) -> list[EntryEvidence]:
    """Each entry's cells over ``runs`` (module docstring); entries filtered by id ``globs``."""
    entries = [e for e in expectations.entries if not globs or any(fnmatch.fnmatchcase(e.id, g) for g in globs)]
    out = {e.id: EntryEvidence(e) for e in entries}
    alone = {e.id: Expectations((dataclasses.replace(e, versions=None),)) for e in entries}
    blind = Expectations(tuple(dataclasses.replace(e, versions=None) for e in expectations.entries))  # joint explanations
    cases: dict[str, Case] = {}
    for run in runs:
        versions = runfolder.backend_versions(run.env)
        torch_version = runfolder.torch_version(run.env)
        for r in run.rows():
            kernel = str(r["backend"]).split("@", 1)[0]
            mine = [e for e in entries if fnmatch.fnmatchcase(kernel, e.backend)]
            if not mine or not r.get("case_json"):
                continue
            case = cases.get(r["case_json"]) or cases.setdefault(r["case_json"], Case.from_json(r["case_json"]))
            row, partners = {**r, "backend": kernel}, None
            for e in mine:
                if alone[e.id].entries[0].covers(kernel, case):
                    label = version_label(e, versions.get(r["backend"], ""), torch_version, run.path)
                    partners = blind.covering(row, case) if partners is None else partners
                    _count(out[e.id].cells.setdefault(label, Cell()), alone[e.id], row, case, str(run.path), partners)
    return list(out.values())


def _count(cell: Cell, alone: Expectations, row: dict[str, Any], case: Case, where: str, partners: list[Expectation]) -> None:
    """One row in ``cell`` (the module docstring's table); ``partners``: the entries covering the row, versions
    ignored, among which a joint explanation holding the entry is looked for."""
    raw = raw_verdict_of(row)
    if raw in SKIPPED:
        cell.not_run += 1
        return
    if where not in cell.runs:
        cell.runs.append(where)
    seen = raw in RAW_FAIL_VERDICTS and alone.judge(row, case=case).get("verdict") == Outcome.EXPECTED
    seen = seen or bool(raw == Outcome.FAIL and joint_explanation(partners, row, including=alone.entries[0].id))
    if seen and not cell.seen:
        cell.example = str(row["case_id"])  # the first row seen, over any that only ran
    cell.example = cell.example or str(row["case_id"])
    if seen:
        cell.seen += 1
    elif raw == Outcome.PASS:
        cell.clean += 1
    else:
        cell.other += 1


# ---------------------------------------------------------------- rendering

CSV_HEADER = ("entry", "backend", "versions", "version", "status", "seen", "ran", "clean", "other", "not_run", "example_case", "runs")


def csv_rows(found: list[EntryEvidence]) -> list[tuple[str, ...]]:
    return [
        (ev.entry.id, ev.entry.backend, ev.entry.versions.text if ev.entry.versions else "", v, c.status, str(c.seen), str(c.ran))
        + (str(c.clean), str(c.other), str(c.not_run), c.example, " ".join(c.runs))
        for ev in found
        for v, c in ((v, ev.cells[v]) for v in ev.versions())
    ]


def render_markdown(found: list[EntryEvidence], runs: list[Run]) -> str:
    """One table per package: entries x versions, each cell ``seen k/n`` / ``not seen 0/n`` / ``not run``."""
    from .text import md_cell

    out = ["## Where each known divergence was seen", "", f"Runs: {', '.join(f'`{r.path}`' for r in runs)}.", ""]
    out += ["Cells: `seen k/n` (k of the n rows that ran fail as the entry describes), `not seen 0/n`, `not run`.", ""]
    by_package: dict[str, list[EntryEvidence]] = {}
    for ev in found:
        by_package.setdefault(ev.package or "(no versions field)", []).append(ev)
    for package, evs in by_package.items():
        versions = sorted({v for ev in evs for v in ev.cells}, key=_sort_key)
        out += [f"### {package}", ""]
        if not versions:
            out += ["no row of these runs is covered by these entries", ""]
            continue
        out.append("| entry | versions | " + " | ".join(md_cell(v) for v in versions) + " | evidence supports | agrees |")
        out.append("|" + "---|" * (len(versions) + 4))
        for ev in evs:
            cells = [ev.cells[v].text if v in ev.cells else "–" for v in versions]
            rng = ev.entry.versions.text if ev.entry.versions else "(any)"
            out.append(
                f"| {md_cell(ev.entry.id)} | {md_cell(rng)} | " + " | ".join(cells) + f" | {md_cell(ev.suggested)} | {md_cell(ev.agrees)} |"
            )
        out.append("")
    return "\n".join(out).rstrip() + "\n"
