"""jax-xla's compile key is what decides its XLA executables (issue 47).

On an H200 (lab/runs/h200-2026-12-06d-coldwarm) jax-xla-cuda built 191 executables for 121 keys: XLA builds one
per jitted sequence (each sequence of a case is its own call), so a case of n distinct sequence shapes is n
executables (the lanes' 169 equal the distinct sequence signatures of the 121 rows they ran), and the padding
of a bottom-right Sq < Sk sequence was a static argument, so a padded decode sequence and a dense one of the
same padded shape built two. The padding is now dropped on torch's side and the key is the set of signatures
(:func:`parity.backends.jax_attn.executable_signatures`). The tests with JAX count XLA's compiles on the CPU
(jax 0.10.2 measured; the GPU image has 0.11.2) and are skipped where JAX is not installed (the project's CI).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from parity import backends
from parity.backends import jax_attn
from parity.case import Case, make_inputs
from parity.window import Window

W = Window(15, 0)
# one key: the order and count of the sequences differ, and (64, 1) pads its one query to 64 rows
ONE_KEY = [
    Case((64,), (64,), 4, 2, 16, "float32", W, seed=1),
    Case((1, 64), (64, 64), 4, 2, 16, "float32", W, seed=2),
    Case((64, 64, 1), (64, 64, 64), 4, 2, 16, "float32", W, seed=3),
]
TWO_SHAPES = Case((64, 32), (64, 32), 4, 2, 16, "float32", W, seed=4)  # two signatures: two executables


def test_the_key_is_the_set_of_sequence_signatures():
    be = backends.get("jax-xla-cuda")
    keys = {be.compile_key(c) for c in ONE_KEY}
    assert len(keys) == 1 and len(next(iter(keys))[-1]) == 1  # one key, one executable
    assert len(be.compile_key(TWO_SHAPES)[-1]) == 2
    # what XLA compiles for: the padded shape and the translated window, not the canonical window's spelling
    assert jax_attn.executable_signatures(W, (1,), (64,)) == ((64, 64, False, (15, 0)),)
    wide = Window(None, None, "top_left")
    assert be.compile_key(Case((8,), (8,), 4, 2, 16, "float32", wide)) != be.compile_key(Case((8,), (8,), 4, 2, 16, "float32", W))
    for change in ({"dtype": "bfloat16"}, {"scale": 0.5}, {"hkv": 4}, {"head_dim": 32}, {"k_lens": (65,)}):
        assert be.compile_key(dataclasses.replace(ONE_KEY[0], **change)) != be.compile_key(ONE_KEY[0]), change


def test_a_refused_sequence_still_has_a_key():
    be = backends.get("jax-xla-cuda")
    refused = Case((9,), (4,), 4, 2, 16, "float32", W)  # bottom-right Sq > Sk: no translation
    assert be.unsupported_reason(refused) and be.compile_key(refused)[-1] == ((9, 4),)


needs_jax = pytest.mark.skipif(
    importlib.util.find_spec("jax") is None, reason="JAX is not installed: its compile counts need it (pip install 'jax[cpu]')"
)


def _compiles(cases, jitted, grads=False) -> int:
    """XLA executables compiled on the CPU over ``cases``, through the backend's own call path."""
    be = backends.get("jax-xla-cuda")
    n0 = jax_attn._compile_events()
    for c in cases:
        inputs = make_inputs(c, "cpu")
        natives = be.natives(c)
        args = (inputs.q, inputs.k, inputs.v)
        if grads:
            jax_attn.jax_attention_grads(*args, torch.ones_like(inputs.q), c.q_lens, c.k_lens, natives, "xla", c.softmax_scale, jitted)
        else:
            jax_attn.jax_attention(*args, torch.empty_like(inputs.q), c.q_lens, c.k_lens, natives, "xla", c.softmax_scale, jitted)
    return jax_attn._compile_events() - n0


@needs_jax
@pytest.mark.parametrize("fn", [jax_attn.jax_attention_fn, jax_attn.jax_grad_fn])
def test_each_key_compiles_once_per_signature(fn):
    grads = fn is jax_attn.jax_grad_fn
    assert _compiles(ONE_KEY, functools.lru_cache(fn), grads) == 1
    assert _compiles([TWO_SHAPES], functools.lru_cache(fn), grads) == 2


@needs_jax
def test_the_count_can_fail():
    """Without the cache of jitted functions (a new ``jax.jit`` per call) every sequence compiles again."""
    assert _compiles(ONE_KEY, jax_attn.jax_attention_fn) == 6


@needs_jax
def test_a_load_from_the_persistent_cache_is_not_a_build(tmp_path):
    """Two processes on one ``--compile-cache`` folder: the second loads the executable (JAX times the load as
    a backend compile too) and builds nothing."""
    from parity.compile_cache import environment

    code = (
        "import functools; from tests.test_jax_compile_key import ONE_KEY, _compiles; from parity.backends import jax_attn;"
        "print(_compiles(ONE_KEY[:1], functools.lru_cache(jax_attn.jax_attention_fn)))"
    )
    env = {**os.environ, **environment(tmp_path)}
    root = Path(__file__).resolve().parents[1]
    runs = [subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True, timeout=300) for _ in "ab"]
    assert [r.stdout.strip() for r in runs] == ["1", "0"], [r.stderr[-500:] for r in runs]
