"""tests/fixtures/make_lab_rows.py rebuilds tests/fixtures/lab-rows/ byte for byte: each part from lab/runs/ as the
commit it was made from held them (the runs as they are now are compacted, grown and retired since, and once made
other fixtures: 12 torch-fa2 rows of fa2-masks ``expected`` where the committed ones are ``fail``, 26 of the sample's
28 edge ids)."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAB_ROWS = ROOT / "tests" / "fixtures" / "lab-rows"


def _script():
    spec = importlib.util.spec_from_file_location("make_lab_rows", ROOT / "tests" / "fixtures" / "make_lab_rows.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _have(commit: str) -> bool:
    if shutil.which("git") is None:
        return False
    return subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{commit}^{{commit}}"], capture_output=True).returncode == 0


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_rebuild_of_the_lab_rows_reproduces_the_committed_fixtures(tmp_path):
    make = _script()
    if missing := [c for c in sorted(set(make.MADE_AT.values())) if not _have(c)]:
        pytest.skip(f"this checkout lacks the commit(s) the fixtures were made from: {missing} (a shallow clone?)")
    make.build(tmp_path, list(make.PARTS))
    made, committed = _files(tmp_path), _files(LAB_ROWS)
    assert sorted(made) == sorted(committed), f"files made {sorted(made)}, committed {sorted(committed)}"
    differ = {name: (len(made[name]), len(committed[name])) for name in made if made[name] != committed[name]}
    assert not differ, f"{len(differ)} of {len(made)} files differ (bytes made, committed): {differ}"
