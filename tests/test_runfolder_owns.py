"""``parity/runfolder.py`` owns the run folder, and ``parity/runfolder_decode.py`` its decode files
(:data:`OWNERS`): no other module of ``parity/`` spells one of their file names (``results.csv``,
``consistency.csv``, ``stages.jsonl``, ``decode.csv``, ...) in code, nor builds a path with one with
the ``logs`` folder; they take the owners' constants, readers and writers. Read with :mod:`ast`:
docstrings, and prose (a string with a space: a message that names a file), may name them; a string
that is a file name, or a path or glob ending in one, may not. ``decode`` (the folder of a merged
run's decode results, :data:`parity.runfolder_decode.DECODE_DIR`) is not scanned: it also names the
decode study's cache folder (:mod:`parity.decode.task`).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from parity import runfolder, runfolder_decode

#: The modules that name, read and write a run folder's files: each file's one owner.
OWNERS = (runfolder, runfolder_decode)
PKG = Path(runfolder.__file__).resolve().parent
OWNER_PATHS = frozenset(Path(m.__file__).resolve() for m in OWNERS)
#: The folder names of a run folder scanned for (a string equal to one is flagged only as an operand of ``/``).
FOLDERS = frozenset({runfolder.LOGS})


def owned(module) -> set[str]:
    """The file names an owner module spells (its upper-case string constants, its folders aside)."""
    return {v for k, v in vars(module).items() if k.isupper() and isinstance(v, str) and v not in (*FOLDERS, runfolder_decode.DECODE_DIR)}


FILES = frozenset(set().union(*map(owned, OWNERS)))
NAME = re.compile(r"^(?:\S*/)?(?P<name>[^/\s*]+?)(?:\.gz)?\*?$")


def _docstrings(tree: ast.AST) -> set[int]:
    nodes = (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return {
        id(n.body[0].value)
        for n in ast.walk(tree)
        if isinstance(n, nodes) and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)
    }


def offences(source: str) -> list[tuple[int, str]]:
    """(line, text) of each string constant in ``source`` that names a run folder's file or builds a path with its folders."""
    tree = ast.parse(source)
    skip = _docstrings(tree)
    slashed = {id(side) for n in ast.walk(tree) if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Div) for side in (n.left, n.right)}
    out = []
    for n in ast.walk(tree):
        if not isinstance(n, ast.Constant) or not isinstance(n.value, str) or id(n) in skip:
            continue
        m = NAME.match(n.value.strip())
        if (m and m["name"] in FILES) or (n.value in FOLDERS and id(n) in slashed):
            out.append((n.lineno, n.value))
    return sorted(out)


def test_the_names_are_run_folder_files():
    assert {"results.csv", "results.csv.gz", "consistency.csv", "decode.json", "stages.jsonl", "timing.json"} <= FILES
    assert {"environment.json", "masks.jsonl", "coverage.csv", "lm_decode.csv", "decode_steps.csv"} <= FILES


def test_each_file_has_one_owner():
    """No file name is a constant of two owners; the decode and language-model writers are an owner's."""
    assert not owned(runfolder) & owned(runfolder_decode)
    assert {"decode.csv", "decode_steps.csv", "lm_decode.csv", "lm_flips.csv", "decode_summary.md"} <= owned(runfolder_decode)
    writers = (runfolder_decode.write_decode, runfolder_decode.write_merged_decode, runfolder_decode.write_lm_study)
    assert {w.__module__ for w in writers} <= {m.__name__ for m in OWNERS}


def test_no_module_but_runfolder_names_a_run_folder_file():
    found = []
    for p in sorted(PKG.rglob("*.py")):
        if p.resolve() in OWNER_PATHS:
            continue
        found += [f"{p.relative_to(PKG.parent)}:{line}: {text!r}" for line, text in offences(p.read_text(encoding="utf-8"))]
    assert not found, "run-folder file names outside parity/runfolder*.py (use their constants and readers):\n" + "\n".join(found)


@pytest.mark.parametrize(
    "code",
    [
        'path = out / "consistency.csv"',
        'open(folder / "results.csv")',
        'folder.glob("**/results.csv*")',
        'p = d / "decode" / "decode_steps.csv"',
        'log = out / "logs" / f"{unit}.log"',
        'print(f"wrote {out}/decode.json")',
        'NAME = "stages.jsonl"',
        'x = "masks.jsonl.gz"',
    ],
)
def test_the_scan_catches_a_planted_name(code):
    assert offences(code), code


@pytest.mark.parametrize(
    "code",
    [
        '"""Writes ``results.csv`` and ``stages.jsonl``."""',
        'def f():\n    """Reads consistency.csv."""',
        'raise ValueError(f"{d}: no results.csv (not a run folder)")',
        'p.add_argument("decode")',
        "x = runfolder.RESULTS",
        'y = "results"',
    ],
)
def test_the_scan_leaves_prose_and_constants_alone(code):
    assert not offences(code), code
