"""Each backend's library call is written once: a module-level function that ``run()`` calls and the
standalone repro script copies with ``inspect.getsource``.

For every backend with a repro path: the script compiles, holds the function's exact source, and
the copied functions use nothing of their module but ``torch`` and each other (so the copy runs
without attn-parity). On the CPU backends the script runs end to end in a subprocess and agrees
with the harness; ``run()`` is shown to go through the very function the script copies.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import os
import subprocess
import sys
import types

import pytest

from parity import Case, Window, backends
from parity.api import evaluate
from parity.backends import flash_attn, flash_attn4, flashinfer, flex, jax_attn, sdpa, torch_fa2, vllm_fa, xformers
from tests.test_export_repro import _script  # the script of one backend on one case, as export-repro writes it

DENSE = Case(q_lens=(48, 48), k_lens=(64, 64), hq=4, hkv=2, head_dim=64, dtype="bfloat16", window=Window(15, 0))
DECODE = Case(q_lens=(1, 1), k_lens=(300, 37), hq=8, hkv=2, head_dim=64, dtype="bfloat16", window=Window(None, 0))
PAGED = Case(q_lens=(1, 1), k_lens=(300, 40), hq=4, hkv=2, head_dim=64, dtype="bfloat16", window=Window(31, 0), page_size=256)
TOP_LEFT = Case(q_lens=(40,), k_lens=(40,), hq=4, hkv=2, head_dim=64, dtype="bfloat16", window=Window(None, 0, "top_left"))

#: backend -> (the module-level function its run() calls, a case it takes)
CALLS = {
    "sdpa": (sdpa.sdpa_attention, DENSE),
    "sdpa-causal": (sdpa.sdpa_attention, TOP_LEFT),
    "sdpa-math": (sdpa.sdpa_attention, DENSE),
    "sdpa-math-cuda": (sdpa.sdpa_attention, DENSE),
    "sdpa-efficient-cuda": (sdpa.sdpa_attention, DECODE),
    "sdpa-cudnn-cuda": (sdpa.sdpa_attention, DENSE),
    "sdpa-flash-causal-cuda": (sdpa.sdpa_attention, TOP_LEFT),
    "flex": (flex.flex_attention_packed, DENSE),
    "flex-compiled": (flex.flex_attention_packed, DENSE),
    "flex-cuda": (flex.flex_attention_packed, DECODE),
    "torch-fa2-cuda": (torch_fa2.torch_fa2_attention, DENSE),
    "torch-fa2-varlen-cuda": (torch_fa2.torch_fa2_attention, DECODE),
    "fa2-cuda": (flash_attn.flash_attn_attention, DECODE),
    "fa3-cuda": (flash_attn.flash_attn_attention, DENSE),
    "fa2-kvcache-cuda": (flash_attn.flash_attn_kvcache_attention, PAGED),
    "fa2-kvcache-split2-cuda": (flash_attn.flash_attn_kvcache_attention, DECODE),
    "fa2-kvcache-split4-cuda": (flash_attn.flash_attn_kvcache_attention, PAGED),
    "fa2-kvcache-split128-cuda": (flash_attn.flash_attn_kvcache_attention, DECODE),
    "fa3-split2-cuda": (flash_attn.flash_attn_attention, DECODE),
    "fa3-split4-cuda": (flash_attn.flash_attn_attention, DECODE),
    "fa3-split256-cuda": (flash_attn.flash_attn_attention, DECODE),
    "fa4-cuda": (flash_attn4.fa4_attention, PAGED),
    "fa4-varlen-cuda": (flash_attn4.fa4_attention, DENSE),
    "vllm-fa2-cuda": (vllm_fa.vllm_fa_attention, PAGED),
    "vllm-fa3-cuda": (vllm_fa.vllm_fa_attention, DECODE),
    "vllm-fa3-split2-cuda": (vllm_fa.vllm_fa_attention, PAGED),
    "vllm-fa3-split4-cuda": (vllm_fa.vllm_fa_attention, DECODE),
    "vllm-fa3-split256-cuda": (vllm_fa.vllm_fa_attention, PAGED),
    "flashinfer-cuda": (flashinfer.flashinfer_prefill_attention, DECODE),
    "flashinfer-paged-cuda": (flashinfer.flashinfer_paged_attention, DENSE),
    "flashinfer-decode-cuda": (flashinfer.flashinfer_paged_attention, PAGED),
    "flashinfer-decode-split2-cuda": (flashinfer.flashinfer_paged_attention, DECODE),
    "flashinfer-decode-split4-cuda": (flashinfer.flashinfer_paged_attention, DECODE),
    "flashinfer-decode-splitmax-cuda": (flashinfer.flashinfer_paged_attention, DECODE),
    "xformers-cutlass-cuda": (xformers.xformers_attention, DENSE),
    "xformers-flash-cuda": (xformers.xformers_attention, DECODE),
    "jax-xla-cuda": (jax_attn.jax_attention, DECODE),
    "jax-cudnn-cuda": (jax_attn.jax_attention, DENSE),
    "jax-cudnn-causal-cuda": (jax_attn.jax_attention, DENSE),
}


def test_every_backend_with_a_repro_path_is_covered():
    with_repro = {n for n in backends.names() if callable(getattr(backends.get(n), "repro_call", None))}
    assert with_repro == set(CALLS)


def _global_names(code: types.CodeType) -> set[str]:
    """Names a code object (and the functions nested in it) may read as globals."""
    names = set(code.co_names) - set(code.co_varnames) - set(code.co_cellvars)  # a local import is no global
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _global_names(const)
    return names


def _copied_functions(src: str, module) -> list:
    """The module's functions whose source the script copies (top-level ``def``s of the same name)."""
    defs = [n.name for n in ast.parse(src).body if isinstance(n, ast.FunctionDef)]
    return [getattr(module, d) for d in defs if inspect.isfunction(getattr(module, d, None))]


@pytest.mark.parametrize("spec", sorted(CALLS))
def test_the_script_copies_the_function_run_calls_and_it_stands_alone(spec):
    fn, case = CALLS[spec]
    src = _script(spec, case)
    compile(src, f"{spec}.py", "exec")
    assert inspect.getsource(fn) in src  # the exact source, not a re-spelling
    assert "import parity" not in src and "from parity" not in src
    module = sys.modules[fn.__module__]
    copied = _copied_functions(src, module)
    assert fn in copied
    defined = {n.name for n in ast.parse(src).body if isinstance(n, ast.FunctionDef)}
    for f in copied:
        assert inspect.getsource(f) in src, f.__name__
        # what a copied function reads of its module must be in the script too: torch, or another copy
        used = {n for n in _global_names(f.__code__) if n in f.__globals__ and not hasattr(builtins, n)}
        assert used <= {"torch"} | defined, (f.__name__, sorted(used - {"torch"} - defined))


def _run(path, cwd) -> subprocess.CompletedProcess:
    """A plain python, no PYTHONPATH, in a folder without this project: ``import parity`` would fail."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = ""
    return subprocess.run([sys.executable, str(path)], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


CPU_CASES = [
    ("sdpa", Case(q_lens=(9, 3), k_lens=(9, 14), hq=4, hkv=2, head_dim=16, dtype="float32", window=Window(4, 1), seed=2)),
    ("sdpa-causal", Case(q_lens=(12,), k_lens=(12,), hq=2, hkv=1, head_dim=16, dtype="bfloat16", window=Window(None, 0))),
    ("flex", Case(q_lens=(7, 2), k_lens=(7, 11), hq=2, hkv=2, head_dim=16, dtype="float16", window=Window(3, 0), softcap=10.0, seed=4)),
]


@pytest.mark.parametrize("spec, case", CPU_CASES, ids=[s for s, _ in CPU_CASES])
def test_cpu_scripts_run_and_agree_with_the_harness(spec, case, tmp_path):
    row = evaluate(backends.get(spec), case)
    assert row["verdict"] == "pass", row
    path = tmp_path / f"{spec}.py"
    path.write_text(_script(spec, case))
    res = _run(path, tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "AGREES" in res.stdout and "mask probe: 0 of " in res.stdout


@pytest.mark.parametrize("spec, case", CPU_CASES, ids=[s for s, _ in CPU_CASES])
def test_run_goes_through_the_copied_function(spec, case, monkeypatch):
    """Break the module-level function: the harness's row breaks with it (run() has no second copy)."""
    fn, _ = CALLS[spec]
    module = sys.modules[fn.__module__]

    def broken(*args, **kwargs):
        out = fn(*args, **kwargs)
        return out.mul_(2)

    monkeypatch.setattr(module, fn.__name__, broken)
    assert evaluate(backends.get(spec), case)["verdict"] == "fail"
