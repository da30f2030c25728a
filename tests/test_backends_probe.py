"""`parity backends` checks every backend in one shared worker: the same availability as one worker
per backend, and a backend whose import kills the process costs only its own row."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from parity import backends
from parity.cli.backends import _infos_fast, _infos_in_workers

ROOT = Path(__file__).resolve().parents[1]

CRASHY = "import ctypes\nctypes.string_at(0)  # segfault on import\n"
BROKEN = "raise ImportError('no such toolkit here')\n"


def _plant(tmp_path):
    (tmp_path / "crashy_kernel.py").write_text(CRASHY)
    (tmp_path / "broken_kernel.py").write_text(BROKEN)
    dist = tmp_path / "crashy-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: crashy\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[attn_parity.backends]\ncrashy = crashy_kernel:Boom\n")


@pytest.mark.slow  # every backend's availability twice, in worker processes (about 25 s)
def test_shared_worker_gives_the_same_availability_as_one_worker_each(tmp_path, monkeypatch):
    _plant(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    names = backends.names()
    half = len(names) // 2  # a crash in the middle: the ones after it must still be checked
    specs = [*names[:half], "crashy_kernel:Boom", "broken_kernel:K", *names[half:]]
    fast = _infos_fast(specs, {})
    slow = _infos_in_workers(specs, {})
    assert [r["spec"] for r in fast] == specs
    assert fast == slow
    by = {r["spec"]: r for r in fast}
    assert "SIGSEGV" in by["crashy_kernel:Boom"]["unavailable"]
    assert "no such toolkit here" in by["broken_kernel:K"]["unavailable"]
    assert by["reference"]["unavailable"] is None and by[names[-1]]["spec"] == names[-1]


def test_backends_command_lists_the_others_when_one_crashes_on_import(tmp_path):
    _plant(tmp_path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    cmd = [sys.executable, "-m", "parity", "backends", "--json"]
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    rows = {r["spec"]: r for r in json.loads(p.stdout)}
    assert "SIGSEGV" in rows["crashy"]["unavailable"]
    assert set(backends.names()) <= set(rows)
    assert rows["reference"]["unavailable"] is None and rows["sdpa"]["unavailable"] is None
