"""Backend registry: names to backends, resolved lazily.

Three ways to name a backend:

* a built-in name (``sdpa``, ``flex``, ``reference``...; ``python -m parity backends``);
* ``package.module:Attr`` where ``Attr`` is a :class:`Backend` subclass or a zero-argument
  callable returning an instance (your own kernel, no edit of this package needed);
* a name published by an installed distribution under the entry-point group
  ``attn_parity.backends`` (``[project.entry-points."attn_parity.backends"]``).

Nothing is imported until a backend is asked for, so optional packages cost nothing.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from collections.abc import Callable, Mapping, Sequence

from ..errors import UserError
from ..markers import marker_for
from .base import Backend, BackendError, Unsupported

ENTRY_POINT_GROUP = "attn_parity.backends"

#: Built-in backends: name -> "module:attr" (relative to this package).
BUILTIN: dict[str, str] = {
    "reference": ".reference:ReferenceBackend",
    "sdpa": ".sdpa:SdpaBackend",
    "sdpa-causal": ".sdpa:SdpaCausalBackend",
    "sdpa-math": ".sdpa:SdpaMath",
    "flex": ".flex:FlexBackend",
    "flex-compiled": ".flex:FlexCompiledBackend",
    # CUDA
    "reference-cuda": ".reference:ReferenceCudaBackend",
    "sdpa-math-cuda": ".sdpa:SdpaCudaMath",
    "sdpa-efficient-cuda": ".sdpa:SdpaCudaEfficient",
    "sdpa-cudnn-cuda": ".sdpa:SdpaCudaCudnn",
    "sdpa-flash-causal-cuda": ".sdpa:SdpaCudaFlashCausal",
    "flex-cuda": ".flex:FlexCudaBackend",
    "torch-fa2-cuda": ".torch_fa2:TorchFa2Backend",
    "torch-fa2-varlen-cuda": ".torch_fa2:TorchFa2VarlenBackend",
    "fa2-cuda": ".flash_attn:FlashAttnBackend",
    "fa2-kvcache-cuda": ".flash_attn:FlashAttnKvcacheBackend",
    "fa3-cuda": ".flash_attn:FlashAttn3Backend",
    "fa2-kvcache-split2-cuda": ".flash_attn:Fa2KvcacheSplit2",
    "fa2-kvcache-split4-cuda": ".flash_attn:Fa2KvcacheSplit4",
    "fa2-kvcache-split128-cuda": ".flash_attn:Fa2KvcacheSplit128",
    "fa3-split2-cuda": ".flash_attn:Fa3Split2",
    "fa3-split4-cuda": ".flash_attn:Fa3Split4",
    "fa3-split256-cuda": ".flash_attn:Fa3Split256",
    "fa4-cuda": ".flash_attn4:Fa4Backend",
    "fa4-varlen-cuda": ".flash_attn4:Fa4VarlenBackend",
    "xformers-cutlass-cuda": ".xformers:XformersCutlass",
    "xformers-flash-cuda": ".xformers:XformersFlash",
    "jax-xla-cuda": ".jax_attn:JaxXla",
    "jax-cudnn-cuda": ".jax_attn:JaxCudnn",
    "jax-cudnn-causal-cuda": ".jax_attn:JaxCudnnCausal",
    "flashinfer-cuda": ".flashinfer:FlashInferBackend",
    "flashinfer-paged-cuda": ".flashinfer:FlashInferPagedBackend",
    "flashinfer-decode-cuda": ".flashinfer:FlashInferDecodeBackend",
    "flashinfer-decode-split2-cuda": ".flashinfer:FlashInferDecodeSplit2",
    "flashinfer-decode-split4-cuda": ".flashinfer:FlashInferDecodeSplit4",
    "flashinfer-decode-splitmax-cuda": ".flashinfer:FlashInferDecodeSplitMax",
    "vllm-fa2-cuda": ".vllm_fa:VllmFa2Backend",
    "vllm-fa3-cuda": ".vllm_fa:VllmFa3Backend",
    "vllm-fa3-split2-cuda": ".vllm_fa:VllmFa3Split2",
    "vllm-fa3-split4-cuda": ".vllm_fa:VllmFa3Split4",
    "vllm-fa3-split256-cuda": ".vllm_fa:VllmFa3Split256",
}

#: What ``python -m parity run`` sweeps when no --backend is given: the CPU backends.
DEFAULT_CPU = ("reference", "sdpa", "sdpa-causal", "flex")


#: Group selectors accepted by --backend.
SELECTORS = ("all", "all-cpu", "all-gpu")


def expand(backend: str) -> list[str]:
    """A selector's backend names (by device, without importing optional packages), or ``[spec]``."""
    if backend not in SELECTORS:
        return [backend]
    if backend == "all":
        return [n for n in names()]
    want = "cuda" if backend == "all-gpu" else "cpu"
    out = []
    for n in names():
        try:
            dev = getattr(get(n), "device", "cpu")
        except Exception:  # noqa: BLE001 - a broken plugin is reported when run, not here
            dev = "?"
        if dev == want:
            out.append(n)
    return out


class BackendSpecError(UserError):
    """An unknown backend name or a malformed ``module:Class`` path."""


def register(name: str, target: str | Callable[[], Backend]) -> None:
    """Add a backend at run time (``target``: a ``"module:attr"`` path or a factory)."""
    if not name or any(c.isspace() for c in name):
        raise BackendSpecError(f"backend name must be non-empty without spaces, got {name!r}")
    _EXTRA[name] = target


_EXTRA: dict[str, str | Callable[[], Backend]] = {}


def _entry_points() -> dict[str, importlib.metadata.EntryPoint]:
    try:
        eps = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
    except Exception:  # noqa: BLE001 - broken metadata must not break the registry
        return {}
    return {ep.name: ep for ep in eps}


def names() -> list[str]:
    """Every known backend name: built-in, registered, and from entry points."""
    return [*BUILTIN, *[n for n in _EXTRA if n not in BUILTIN], *[n for n in _entry_points() if n not in BUILTIN and n not in _EXTRA]]


def _load_path(path: str, package: str | None = None) -> object:
    mod_name, sep, attr = path.partition(":")
    if not sep or not mod_name or not attr or not all(p.isidentifier() for p in attr.split(".")):
        raise BackendSpecError(f"backend path must look like 'package.module:ClassName', got {path!r}")
    try:
        module = importlib.import_module(mod_name, package)
    except ModuleNotFoundError as exc:
        raise BackendSpecError(f"backend {path!r}: module {exc.name!r} not found") from None
    except Exception as exc:  # noqa: BLE001 - a plugin that fails to import is a usage error, not a traceback
        raise BackendSpecError(f"backend {path!r}: importing {mod_name} failed: {type(exc).__name__}: {exc}") from None
    obj: object = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise BackendSpecError(f"backend {path!r}: {mod_name} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj


def _instantiate(obj: object, backend: str) -> Backend:
    if isinstance(obj, Backend):
        inst = obj
    elif callable(obj):
        try:
            inst = obj()
        except Exception as exc:  # noqa: BLE001 - a constructor that raises: one line, not a traceback
            raise BackendSpecError(f"backend {backend!r}: constructing it raised {type(exc).__name__}: {exc}") from None
    else:
        raise BackendSpecError(f"backend {backend!r} is neither a Backend subclass nor a factory")
    if not isinstance(inst, Backend):
        missing = [m for m in ("name", "run", "unsupported_reason", "unavailable_reason") if not hasattr(inst, m)]
        if missing:
            raise BackendSpecError(f"backend {backend!r} does not implement the Backend interface (missing {missing})")
    return inst  # type: ignore[return-value]


def get(backend: str) -> Backend:
    """Resolve a name or ``module:Class`` path to a backend instance."""
    if not isinstance(backend, str) or not backend:
        raise BackendSpecError(f"backend must be a non-empty string, got {backend!r}")
    if backend in BUILTIN:
        inst = _instantiate(_load_path(BUILTIN[backend], __name__), backend)
    elif backend in _EXTRA:
        target = _EXTRA[backend]
        inst = _instantiate(_load_path(target) if isinstance(target, str) else target, backend)
    elif ":" in backend:
        inst = _instantiate(_load_path(backend), backend)
    else:
        eps = _entry_points()
        if backend not in eps:
            close = [n for n in names() if backend.lower() in n.lower() or n.lower() in backend.lower()]
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise BackendSpecError(
                f"unknown backend {backend!r}{hint} (python -m parity backends lists them; "
                "your own kernel: --backend package.module:ClassName)"
            )
        inst = _instantiate(eps[backend].load(), backend)
    return inst


def worker_path_owner(paths: Mapping[str, Sequence[str]], backend: str, variant_of: str | None = None) -> str | None:
    """Whose entry of ``paths`` (``{backend: [folders]}``: ``--worker-path``, ``$PARITY_WORKER_PATH``) ``backend``'s
    worker runs with: its own; else, for a variant (:attr:`Backend.variant_of`: a split-KV count forced on the same
    library), its base backend's, so a library staged once serves its variants; else None. ``variant_of``: the base
    as a run recorded it (environment.json); None: the registry's."""
    if backend in paths or not paths:
        return backend if backend in paths else None
    base = variant_of or _variant_base(backend)
    return base if base in paths else None


def _variant_base(backend: str) -> str | None:
    """``backend``'s :attr:`Backend.variant_of` in the registry; None for a backend that is none or cannot load."""
    try:
        return getattr(get(backend), "variant_of", None)
    except Exception:  # noqa: BLE001 - a plugin importable only with its own worker path has no variant here
        return None


def worker_path(paths: Mapping[str, Sequence[str]], backend: str) -> list[str] | None:
    """The folders ``backend``'s worker puts first on its ``sys.path`` (:func:`worker_path_owner`'s entry); None: none."""
    owner = worker_path_owner(paths, backend)
    return None if owner is None else list(paths[owner])


def with_variants(paths: Mapping[str, Sequence[str]], backend_names: Sequence[str]) -> dict[str, list[str]]:
    """``paths`` and, for each of ``backend_names`` without an entry, the entry it takes (:func:`worker_path`): a
    variant's base backend's."""
    out = {n: list(p) for n, p in paths.items()}
    for n in backend_names:
        if n not in out and (found := worker_path(paths, n)) is not None:
            out[n] = found
    return out


__all__ = [
    "Backend",
    "BackendError",
    "BackendSpecError",
    "BUILTIN",
    "DEFAULT_CPU",
    "ENTRY_POINT_GROUP",
    "SELECTORS",
    "expand",
    "Unsupported",
    "get",
    "marker_for",
    "names",
    "register",
    "worker_path",
    "worker_path_owner",
    "with_variants",
]
