"""Backend markers for pytest (``pytest -m sdpa``): which marker a backend spec carries.

Torch-free on purpose: the pytest plugin (:mod:`parity.pytest_plugin`) registers these markers
in every pytest session of an environment where attn-parity is installed.
"""

from __future__ import annotations

#: (name prefix, marker): a backend's marker is the one of its longest matching prefix.
PREFIXES = (
    ("reference", "reference"),
    ("sdpa", "sdpa"),
    ("flex", "flex"),
    ("flash-attn", "flash_attn"),
    ("fa2", "flash_attn"),
    ("fa3", "flash_attn"),
    ("fa4", "flash_attn"),
    ("torch-fa2", "torch_fa2"),
    ("xformers", "xformers"),
    ("jax", "jax"),
    ("flashinfer", "flashinfer"),
    ("vllm", "vllm"),
)

#: Every marker of the project, with the words ``pytest --markers`` shows.
MARKERS: dict[str, str] = {
    "gpu": "needs a CUDA device (skipped with the reason where there is none)",
    "slow": "longer property runs",
    "backend(name)": "test exercises one backend (set automatically from the test id)",
    "reference": "the float64 reference backend",
    "sdpa": "PyTorch SDPA backends",
    "flex": "FlexAttention backends",
    "flash_attn": "flash-attn package backends",
    "xformers": "xformers backends",
    "torch_fa2": "PyTorch's vendored FlashAttention-2",
    "jax": "JAX dot_product_attention backends",
    "flashinfer": "FlashInfer backends",
    "vllm": "vLLM's flash-attention build (vllm.vllm_flash_attn)",
    "plugin": "user-supplied backends (module:Class, entry points)",
}


def marker_for(backend: str) -> str:
    """The pytest marker of a backend (``pytest -m sdpa``): by name prefix, else ``plugin``."""
    if ":" in backend:
        return "plugin"
    best, found = "", "plugin"
    for prefix, marker in PREFIXES:
        if backend.startswith(prefix) and len(prefix) > len(best):
            best, found = prefix, marker
    return found
