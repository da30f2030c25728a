import csv
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from parity import Case, Window
from parity.cli import main

ROOT = Path(__file__).resolve().parents[1]
CASE = Case(q_lens=(24,), k_lens=(24,), hq=2, hkv=1, head_dim=16, dtype="bfloat16", window=Window(4, 0), seed=3)


def run_cli(*args, cwd=ROOT):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "parity", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def test_plugged_in_off_by_one_is_reported_by_budget_and_mask(tmp_path):
    p = run_cli("run", "--backend", "examples.my_kernel:MyKernelOffByOne", "--case", CASE.to_json(), "--out", str(tmp_path), "-q")
    assert p.returncode == 1, p.stderr
    assert "window is one token wider on the left" in p.stdout
    assert "max_err" in p.stdout and "mask" in p.stdout
    rows = list(csv.DictReader((tmp_path / "results.csv").open()))
    assert rows[0]["verdict"] == "fail" and "mask" in rows[0]["reasons"] and "max_err" in rows[0]["reasons"]
    assert rows[0]["repro"].startswith("python -m parity run --backend examples.my_kernel:MyKernelOffByOne --case ")


def test_honest_plugin_passes_and_writes_results(tmp_path):
    p = run_cli(
        "run", "--backend", "examples.my_kernel:MyKernel", "--backend", "sdpa", "--case", CASE.to_json(), "--out", str(tmp_path), "-q"
    )
    assert p.returncode == 0, p.stdout + p.stderr
    rows = list(csv.DictReader((tmp_path / "results.csv").open()))
    assert [r["verdict"] for r in rows] == ["pass", "pass"]
    env = json.loads((tmp_path / "environment.json").read_text())
    assert env["torch"] and "examples.my_kernel:MyKernel" in env["backends"]
    lines = p.stdout.strip().splitlines()
    assert lines[-4].startswith("backend") and lines[-1].startswith("sdpa")  # summary table printed last


def test_repro_command_from_csv_reruns_the_case(tmp_path):
    run_cli("run", "--backend", "examples.my_kernel:MyKernelOffByOne", "--case", CASE.to_json(), "--out", str(tmp_path / "a"), "-q")
    rows = list(csv.DictReader((tmp_path / "a" / "results.csv").open()))
    p = run_cli("run", "--case-file", str(tmp_path / "a" / "results.csv"), "--backend", "sdpa", "--out", str(tmp_path / "b"), "-q")
    assert p.returncode == 0
    again = list(csv.DictReader((tmp_path / "b" / "results.csv").open()))
    assert again[0]["case_id"] == rows[0]["case_id"]


@pytest.mark.parametrize(
    "args,needle",
    [
        (["run", "--backend", "nosuch"], "unknown backend 'nosuch'"),
        (["run", "--backend", "examples.my_kernel"], None),  # no colon: not a path, not a name
        (["run", "--backend", "examples.nosuch:X"], "module 'examples.nosuch' not found"),
        (["run", "--backend", "examples.my_kernel:Nope"], "has no attribute 'Nope'"),
        (["run", "--backend", "sdpa", "--case", "{bad json"], "not valid JSON"),
        (["run", "--backend", "sdpa", "--case", '{"q_lens":[3],"k_lens":[3],"hq":3,"hkv":2,"head_dim":8}'], "divisible"),
        (["run", "--budget", "bfloat16.k_max"], "DTYPE.FIELD=VALUE"),
        (["run", "--profile", "huge"], "invalid choice"),
        (["frobnicate"], "invalid choice"),
        (["run", "--backend", "reference", "--split", "reference"], "BACKEND=K"),
        (["run", "--backend", "reference", "--split", "reference=two"], "BACKEND=K"),
        (["run", "--backend", "reference", "--split", "sdpa=2", "--jobs", "2"], "'sdpa' is not among the backends"),
        (["run", "--backend", "reference", "--split", "reference=0"], "K must be >= 1"),
        (["run", "--backend", "reference", "--split", "reference=3", "--jobs", "2"], "needs --jobs 3"),
        (["run", "--backend", "reference", "--split", "reference=2", "--jobs", "2", "--no-isolate"], "--no-isolate"),
        (["run", "--backend", "reference", "--split", "auto=3", "--jobs", "3"], "--split auto=3: auto takes no K"),
        (["run", "--backend", "reference", "--split", "foo"], "BACKEND=K (K a whole number) or auto, got 'foo'"),
    ],
)
def test_usage_errors_exit_2_without_traceback(args, needle, capsys):
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "parity: error:" in err
    if needle:
        assert needle in err


def test_backends_command_lists_availability():
    p = run_cli("backends", "--no-isolate")
    assert p.returncode == 0
    assert "sdpa" in p.stdout and "available" in p.stdout
    assert "flex-cuda" in p.stdout and "no CUDA device" in p.stdout
    # the longest name keeps a space before its device column (flashinfer-decode-splitmax-cuda once ran into it)
    assert all(re.match(r"\S+ {2,}(cpu|cuda|\?) ", line) for line in p.stdout.splitlines()[1:]), p.stdout


def test_the_cache_key_names_the_gpu_model_and_changes_with_a_backend_version():
    from parity.cli.backends import cache_key

    p = run_cli("backends", "--no-isolate", "--cache-key")
    assert p.returncode == 0 and re.fullmatch(r"parity-compile-cpu-py\d+\.\d+-[0-9a-f]{16}\n", p.stdout)
    infos = [{"spec": "flex-cuda", "version": "2.11.0"}, {"spec": "fa4-cuda", "version": "flash-attn-4 4.0.0b36"}]
    newer = [infos[0], {"spec": "fa4-cuda", "version": "flash-attn-4 4.0.0b37"}]
    gone = [infos[0], {"spec": "fa4-cuda", "version": "", "unavailable": "no module named flash_attn"}]
    assert len({cache_key(infos), cache_key(newer), cache_key(gone)}) == 3
    assert cache_key(infos) == cache_key(list(reversed(infos)))


def test_list_cases_is_deterministic():
    a = run_cli("run", "--profile", "quick", "--list-cases").stdout
    b = run_cli("run", "--profile", "quick", "--list-cases").stdout
    assert a == b and len(a.splitlines()) > 60
    c = run_cli("run", "--profile", "quick", "--list-cases", "--seed", "1").stdout
    assert c != a
