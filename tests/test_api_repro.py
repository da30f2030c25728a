"""assert_parity / failure_message on a Backend instance: the repro line names what loads the
backend (``module:Class``), so the printed command runs (exit 1 for a buggy kernel, not 2)."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from examples.my_kernel import MyKernel, MyKernelOffByOne
from parity import Case, ParityError, Window, assert_parity, evaluate
from parity.api import spec_of
from parity.backends import get

ROOT = Path(__file__).resolve().parents[1]
CASE = Case(q_lens=(40,), k_lens=(40,), hq=2, hkv=1, head_dim=16, dtype="float32", window=Window(6, 0), seed=3)


def test_spec_of_names_the_registry_name_or_module_class():
    assert spec_of(get("sdpa")) == "sdpa"
    assert spec_of(MyKernel()) == "examples.my_kernel:MyKernel"

    class Local(MyKernel):
        name = "local-kernel"

    assert spec_of(Local()) == "local-kernel"  # defined in a function: nothing can load it by path


def test_repro_of_a_backend_instance_runs_and_fails(tmp_path):
    with pytest.raises(ParityError) as err:
        assert_parity(MyKernelOffByOne(), CASE)
    last = str(err.value).splitlines()[-1].strip()
    assert last.startswith("repro: python -m parity run --backend examples.my_kernel:MyKernelOffByOne --case "), last
    cmd = shlex.split(last.removeprefix("repro: "))
    assert cmd[:3] == ["python", "-m", "parity"]
    p = subprocess.run(
        [sys.executable, *cmd[1:], "--out", str(tmp_path / "o"), "-q", "--no-report"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert p.returncode == 1, p.stdout + p.stderr  # a failure, not 2 (unknown backend)
    assert "FAIL" in p.stdout + p.stderr


def test_the_honest_instance_row_names_its_class():
    row = evaluate(MyKernel(), CASE)
    assert row["verdict"] == "pass" and row["backend"] == "examples.my_kernel:MyKernel" and row["backend_name"] == "my-kernel"
