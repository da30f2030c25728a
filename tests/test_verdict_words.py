"""Verdicts are compared as types, not words (issue 51, item 3): no module of ``parity/`` but the one that owns
the verdicts (``parity/results.py``, :class:`parity.results.Outcome`) compares a verdict word spelled as a string.

The scan (:func:`verdict_words`) reads each module's syntax tree and reports a string constant equal to a verdict
word where it is compared (``x == "pass"``, ``x in ("unsupported", "unavailable")``), where it is one of a
collection of verdict words only (``SKIPPED = ("unsupported", "unavailable")``, compared later), and where it keys
a table of verdict words (``{"pass": "#1a7f37", ...}``). Docstrings and messages are not compared: never reported.
The columns ``*_check`` have words of their own (``ok``, ``mismatch``, ``error``, ``unsupported``): a comparison
with one of them is not a verdict's."""

from __future__ import annotations

import ast
from pathlib import Path

import pandas as pd

import parity
from parity.results import VERDICTS, Outcome

PKG = Path(parity.__file__).resolve().parent
OWNER = PKG / "results.py"
WORDS = {v.value for v in VERDICTS}


def _word(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in WORDS


def _words_only(node: ast.AST) -> bool:
    """A tuple / list / set literal of verdict words, and of nothing else but starred names
    (``("pass", "expected", *FAILING)``)."""
    if not isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return False
    words = [e for e in node.elts if not isinstance(e, ast.Starred)]
    return bool(words) and all(_word(e) for e in words)


def _of_a_check(node: ast.Compare) -> bool:
    """The comparison reads a ``*_check`` column (words of its own)."""
    sides = [node.left, *node.comparators]
    return any("_check" in ast.unparse(s) for s in sides if not isinstance(s, (ast.Constant, ast.Tuple, ast.List, ast.Set)))


def _compared(node: ast.Compare) -> list[ast.AST]:
    """The verdict-word constants a comparison reads (alone or in a literal collection)."""
    sides = [node.left, *node.comparators]
    found: list[ast.AST] = []
    for s in sides:
        found += [s] if _word(s) else [e for e in getattr(s, "elts", []) if _word(e)]
    return found


def verdict_words(source: str) -> list[tuple[int, str]]:
    """``(line, word)`` for each verdict word the module ``source`` reads as a string (the module docstring)."""
    hits: list[tuple[int, str]] = []
    tree = ast.parse(source)
    checks = {id(s) for n in ast.walk(tree) if isinstance(n, ast.Compare) and _of_a_check(n) for s in n.comparators}
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            hits += [] if _of_a_check(node) else [(c.lineno, c.value) for c in _compared(node)]  # type: ignore[attr-defined]
        elif _words_only(node) and id(node) not in checks:
            hits += [(e.lineno, e.value) for e in node.elts if _word(e)]  # type: ignore[attr-defined]
        elif isinstance(node, ast.Dict) and node.keys and all(k is not None and _word(k) for k in node.keys):
            hits += [(k.lineno, k.value) for k in node.keys]  # type: ignore[union-attr]
    return sorted(set(hits))


def test_no_module_but_the_owner_reads_a_verdict_word():
    found = {
        f"{p.relative_to(PKG.parent)}:{line}": word
        for p in sorted(PKG.rglob("*.py"))
        if p != OWNER
        for line, word in verdict_words(p.read_text())
    }
    assert not found, f"verdict words compared as strings (use parity.results.Outcome): {found}"


def test_the_scan_finds_each_kind_of_reading():
    planted = '''
"""A docstring saying pass and fail is no reading."""
SKIPPED = ("unsupported", "unavailable")
COLOURS = {"pass": "green", "fail": "red"}
def f(row, r):
    if row["verdict"] == "fail":
        return "error"  # a word written, not read
    if r.get("grad_check") in ("mismatch", "error"):  # a check's own words
        return 0
    return row["verdict"] in ("expected", "unexpected-pass") or "crash" != row["raw_verdict"]
RAN = sum(c.get(v, 0) for v in ("pass", *FAILING))
'''
    assert verdict_words(planted) == [
        (3, "unavailable"),
        (3, "unsupported"),
        (4, "fail"),
        (4, "pass"),
        (6, "fail"),
        (10, "crash"),
        (10, "expected"),
        (10, "unexpected-pass"),
        (11, "pass"),
    ]
    assert verdict_words('x = row["verdict"] == Outcome.FAIL\nmsg = "pass"\n') == []


def test_an_outcome_is_its_word_where_files_and_frames_meet_it():
    """What keeps results.csv byte-equal: the member writes, formats and hashes as its word."""
    assert [str(v) for v in VERDICTS] == [
        "pass", "fail", "error", "crash", "timeout", "expected", "unexpected-pass", "unsupported", "unavailable",
    ]  # fmt: skip
    assert f"{Outcome.UNEXPECTED_PASS}|{Outcome.PASS:>6}" == "unexpected-pass|  pass"
    assert {"pass": 1}[Outcome.PASS] == 1 and {Outcome.FAIL: 2}["fail"] == 2
    df = pd.DataFrame({"verdict": ["pass", "fail", "expected"]})
    assert (df["verdict"] == Outcome.PASS).tolist() == [True, False, False]
    assert df["verdict"].isin((Outcome.FAIL, Outcome.EXPECTED)).tolist() == [False, True, True]
    assert pd.DataFrame({"verdict": [Outcome.PASS]}).to_csv(index=False) == "verdict\npass\n"
    assert Outcome.of("unexpected-pass") is Outcome.UNEXPECTED_PASS and Outcome.of("") is None and Outcome.of("ok") is None
