"""A run folder's decode files, read and written here (the rest of the folder is :mod:`parity.runfolder`'s).

==================  =========================================================================
``decode.csv``      greedy-decode results, beside the rows or in ``decode/`` (:func:`write_decode`),
                    with ``decode_steps.csv`` (per step) and ``decode.json`` (its sidecar); a merged
                    run's in ``decode/`` (:func:`write_merged_decode`)
``lm_decode.csv``   the language-model decode study (:func:`write_lm_study`), with ``lm_flips.csv``,
                    ``lm_decode.json`` and ``decode_summary.md``
==================  =========================================================================

Each of these file names is a constant here, and no other module of ``parity/`` spells one
(``tests/test_runfolder_owns.py`` checks it). Imports only ``files`` and ``runfolder``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from .files import read_text
from .runfolder import stored_path, write_table

DECODE = "decode.csv"
DECODE_STEPS = "decode_steps.csv"
DECODE_JSON = "decode.json"
#: The folder of a merged run's (or a sweep's) decode results, beside its rows.
DECODE_DIR = "decode"
LM_DECODE = "lm_decode.csv"
LM_FLIPS = "lm_flips.csv"
LM_DECODE_JSON = "lm_decode.json"
DECODE_SUMMARY = "decode_summary.md"


def decode_path(folder: Path) -> Path | None:
    """``decode.csv`` beside the rows, else in ``decode/`` (each, or its .gz); None when absent."""
    for d in (folder, folder / DECODE_DIR):
        if (path := stored_path(d, DECODE)).exists():
            return path
    return None


def read_decode(folder: Path) -> tuple[Path, str, str | None] | None:
    """The folder's decode results (:func:`decode_path`): that path, its text and its ``decode_steps.csv``'s
    text (None when absent); None when the folder has none."""
    path = decode_path(folder)
    if path is None:
        return None
    steps = decode_steps_path(path)
    return path, read_text(path), None if steps is None else read_text(steps)


def decode_steps_path(decode_csv: Path) -> Path | None:
    """``decode_steps.csv`` (or its .gz) beside a ``decode.csv``; None when absent."""
    path = stored_path(decode_csv.parent, DECODE_STEPS)
    return path if path.exists() else None


def write_decode(
    out_dir: Path, columns: Iterable[str], rows: list[dict], step_columns: Iterable[str], steps: list[dict], meta: dict
) -> None:
    """``parity decode``'s files: ``decode.csv`` (``columns``), ``decode_steps.csv`` and ``decode.json``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    write_table(out_dir / DECODE, columns, rows)
    write_table(out_dir / DECODE_STEPS, step_columns, steps)
    (out_dir / DECODE_JSON).write_text(json.dumps(meta, indent=2, default=str) + "\n")


def write_merged_decode(
    out: Path, fields: list[str], rows: list[dict[str, str]], step_fields: list[str], steps: list[dict[str, str]] | None
) -> None:
    """A merged run's ``decode/decode.csv`` and (``steps`` not None) ``decode/decode_steps.csv``."""
    write_table(out / DECODE_DIR / DECODE, fields, rows)
    if steps is not None:
        write_table(out / DECODE_DIR / DECODE_STEPS, step_fields, steps)


def write_lm_study(out_dir: Path, tables: Iterable[tuple[str, Iterable[str], list[dict]]], meta: dict, summary: str) -> None:
    """The language-model study's files: its ``tables`` (``(LM_DECODE | LM_FLIPS, columns, rows)``),
    ``lm_decode.json`` and ``decode_summary.md``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, columns, rows in tables:
        write_table(out_dir / name, columns, rows)
    (out_dir / LM_DECODE_JSON).write_text(json.dumps(meta, indent=2, default=str) + "\n")
    (out_dir / DECODE_SUMMARY).write_text(summary)
