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

import pytest

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
        n
        for n, v in vars(parity).items()
        if not n.startswith("_")
        and not isinstance(v, (type(parity), __future__._Feature))  # submodules, annotations
        and n != "TYPE_CHECKING"
    } | set(parity._LAZY)
    assert set(parity.__all__) - {"__version__"} == public
    assert len(parity.__all__) == len(set(parity.__all__))
    for name in parity.__all__:
        assert hasattr(parity, name), name


def test_only_user_errors_are_exit_2(monkeypatch, capsys):
    """Bad input is one line and exit 2; a bug in the harness itself keeps its traceback."""
    from parity import cli
    from parity.cli import backends as backends_command
    from parity.errors import UserError

    def user_error(args):
        raise UserError("bad input")

    monkeypatch.setattr(backends_command, "run", user_error)
    assert cli.main(["backends"]) == 2
    assert capsys.readouterr().err.strip() == "parity: error: bad input"

    def bug(args):
        raise ValueError("a bug in the harness")

    monkeypatch.setattr(backends_command, "run", bug)
    with pytest.raises(ValueError, match="a bug in the harness"):
        cli.main(["backends"])


#: A command line that parses, per subcommand (its run is replaced below).
_ARGV = {
    "run": [],
    "backends": [],
    "report": ["dir"],
    "diff": ["base", "head"],
    "vdiff": ["base", "head"],
    "evidence": ["dir"],
    "merge": ["out", "dir"],
    "export-repro": ["dir"],
    "decode": [],
    "decode-train": ["--out", "x"],
    "selftest": [],
    "consistency": ["-b", "sdpa"],
}


def _command_names() -> dict[str, object]:
    import argparse

    from parity import cli

    sub = argparse.ArgumentParser().add_subparsers()
    return {module.add_parser(sub).prog.split()[-1]: module for module in cli.COMMANDS}


def test_every_command_is_here():
    assert sorted(_command_names()) == sorted(_ARGV)


@pytest.mark.parametrize("name", sorted(_ARGV))
def test_a_value_error_in_any_command_keeps_its_traceback(name, monkeypatch):
    """Every subcommand: a plain ValueError (a bug in the harness) is not turned into exit 2."""
    from parity import cli

    def bug(args):
        raise ValueError(f"a bug in {name}")

    monkeypatch.setattr(_command_names()[name], "run", bug)
    with pytest.raises(ValueError, match=f"a bug in {name}"):
        cli.main([name, *_ARGV[name]])


def test_every_cli_module_is_a_command():
    """Each module of parity/cli/ (but the package and its shared helpers, common.py) is a
    subcommand: ``add_parser(subparsers)`` and ``run(args)``, listed in ``parity.cli.COMMANDS``."""
    import importlib

    from parity import cli

    names = sorted(p.stem for p in (PKG / "cli").glob("*.py") if p.stem not in ("__init__", "common"))
    assert names == sorted(m.__name__.rsplit(".", 1)[1] for m in cli.COMMANDS)
    for name in names:
        module = importlib.import_module(f"parity.cli.{name}")
        assert callable(getattr(module, "add_parser", None)), f"parity/cli/{name}.py has no add_parser"
        assert callable(getattr(module, "run", None)), f"parity/cli/{name}.py has no run"


def test_consistency_is_a_subcommand(tmp_path, capsys):
    from parity import cli

    argv = [
        "-b",
        "sdpa",
        "--seq",
        "24",
        "--window",
        "8",
        "--dtype",
        "float32",
        "--hq",
        "2",
        "--hkv",
        "1",
        "--head-dim",
        "8",
        "--out",
        str(tmp_path),
    ]
    assert cli.main(["consistency", *argv]) == 0
    assert "pass" in capsys.readouterr().out
    assert (tmp_path / "consistency.csv").read_text().startswith("backend,check,")


def test_python_m_parity_consistency_is_the_subcommand(tmp_path):
    """The documented ``python -m parity.consistency`` runs ``python -m parity consistency``."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(PKG.parent)}
    argv = [
        "-b",
        "sdpa",
        "--seq",
        "12",
        "--window",
        "4",
        "--dtype",
        "float32",
        "--hq",
        "1",
        "--hkv",
        "1",
        "--head-dim",
        "8",
        "--out",
        str(tmp_path),
    ]
    res = subprocess.run([sys.executable, "-m", "parity.consistency", *argv], capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert (tmp_path / "consistency.csv").read_text().startswith("backend,check,")
    bad = subprocess.run([sys.executable, "-m", "parity.consistency", "--seq", "x"], capture_output=True, text=True, env=env, timeout=300)
    assert bad.returncode == 2 and bad.stderr.strip().splitlines()[-1] == "parity: error: argument --seq: invalid int value: 'x'"


def architecture_tree() -> set[str]:
    """The modules docs/architecture.md's tree names, as paths under parity/: a line
    ``  name.py`` at the top, ``  folder/`` opens a package and ``    name.py`` is one of its modules."""
    import re

    text = (PKG.parent / "docs" / "architecture.md").read_text()
    tree = text.split("```text", 1)[1].split("```", 1)[0]
    named, folder = set(), None
    for line in tree.splitlines():
        top = re.match(r"^ {2}(\w+/|\S+\.py)(\s|$)", line)
        sub = re.match(r"^ {4}(\S+\.py)(\s|$)", line)
        if top and top.group(1).endswith("/"):
            folder = top.group(1)
        elif top:
            named.add(top.group(1))
            folder = None
        elif sub:
            assert folder, f"README architecture: {line.strip()!r} is under no folder"
            named.add(folder + sub.group(1))
    return named


def test_readme_architecture_names_every_module():
    """The README's architecture tree names every module of parity/ (a package's __init__.py may
    go unnamed), and names no module that does not exist."""
    named = architecture_tree()
    actual = {p.relative_to(PKG).as_posix() for p in PKG.rglob("*.py")}
    lacking = {m for m in actual - named if not (m.endswith("/__init__.py"))}
    assert not lacking, f"README architecture lacks {sorted(lacking)}"
    assert not named - actual, f"README architecture names modules that do not exist: {sorted(named - actual)}"


def test_the_tree_reader_reads_packages():
    assert {"report/html.py", "cli/run.py", "errors.py", "backends/__init__.py"} <= architecture_tree()


def test_the_layers_of_the_reports_and_the_command_line():
    """Neither report renderer imports the other; nothing but ``python -m parity`` imports the command line."""
    graph = import_graph()
    assert "parity.report.text" not in graph["parity.report.html"]
    assert "parity.report.html" not in graph["parity.report.text"]
    above_cli = {
        m
        for m, deps in graph.items()
        if not m.startswith("parity.cli") and m != "parity.__main__" and any(d == "parity.cli" or d.startswith("parity.cli.") for d in deps)
    }
    assert not above_cli, f"library modules import the command line: {sorted(above_cli)}"


#: The layers of the README's Architecture section, lowest first (top-level names under parity/).
LAYERS = [
    {
        "errors",
        "files",
        "results",
        "window",
        "case",
        "reference",
        "verdict",
        "grad",
        "maskscale",
        "maskcheck",
        "memory",
        "regimes",
        "markers",
        "env",
        "compile_cache",
        "repro_script",
        "runfolder",
        "runfolder_decode",
    },
    {"backends"},
    {"coverage", "strategies", "models", "design", "shard", "expect"},
    {"invariance", "graphs", "transfer", "shared_inputs", "execute", "worker", "process", "judge"},
    {"sweep", "api", "shrink", "consistency", "decode", "selftest", "export_repro"},
    {"report"},
    {"runner"},
    {"cli", "pytest_plugin", "__main__"},
]


def test_no_module_imports_from_a_later_layer():
    """The README's layering holds: every module of parity/ is in one layer, and none imports from a
    layer after its own (function-level imports counted, as in the import-circle test)."""

    def layer(mod: str) -> int:
        top = mod.split(".")[1] if "." in mod else "__init__"
        found = [i for i, names in enumerate(LAYERS) if top in names]
        assert found, f"{mod}: in no layer of LAYERS (add it, and to the README's Architecture section)"
        return found[0]

    up = [(m, d) for m, deps in import_graph().items() if m != "parity" for d in deps if d != "parity" and layer(d) > layer(m)]
    assert not up, f"imports from a later layer: {sorted(up)}"


def test_every_relative_import_names_a_module_that_exists():
    """A relative import inside parity/ (function-level ones included) names an existing module: after
    the move to parity/report/, a leftover ``from .sweep.timing import ...`` in report/merge.py
    broke `parity merge` at run time only."""
    known = _modules()
    missing = []
    for mod, path in known.items():
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = mod.split(".") if is_pkg else mod.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
                if target not in known:
                    missing.append(f"{path.relative_to(PKG.parent)}:{node.lineno} {target}")
    assert not missing, missing


RUN_FOLDER_FILES = {
    "results.csv",
    "results.csv.gz",
    "results.json",
    "environment.json",
    "masks.jsonl",
    "shrunk.jsonl",
    "timing.json",
    "coverage.csv",
}


def test_the_run_folder_files_are_named_in_runfolder_only():
    """A run folder's file names (and so the "results.csv or results.csv.gz" lookup) are written in
    parity/runfolder.py only: every other module goes through it (prose in docstrings aside)."""
    found = []
    for path in sorted(PKG.rglob("*.py")):
        if path.name == "runfolder.py" and path.parent == PKG:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in RUN_FOLDER_FILES:
                found.append(f"{path.relative_to(PKG)}:{node.lineno} {node.value!r}")
    assert not found, "run-folder file names outside parity/runfolder.py: " + ", ".join(found)


def test_no_argparse_namespace_below_cli():
    """Options travel as frozen objects: no module of parity/ outside cli/ names argparse (a
    Namespace parameter, an import), so no Namespace passes below the command line."""
    found = []
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG)
        if rel.parts[0] == "cli" or path.name == "pytest_plugin.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                found += [f"{rel}:{node.lineno} imports {m}" for m in mods if m.split(".")[0] == "argparse"]
            elif isinstance(node, ast.arg) and node.annotation is not None and "Namespace" in ast.unparse(node.annotation):
                found.append(f"{rel}:{node.lineno} parameter {node.arg}: {ast.unparse(node.annotation)}")
            elif isinstance(node, ast.arg) and node.arg == "args" and node.annotation is None:
                found.append(f"{rel}:{node.lineno} an unannotated parameter 'args'")
    assert not found, "argparse below parity/cli/: " + ", ".join(found)


def test_cli_run_parses_only():
    """cli/run.py parses (flags -> RunRequest) and hands over to parity.runner; it stays short."""
    text = (PKG / "cli" / "run.py").read_text()
    assert len(text.splitlines()) < 250
    assert "def run(args" in text and "run_request(request(args))" in text
