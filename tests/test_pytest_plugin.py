"""The pytest plugin (parity/pytest_plugin.py, entry point ``pytest11``) used from another project.

A temporary project outside this repository holds a package with two ``module:Class`` backends
built on the float64 reference (an honest one, and one whose window is one token wider on the
left) and a test file using the plugin's fixtures; a child ``python -m pytest --parity-backend
mypkg.k:K`` runs there with the installed attn-parity found normally (no conftest of ours).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

KERNELS = """
import dataclasses

from parity import Window
from parity.backends.reference import ReferenceBackend
from parity.reference import attention_reference


class K(ReferenceBackend):
    name = "my-k"


class KOffByOne(ReferenceBackend):
    name = "my-k-off-by-one"

    def run(self, case, inputs, out):
        w = case.window
        if w.left is not None:
            case = dataclasses.replace(case, window=Window(w.left + 1, w.right, w.align))
        out.copy_(attention_reference(dataclasses.replace(inputs, case=case)))
        return out
"""

TEST_K = """
def test_kernel(parity_backend, parity_case, assert_parity):
    assert_parity(parity_backend, parity_case)
"""

TEST_PLAIN = """
import sys


def test_plain_tests_do_not_pay_for_the_plugin():
    assert "torch" not in sys.modules and "hypothesis" not in sys.modules
"""


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("kernel-project")
    (root / "mypkg").mkdir()
    (root / "mypkg" / "__init__.py").write_text("")
    (root / "mypkg" / "k.py").write_text(KERNELS)
    (root / "tests").mkdir()
    (root / "tests" / "test_plain.py").write_text(TEST_PLAIN)
    (root / "tests" / "test_k.py").write_text(TEST_K)
    return root


def _pytest(project: Path, *args: str, profile: tuple[str, ...] = ("--parity-profile", "quick")) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARITY_")}
    env["PYTHONPATH"] = str(project)  # the kernel package; attn-parity is the installed one
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *profile, *args]
    return subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True, timeout=900)


def test_plugin_is_inert_in_a_project_that_does_not_use_it(project):
    p = _pytest(project, "tests/test_plain.py", profile=())
    assert p.returncode == 0, p.stdout + p.stderr
    assert "1 passed" in p.stdout


def test_honest_module_class_backend_passes_every_case(project):
    p = _pytest(project, "tests/test_k.py", "--parity-backend", "mypkg.k:K", "-k", "float32")  # 49 cases, ~30 s
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    assert "failed" not in out and " passed" in out, out


def test_no_backend_given_is_a_skip_with_the_reason(project):
    p = _pytest(project, "tests/test_k.py", "-rs", "-k", "float32")
    out = p.stdout + p.stderr
    assert p.returncode == 0 and "skipped" in out and "--parity-backend" in out, out


def test_buggy_module_class_backend_fails_with_a_repro_naming_it(project):
    p = _pytest(project, "tests/test_k.py", "--parity-backend", "mypkg.k:KOffByOne", "-x")
    out = p.stdout + p.stderr
    assert p.returncode == 1, out
    assert "1 failed" in out, out
    msg = [ln.strip() for ln in out.splitlines() if "ParityError" in ln or "repro:" in ln]
    repro = next(ln for ln in out.splitlines() if "repro: python -m parity run" in ln)
    assert "--backend mypkg.k:KOffByOne --case" in repro, msg
    assert "mask" in out and "one token wider on the left" in out, out
    # the failure message ends with the repro line: nothing of the message after it
    block = out[out.index("ParityError") :]
    lines = [ln for ln in block.splitlines() if ln.startswith("E ")]
    assert "repro: python -m parity run --backend mypkg.k:KOffByOne" in lines[-1], lines


def test_checkout_without_installed_entry_point_still_has_the_options():
    """A GPU runner that runs this checkout's tests without ``pip install -e .`` has no ``pytest11``
    entry point (simulated by PYTEST_DISABLE_PLUGIN_AUTOLOAD): the root conftest registers the
    plugin itself, so ``--parity-profile`` is still an option (on the H200, 2026-12-04, pytest
    exited 4 "unrecognized arguments: --parity-profile" before this)."""
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--parity-profile",
            "quick",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/test_window.py",
            "-k",
            "truth_table or from_",
        ],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout
