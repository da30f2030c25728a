"""Tests that keep the design honest: no import circle inside parity/, no over-long function,
and ``parity.__all__`` is exactly what ``import parity`` exports.

Both structural checks read the source with :mod:`ast` (nothing is imported): every ``import``
and ``from ... import`` counts, at module level or inside a function, except a module's import
of its own parent packages (which Python runs first anyway). Imports of names outside parity/
(optional third-party packages included) are not edges.
"""

from __future__ import annotations

import ast
from pathlib import Path

import parity

PKG = Path(parity.__file__).resolve().parent
MAX_LINES = 80
#: Functions still over MAX_LINES, with their length when this test was written: each may only
#: shrink (then lower or drop its entry); no other function may pass MAX_LINES.
OVER_LONG_ALLOWED: dict[str, int] = {}


def _modules() -> dict[str, Path]:
    out = {}
    for p in PKG.rglob("*.py"):
        parts = list(p.relative_to(PKG.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


def _imported(mod: str, is_pkg: bool, node: ast.Import | ast.ImportFrom, known: dict[str, Path]) -> set[str]:
    names = []
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        if node.level:
            base = mod.split(".") if is_pkg else mod.split(".")[:-1]
            base = base[: len(base) - (node.level - 1)]
            prefix = ".".join(base + ([node.module] if node.module else []))
        else:
            prefix = node.module or ""
        names = [prefix] + [f"{prefix}.{a.name}" for a in node.names]
    found = set()
    for name in names:
        parts = name.split(".")
        for i in range(len(parts), 0, -1):
            if ".".join(parts[:i]) in known:
                found.add(".".join(parts[:i]))
                break
    return found


def import_graph() -> dict[str, set[str]]:
    known = _modules()
    graph = {}
    for mod, path in known.items():
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                deps |= _imported(mod, path.name == "__init__.py", node, known)
        graph[mod] = {d for d in deps if d != mod and not mod.startswith(d + ".")}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def over_long() -> dict[str, int]:
    out = {}
    for path in sorted(PKG.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                if n > MAX_LINES:
                    out[f"{path.relative_to(PKG.parent).as_posix()}:{node.name}"] = n
    return out


def test_no_import_cycle_inside_parity():
    assert cycles(import_graph()) == []


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_function_over_80_lines():
    found = over_long()
    grown = {k: n for k, n in found.items() if n > OVER_LONG_ALLOWED.get(k, MAX_LINES)}
    assert not grown, f"functions over {MAX_LINES} lines (split them): {grown}"


def test_all_is_what_parity_exports():
    """``__all__`` names exactly the public names: those defined in ``parity/__init__.py`` and the
    ones it imports on first use (PEP 562, ``_LAZY``, so the torch-free pytest plugin imports no
    torch); each resolves."""
    import __future__

    public = {
        n for n, v in vars(parity).items()
        if not n.startswith("_") and not isinstance(v, (type(parity), __future__._Feature))  # submodules, annotations
        and n != "TYPE_CHECKING"
    } | set(parity._LAZY)
    assert set(parity.__all__) - {"__version__"} == public
    assert len(parity.__all__) == len(set(parity.__all__))
    for name in parity.__all__:
        assert hasattr(parity, name), name


def test_only_user_errors_are_exit_2(monkeypatch, capsys):
    """Bad input is one line and exit 2; a bug in the harness itself keeps its traceback."""
    import pytest

    from parity import cli
    from parity.errors import UserError

    assert cli.UsageError is UserError

    def user_error(args):
        raise UserError("bad input")

    monkeypatch.setattr(cli, "cmd_backends", user_error)
    assert cli.main(["backends"]) == 2
    assert capsys.readouterr().err.strip() == "parity: error: bad input"

    def bug(args):
        raise ValueError("a bug in the harness")

    monkeypatch.setattr(cli, "cmd_backends", bug)
    with pytest.raises(ValueError, match="a bug in the harness"):
        cli.main(["backends"])


def test_consistency_is_a_subcommand(tmp_path, capsys):
    from parity import cli

    argv = ["-b", "sdpa", "--seq", "24", "--window", "8", "--dtype", "float32", "--hq", "2", "--hkv", "1",
            "--head-dim", "8", "--out", str(tmp_path)]
    assert cli.main(["consistency", *argv]) == 0
    assert "pass" in capsys.readouterr().out
    assert (tmp_path / "consistency.csv").read_text().startswith("backend,check,")


def test_readme_architecture_names_every_module():
    """The README's architecture tree names every module of parity/ (packages by their folder
    line and their modules on it), and nothing that is not there."""
    import re

    text = (PKG.parent / "README.md").read_text()
    tree = text.split("## Architecture", 1)[1].split("```text", 1)[1].split("```", 1)[0]
    named = set(re.findall(r"^\s{2}(\S+\.py)\s", tree, re.M)) | {"__main__.py"}
    folders = {f.rstrip("/"): line for f, line in re.findall(r"^\s{2}(\w+/)\s+(.*(?:\n\s{20,}.*)*)", tree, re.M)}
    for path in PKG.rglob("*.py"):
        rel = path.relative_to(PKG)
        if len(rel.parts) == 1:
            assert rel.name in named, f"README architecture lacks parity/{rel}"
        else:
            assert rel.parts[0] in folders, f"README architecture lacks parity/{rel.parts[0]}/"
            assert rel.stem == "__init__" or rel.stem in folders[rel.parts[0]], f"README architecture lacks parity/{rel}"
    for name in named:
        assert (PKG / name).exists(), f"README architecture names parity/{name}, which does not exist"
