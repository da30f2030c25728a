"""One folder for every compiler's on-disk cache, so a rerun of a sweep reuses its kernels.

Compiling, not computing, is what most GPU backends spend a sweep on: FlexAttention
(dynamo + inductor + Triton) per (dtype, heads, head dim, length bucket), JAX/XLA per
(shape, window), flash-attn-4 (CUTLASS DSL) per kernel configuration. Each of those
compilers can keep its output on disk, but each has its own switch and its own default
place (some default to off). ``--compile-cache DIR`` (or ``$PARITY_COMPILE_CACHE``) turns
all of them on under one folder that a CI runner can save and restore between runs:

==========================  =======================================  =====================
compiler                    environment set for the workers          subfolder of DIR
==========================  =======================================  =====================
inductor (FX graph, AOT)    ``TORCHINDUCTOR_CACHE_DIR``, its caches  ``inductor/``
Triton                      ``TRITON_CACHE_DIR``                     ``triton/``
JAX / XLA                   ``JAX_COMPILATION_CACHE_DIR``, min 0 s   ``jax/``
flash-attn-4 (CUTLASS DSL)  ``FLASH_ATTENTION_CUTE_DSL_CACHE_*``     ``flash-attn-cute/``
CUDA driver PTX JIT         ``CUDA_CACHE_PATH``, 4 GiB               ``cuda-jit/``
FlashInfer (nvcc JIT)       ``FLASHINFER_WORKSPACE_BASE``            ``flashinfer/``
CUTLASS CuTe DSL            ``CUTE_DSL_CACHE_DIR``                   ``cute-dsl/``
torch C++/CUDA extensions   ``TORCH_EXTENSIONS_DIR``                 ``torch-extensions/``
TVM FFI (JIT modules)       ``TVM_FFI_CACHE_DIR``                    ``tvm-ffi/``
==========================  =======================================  =====================

FlashInfer JIT-builds each kernel configuration with nvcc (about 18 s each on the H200, 2026-12-04)
into ``$FLASHINFER_WORKSPACE_BASE/.cache/flashinfer/``; kept under DIR, a second run builds nothing.
The last three cover what the libraries build underneath (flash-attn-4's CuTe DSL runtime, a
package that JIT-loads a torch extension, FlashInfer's TVM FFI modules): their defaults are under
``/tmp`` or ``~/.cache``, which a fresh CI runner or GPU loan does not keep.

Every one of these caches keys its entries on its own inputs (source, versions, options),
so a stale entry is never reused for a different kernel; the harness adds no key of its
own. A cache changes how long a case takes, never what it computes: the results of a warm
run are judged exactly like those of a cold one. What the folder held before and after a
run is recorded in ``environment.json`` (``compile_cache``), so a timing can be read as
cold (empty before) or warm.

Not covered: cuDNN's runtime-compiled attention kernels (``sdpa-cudnn``; cuDNN keeps them
in memory only) and torch.compile's dynamo tracing, which every new process repeats.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

ENV_VAR = "PARITY_COMPILE_CACHE"

#: the file in DIR where each run records its backends' measured seconds per row; the next run with
#: ``--jobs`` plans its lanes by them (:func:`parity.sweep.lanes.lane_costs`), not by the cost hints
COSTS = "lane_costs.json"

#: the subfolders of DIR, one per compiler (the order of the table above)
SUBDIRS = ("inductor", "triton", "jax", "flash-attn-cute", "cuda-jit", "flashinfer", "cute-dsl", "torch-extensions", "tvm-ffi")


def resolve(flag: str | os.PathLike[str] | None) -> Path | None:
    """The cache folder a run uses: ``flag``, else ``$PARITY_COMPILE_CACHE``, else none."""
    chosen = flag if flag not in (None, "") else os.environ.get(ENV_VAR) or None
    return Path(chosen).expanduser().resolve() if chosen else None


def environment(root: Path) -> dict[str, str]:
    """The environment variables that point every compiler's disk cache under ``root``."""
    sub = {name: str(root / name) for name in SUBDIRS}
    return {
        ENV_VAR: str(root),
        "TORCHINDUCTOR_CACHE_DIR": sub["inductor"],
        "TORCHINDUCTOR_FX_GRAPH_CACHE": "1",
        "TORCHINDUCTOR_AUTOGRAD_CACHE": "1",
        "TRITON_CACHE_DIR": sub["triton"],
        "JAX_COMPILATION_CACHE_DIR": sub["jax"],
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",  # JAX's default (1 s) skips most attention kernels
        "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1",
        "FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED": "1",
        "FLASH_ATTENTION_CUTE_DSL_CACHE_DIR": sub["flash-attn-cute"],
        "CUDA_CACHE_PATH": sub["cuda-jit"],
        "CUDA_CACHE_MAXSIZE": str(4 << 30),
        "FLASHINFER_WORKSPACE_BASE": sub["flashinfer"],  # FlashInfer adds .cache/flashinfer/ under it
        "CUTE_DSL_CACHE_DIR": sub["cute-dsl"],
        "TORCH_EXTENSIONS_DIR": sub["torch-extensions"],
        "TVM_FFI_CACHE_DIR": sub["tvm-ffi"],
    }


def enable(root: Path) -> None:
    """Create ``root`` and its subfolders and set :func:`environment` in this process
    (workers inherit it)."""
    try:
        for name in SUBDIRS:
            (root / name).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"--compile-cache {root}: cannot create the cache folder ({exc.strerror or exc})") from None
    os.environ.update(environment(root))


def inventory(root: Path) -> dict[str, dict[str, int]]:
    """Files and bytes in each subfolder (``{"jax": {"files": 12, "bytes": 34567}, ...}``)."""
    out: dict[str, dict[str, int]] = {}
    for name in SUBDIRS:
        files = size = 0
        for dirpath, _dirs, names in os.walk(root / name):
            for n in names:
                files += 1
                try:
                    size += os.path.getsize(os.path.join(dirpath, n))
                except OSError:
                    pass
        out[name] = {"files": files, "bytes": size}
    return out


def record(root: Path, before: dict[str, dict[str, int]]) -> dict[str, Any]:
    """What ``environment.json`` keeps: the folder, its contents before and after the run,
    and ``state``: ``cold`` (nothing cached before), ``warm`` (entries there and none
    added), or ``partly warm`` (entries there, and the run added more)."""
    after = inventory(root)
    had = sum(v["files"] for v in before.values())
    added = sum(after[k]["files"] - before.get(k, {"files": 0})["files"] for k in after)
    state = "cold" if had == 0 else ("warm" if added <= 0 else "partly warm")
    return {"dir": str(root), "state": state, "files_before": had, "files_added": added, "before": before, "after": after}
