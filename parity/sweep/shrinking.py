"""The first failure of each backend shrunk (:func:`parity.shrink.shrink`) with the sweep's own
options: its executor (isolation, probes, worker path), budgets and reference device."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from ..case import Case
from ..judge import BaselineCache, judge
from ..runfolder import SHRUNK
from ..shrink import Shrunk, budget_note, shrink
from .lanes import make_executor
from .options import SweepOptions


def shrink_failures(failures: list[dict[str, Any]], options: SweepOptions, out: Path) -> list[dict[str, Any]]:
    """Shrink the first of ``failures`` of each backend with at most ``options.shrink_calls`` backend
    calls; append each to ``OUT/shrunk.jsonl`` (rewritten unless ``options.resume``) and return
    them: ``{backend, from, case, verdict, reasons, calls, repro, budget_exhausted, note}`` (``note``:
    "stopped at the budget of N calls ..." when the budget ended the search) plus ``row`` (the smallest
    failing case's row), ``original`` and ``small`` (the failing case and the smallest one)."""
    firsts: dict[str, dict[str, Any]] = {}
    for r in failures:
        firsts.setdefault(r["backend"], r)
    baselines = BaselineCache(options.reference_device)
    done = []
    with (out / SHRUNK).open("a" if options.resume else "w") as fh:
        for spec, row in firsts.items():
            case = Case.from_json(row["case_json"])
            found = _shrink_one(spec, case, row, options, baselines)
            small, small_row, calls = found
            rec = {
                "backend": spec,
                "from": row["case_id"],
                "case": small.to_dict(),
                "verdict": small_row["verdict"],
                "reasons": small_row.get("reasons", ""),
                "calls": calls,
                "repro": small.repro(spec),
                "budget_exhausted": found.exhausted,
                "note": budget_note(calls) if found.exhausted else "",
            }
            fh.write(json.dumps(rec) + "\n")
            done.append({**rec, "row": small_row, "original": case, "small": small})
    return done


def _shrink_one(spec: str, case: Case, row: dict[str, Any], options: SweepOptions, baselines: BaselineCache) -> Shrunk:
    # the sweep's executor for it (isolation, probes, worker path), timing each call once: only verdicts count here
    ex = make_executor(spec, dataclasses.replace(options, repeats=1))
    try:

        def judge_one(c: Case) -> dict[str, Any]:
            return judge(c, spec, ex.info, ex.run(c), baselines, options.budgets).row

        return shrink(case, row, judge_one, options.shrink_calls)
    finally:
        ex.close()
