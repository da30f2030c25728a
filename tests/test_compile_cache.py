"""``--compile-cache DIR``: every compiler's disk cache under one folder, reaching the workers,
recorded in environment.json as cold / warm."""

import json
import os

import pytest

from parity import Case, Window, compile_cache
from parity.backends.sdpa import SdpaBackend

from .test_cli import run_cli

CASE = Case(q_lens=(12,), k_lens=(12,), hq=2, hkv=1, head_dim=16, window=Window(3, 0), seed=1)


class EnvEcho(SdpaBackend):
    """SDPA (a real, passing computation) whose version reports the cache variables the
    worker process was started with."""

    name = "env-echo"

    def version(self) -> str:
        keys = (
            "TORCHINDUCTOR_CACHE_DIR",
            "TRITON_CACHE_DIR",
            "JAX_COMPILATION_CACHE_DIR",
            "FLASH_ATTENTION_CUTE_DSL_CACHE_DIR",
            "FLASHINFER_WORKSPACE_BASE",
        )
        return json.dumps({k: os.environ.get(k) for k in keys})


def test_resolve_prefers_the_flag_then_the_environment(tmp_path, monkeypatch):
    monkeypatch.delenv(compile_cache.ENV_VAR, raising=False)
    assert compile_cache.resolve(None) is None
    monkeypatch.setenv(compile_cache.ENV_VAR, str(tmp_path / "env"))
    assert compile_cache.resolve(None) == tmp_path / "env"
    assert compile_cache.resolve(str(tmp_path / "flag")) == tmp_path / "flag"


def test_record_tells_cold_warm_and_partly_warm(tmp_path):
    root = tmp_path / "cc"
    for name in compile_cache.SUBDIRS:
        (root / name).mkdir(parents=True)
    empty = compile_cache.inventory(root)
    (root / "jax" / "entry1").write_bytes(b"x" * 10)
    rec = compile_cache.record(root, empty)
    assert (rec["state"], rec["files_before"], rec["files_added"]) == ("cold", 0, 1)
    assert rec["after"]["jax"] == {"files": 1, "bytes": 10}
    one = compile_cache.inventory(root)
    assert compile_cache.record(root, one)["state"] == "warm"
    (root / "triton" / "k").write_bytes(b"y")
    assert compile_cache.record(root, one)["state"] == "partly warm"


def test_workers_get_the_cache_folders_and_the_run_records_them(tmp_path):
    cc, out = tmp_path / "cc", tmp_path / "out"
    spec = "tests.test_compile_cache:EnvEcho"
    p = run_cli("run", "--backend", spec, "--case", CASE.to_json(), "--out", str(out), "-q", "--no-report", "--compile-cache", str(cc))
    assert p.returncode == 0, p.stdout + p.stderr
    env = json.loads((out / "environment.json").read_text())
    seen = json.loads(env["backends"][spec]["version"])  # what the worker process saw
    assert seen == {
        "TORCHINDUCTOR_CACHE_DIR": str(cc / "inductor"),
        "TRITON_CACHE_DIR": str(cc / "triton"),
        "JAX_COMPILATION_CACHE_DIR": str(cc / "jax"),
        "FLASH_ATTENTION_CUTE_DSL_CACHE_DIR": str(cc / "flash-attn-cute"),
        "FLASHINFER_WORKSPACE_BASE": str(cc / "flashinfer"),
    }
    assert env["compile_cache"]["dir"] == str(cc) and env["compile_cache"]["state"] == "cold"
    assert sorted(env["compile_cache"]["after"]) == sorted(compile_cache.SUBDIRS)
    # without the flag (and without $PARITY_COMPILE_CACHE) nothing is set or recorded
    p = run_cli("run", "--backend", spec, "--case", CASE.to_json(), "--out", str(out), "--force", "-q", "--no-report")
    assert p.returncode == 0, p.stdout + p.stderr
    env = json.loads((out / "environment.json").read_text())
    assert env["compile_cache"] is None
    assert json.loads(env["backends"][spec]["version"])["TRITON_CACHE_DIR"] != str(cc / "triton")


def test_a_cache_folder_that_cannot_be_made_is_a_usage_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    p = run_cli("run", "--backend", "sdpa", "--case", CASE.to_json(), "--out", str(tmp_path / "o"), "-q", "--compile-cache", str(blocker))
    assert p.returncode == 2, p.stdout + p.stderr
    assert "--compile-cache" in p.stderr and str(blocker) in p.stderr
    assert "Traceback" not in p.stderr


@pytest.mark.slow
def test_flex_compiled_fills_the_inductor_cache_and_a_rerun_finds_it_warm(tmp_path):
    """CPU inductor really writes under DIR/inductor; the second run adds nothing new."""
    cc = tmp_path / "cc"
    states = []
    for i in range(2):
        out = tmp_path / f"run{i}"
        p = run_cli(
            "run",
            "--backend",
            "flex-compiled",
            "--case",
            CASE.to_json(),
            "--out",
            str(out),
            "-q",
            "--no-report",
            "--no-probes",
            "--compile-cache",
            str(cc),
        )
        assert p.returncode == 0, p.stdout + p.stderr
        rec = json.loads((out / "environment.json").read_text())["compile_cache"]
        states.append((rec["state"], rec["after"]["inductor"]["files"] > 0))
    assert states == [("cold", True), ("warm", True)]
