"""The user-facing documents: README.md and docs/*.md.

The README is short, starts with the two set-up commands that CI runs (.ci/run, noxfile.py),
names no file outside the repository, and every relative link in it and in docs/ resolves to a
file of the repository. docs/ci.md uses only options the command line has.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
MAX_LINES = 300

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _text(p: Path) -> str:
    return p.read_text(encoding="utf-8")


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    s = re.sub(r"[`*_]", "", heading.strip().lower())
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def _anchors(text: str) -> set[str]:
    out, fenced = set(), False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (m := re.match(r"#{1,6} (.+)", line)):
            out.add(_slug(m.group(1)))
    return out


def _links(text: str) -> list[str]:
    return [t for t in LINK.findall(text) if not re.match(r"[a-z]+:", t)]  # http:, https:, mailto:


# ---------------------------------------------------------------- README


def test_readme_is_short():
    n = len(_text(README).splitlines())
    assert n < MAX_LINES, f"README.md has {n} lines; keep it under {MAX_LINES} (details go to docs/ or beside a run)"


@pytest.mark.parametrize("needle", ["../", "/work/", "shared/", "/tmp/", "~/"])
def test_readme_names_no_path_outside_the_repository(needle):
    hits = [f"{i}: {line}" for i, line in enumerate(_text(README).splitlines(), 1) if needle in line]
    assert not hits, f"README.md names a path outside the repository ({needle!r}):\n" + "\n".join(hits)


@pytest.mark.parametrize("doc", [README, *DOCS], ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve_inside_the_repository(doc):
    text = _text(doc)
    assert "/work/" not in text and "shared/" not in text, f"{doc.name} names a path outside the repository"
    bad = []
    for target in _links(text):
        path, _, anchor = target.partition("#")
        if not path:  # an anchor in this file
            if anchor not in _anchors(text):
                bad.append(f"{target}: no such heading")
            continue
        dest = (doc.parent / path).resolve()
        if not dest.is_relative_to(ROOT):
            bad.append(f"{target}: outside the repository")
        elif not dest.exists():
            bad.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(_text(dest)):
            bad.append(f"{target}: no such heading in {dest.relative_to(ROOT)}")
    assert not bad, f"{doc.relative_to(ROOT)}: broken links:\n" + "\n".join(bad)


def _ci_run_facts() -> tuple[str, str]:
    """(.ci/run's torch pin, .ci/run's README test command)."""
    lines = _text(ROOT / ".ci" / "run").splitlines()
    pins = [m.group(1) for line in lines if (m := re.search(r'pip install -q "(torch==[^"]+)"', line))]
    assert len(pins) == 1, pins
    i = next(i for i, line in enumerate(lines) if line.strip().startswith("# The README's test command"))
    return pins[0], lines[i + 1].strip()


def test_ci_runs_the_slow_tests_the_readme_command_leaves_out():
    """README command 2 is the fast suite (pyproject's addopts deselect `slow`); CI runs the rest too."""
    addopts = tomllib.loads(_text(ROOT / "pyproject.toml"))["tool"]["pytest"]["ini_options"]["addopts"]
    assert " ".join(addopts).endswith("-m not slow")
    lines = [line.strip() for line in _text(ROOT / ".ci" / "run").splitlines()]
    assert _nox_command("slow") in lines


def _nox_command(session: str) -> str:
    """The command a noxfile session runs, its defaults filled in (os.environ.get(NAME, DEFAULT))."""
    tree = ast.parse(_text(ROOT / "noxfile.py"))
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == session)
    calls = [c for c in ast.walk(fn) if isinstance(c, ast.Call) and getattr(c.func, "attr", "") == "run"]
    words = []
    for a in calls[-1].args:
        if isinstance(a, ast.Constant):
            words.append(a.value)
        elif isinstance(a, ast.Call) and getattr(a.func, "attr", "") == "get":  # os.environ.get(NAME, DEFAULT)
            words.append(a.args[1].value)
        # *session.posargs (and its default) is what the user adds
    return " ".join(words)


def _nox_torch_default() -> str:
    m = re.search(r'os\.environ\.get\("PARITY_TORCH", "([^"]+)"\)', _text(ROOT / "noxfile.py"))
    assert m
    return m.group(1)


def test_readme_starts_with_the_two_commands_ci_runs():
    text = _text(README)
    first_block = re.search(r"```(\w*)\n(.*?)```", text, re.S)
    assert first_block and first_block.group(1) == "bash", "README.md must open with a bash block"
    before = text[: first_block.start()]
    assert before.count("\n## ") <= 1, "the set-up commands come before every section but their own"
    commands = [line for line in first_block.group(2).splitlines() if line.strip() and not line.startswith("#")]
    assert len(commands) == 2, commands

    torch_pin, ci_test = _ci_run_facts()
    assert torch_pin == _nox_torch_default(), ".ci/run and noxfile.py pin different torch builds"
    install = f'python -m pip install "{torch_pin}" -e ".[test]"'
    # 1. the main job: the sweep, as `nox -s parity` runs it (without its default arguments)
    assert commands[0] == f"{install} && {_nox_command('parity')}"
    # 2. the tests: what .ci/run runs, and what `nox -s tests` runs
    assert ci_test == _nox_command("tests")
    assert commands[1] == f"{install} && {ci_test}"
    # `parity run` writes its reports with pandas: the test extra brings the report extra's packages
    extras = tomllib.loads(_text(ROOT / "pyproject.toml"))["project"]["optional-dependencies"]
    assert set(extras["report"]) <= set(extras["test"])


def test_readme_puts_testing_your_own_kernel_early():
    lines = _text(README).splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("## Testing your own kernel"))
    assert at < 100, f"'Testing your own kernel' starts at line {at + 1}"
    section = "\n".join(lines[at:]).split("\n## ", 1)[0]
    assert "--parity-backend" in section and "assert_parity" in section


# ---------------------------------------------------------------- docs/ci.md


def _help(sub: str) -> str:
    out = subprocess.run([sys.executable, "-m", "parity", sub, "--help"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_ci_workflow_uses_only_real_options():
    text = _text(ROOT / "docs" / "ci.md")
    for needed in ("--shard", "parity merge", "parity diff", "summary.md", "gh pr comment", "actions/cache", "matrix:"):
        assert needed in text, f"docs/ci.md lacks {needed!r}"
    helps: dict[str, str] = {}
    bad = []
    for line in text.splitlines():
        line = line.split(" # ", 1)[0]
        uses = [(m.group(1), m.group(2)) for m in re.finditer(r"python -m parity ([a-z][a-z-]*)([^|;&]*)", line)]
        if m := re.search(r"nox -s gpu -- ([^|;&]*)", line):
            uses.append(("run", m.group(1)))  # arguments after -- go to parity run
        for sub, rest in uses:
            if sub not in helps:
                helps[sub] = _help(sub)
            for opt in re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", rest):
                if not re.search(rf"(?<![\w-]){re.escape(opt)}(?![\w-])", helps[sub]):
                    bad.append(f"parity {sub} {opt}")
    assert not bad, f"docs/ci.md uses options the command line does not have: {sorted(set(bad))}"


def test_exit_codes_come_from_one_table():
    """`parity run --help` prints parity.errors.EXIT_CODES; the README's list names every code in it."""
    from parity.errors import EXIT_CODES

    help_text = subprocess.run([sys.executable, "-m", "parity", "run", "--help"], capture_output=True, text=True, cwd=ROOT).stdout
    readme = _text(README)
    para = readme[readme.index("Exit codes of `parity run`") :]
    para = para[: para.index("\n\n")]
    for code, words in EXIT_CODES.items():
        assert f"  {code:<4} {words}" in help_text, (code, help_text[-800:])
        assert f"`{code}`" in para, f"README's exit codes miss {code}"
    assert set(int(c) for c in re.findall(r"`(\d+)`", para)) == set(EXIT_CODES), para
