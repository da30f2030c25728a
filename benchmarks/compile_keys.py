"""Compile keys against kernels built, per backend, for a run folder (issue 47: "compiles per backend in
timing.json equal its distinct compile keys").

    python benchmarks/compile_keys.py RUN_DIR

Keys: the distinct ``Backend.compile_key`` values over the backend's rows that ran (not unsupported or
unavailable), computed here from ``results.csv``'s cases (pure functions: no GPU, no library import);
kernels: the distinct ``Backend.compile_kernels`` of those rows (more than the keys where one key is several
kernels: JAX builds one executable per sequence signature of a case).
Built: what its workers built by the library's own count (``kernels_built``), in the lanes (``stages``,
summed over every call of a ``--resume``d run) and in the compile pre-pass (``precompile``, each call's);
``-`` where the library keeps no count. Keys > built means some keys were on disk already (a warm cache);
built > keys means a declared key is too coarse (a kernel built inside a row it did not predict).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from parity import backends
from parity.case import Case
from parity.errors import UserError
from parity.runfolder import TIMING, TIMING_FIELDS, read_object, read_results, stored_path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], usage="python benchmarks/compile_keys.py [-h] RUN_DIR")
    ap.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a finished run folder (results.csv, timing.json)")
    folder = ap.parse_args(argv).run_dir
    try:
        timing = _timing(folder)
        keys, kernels = _keys(folder)
    except UserError as exc:
        print(f"compile_keys: {exc}", file=sys.stderr)
        return 2
    calls = [*(timing.get("earlier_calls") or []), timing]
    stages = (timing.get("all_calls") or {}).get("stages") or timing.get("stages") or {}
    pre: dict[str, int] = {}
    for c in calls:
        for spec, p in ((c.get("precompile") or {}).get("per_backend") or {}).items():
            if p.get("kernels_built") is not None:
                pre[spec] = pre.get(spec, 0) + int(p["kernels_built"])
    print(f"{'backend':<26}{'rows':>7}{'keys':>7}{'kernels':>9}{'built (lanes)':>15}{'built (pre-pass)':>18}{'built, all':>12}")
    for spec in sorted(keys):
        lanes = (stages.get(spec) or {}).get("kernels_built")
        both = None if lanes is None and spec not in pre else (lanes or 0) + pre.get(spec, 0)
        cells = ["-" if v is None else str(v) for v in (lanes, pre.get(spec), both)]
        rows = (stages.get(spec) or {}).get("rows", "?")
        print(f"{spec:<26}{rows:>7}{len(keys[spec]):>7}{len(kernels[spec]):>9}{cells[0]:>15}{cells[1]:>18}{cells[2]:>12}")
    return 0


def _timing(folder: Path) -> dict[str, Any]:
    """The run's ``timing.json`` (or its .gz); a UserError naming the folder or the file when it is not a run's."""
    if not folder.is_dir():
        raise UserError(f"{folder}: {'not a folder' if folder.exists() else 'no such folder'} (give a run folder)")
    path = stored_path(folder, TIMING)
    if not path.exists():
        raise UserError(f"{path}: no such file (is {folder} a finished parity run folder?)")
    return read_object(path, TIMING_FIELDS)


def _keys(folder: Path) -> tuple[dict[str, set], dict[str, set]]:
    """Per backend, the distinct compile keys and kernels of its rows that ran."""
    keys: dict[str, set] = {}
    kernels: dict[str, set] = {}
    results = read_results(folder)
    if results is None:
        raise UserError(f"{folder}: no results.csv (is this a parity run folder?)")
    for row in results.rows:
        if row["verdict"] in ("unsupported", "unavailable"):
            continue
        try:
            be, case = backends.get(row["backend"]), Case.from_json(row["case_json"])
            key, parts = be.compile_key(case), be.compile_kernels(case)
        except Exception:  # noqa: BLE001 - a plugin not importable here (or without compile_kernels)
            continue
        if key is not None:
            keys.setdefault(row["backend"], set()).add(key)
            kernels.setdefault(row["backend"], set()).update(parts)
    return keys, kernels


if __name__ == "__main__":
    from parity.errors import script_main

    sys.exit(script_main(main, "compile_keys"))
