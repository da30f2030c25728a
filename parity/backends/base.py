"""The interface every backend implements.

A backend is a small class (one file each) with

* ``name``: the registry name, used in test ids and reports;
* ``device``: ``"cpu"`` or ``"cuda"``: where the harness puts the inputs;
* ``unavailable_reason()``: ``None`` when it can run here, else why not (missing
  package, no GPU, ...). Optional packages are imported here or in ``run``, never
  at module import, so ``import parity`` works with torch alone;
* ``kv_dtypes`` / ``fp8_queries`` / ``fp8_scale_layouts``: the fp8 KV dtypes ``run`` reads
  (``case.kv_dtype``: ``inputs.k`` / ``inputs.v`` then hold fp8 values and ``inputs.k_descale`` /
  ``v_descale`` their descales), whether it takes an fp8 query too (``case.q_fp8``), and the descale
  layouts it takes (``case.fp8_scales``: per tensor ``()``, per kv head ``(hkv,)``, per sequence and
  kv head ``(B, hkv)``); other backends get those cases recorded as unsupported (:func:`fp8_reason`);
* ``unsupported_reason(case)``: ``None`` when it can run ``case``, else why not
  (head dim, dtype, alignment, ...). Unsupported is a recorded outcome, never a pass
  and never a silent fallback to another code path;
* ``run(case, inputs, out)``: compute attention for ``inputs`` (packed layout, see
  :mod:`parity.case`) and return ``(total_q, hq, d)`` in the case's dtype. ``out``
  is a buffer of that shape filled with :data:`parity.verdict.POISON`; a backend that
  writes its result into ``out`` and returns it lets the harness detect unwritten
  elements, one that returns a fresh tensor is compared as it is;
* ``run_lse(case, inputs, out)`` (optional, with ``returns_lse = True``): the same call that also
  returns the log-sum-exp, ``(out, lse)``; see *Log-sum-exp* below;
* ``workspace_bytes(case)`` (optional): the device memory ``run`` needs beyond inputs and output
  (split-KV buffers, a dense mask, ...), so that rows are placed to fit free memory and a row its card
  cannot hold is refused up front; with ``workspace_again_bytes``, ``resident_bytes``, ``foreign_bytes``
  and ``workspace_words`` (see each, and :mod:`parity.memory`);
* ``version()``: the version of what it wraps, for the run's environment;
* ``supports_grad`` / ``backward(case, inputs, dout)`` (optional, ``parity run --grad``): ``(dq, dk, dv)``
  of the output against the upstream gradient ``dout`` ``(total_q, hq, d)``, in the inputs' packed
  layouts, dtype and device. The default goes through autograd: :func:`autograd_grads` of ``run``
  (which must then be differentiable: no ``no_grad``, no ``.detach()``; an output with no autograd graph, or
  a ``None`` gradient, is a gradient of 0, right only where no row sees a key); a library with an explicit
  backward op overrides it with a module-level call. ``grad_unsupported_reason(case)`` refuses a case
  for the backward only (the forward still runs); backends without ``supports_grad`` are
  ``unsupported`` for the gradient check, with the reason;
* ``graph_call(case, inputs)`` / ``graph_padded_call(case, inputs, pad)`` / ``no_graph`` (optional,
  ``parity run --graph-replay``, :mod:`parity.graphs`): the function a CUDA graph captures, on ``inputs``'
  tensors as static buffers; the default captures ``run`` as it is. A backend whose ``run`` does host work
  per call (a layout built from lengths, ``.tolist()``) overrides it: that work once, the device work
  (every copy of the tensors' values included) in the returned function. ``graph_padded_call``: the same
  call on a batch padded as engines pad it (``pad`` more sequences of 0 keys, block-table slots ``-1``),
  None where the layout has none (the default). ``no_graph``: why ``run`` cannot be captured at all;
* ``repro_call(case)`` (optional): Python source of ``attention(q, k, v)`` for the standalone
  scripts of ``python -m parity export-repro`` (see :mod:`parity.repro_script`); backends
  without it are skipped there with a note. For an fp8 case it defines ``attention(q, k, v,
  descales)`` and passes the descales as ``run`` does; paged / padded caches through the script's
  ``paged_layout`` / ``padded_layout``, which the read probe wraps.

The library call itself is a module-level function of the backend's file (plain arguments:
tensors, the translated window, scale, softcap...; its library imported inside its body, and
nothing of the module used but ``torch`` and other such functions). ``run`` translates the case
and calls it; ``repro_call`` copies its source into the script (:func:`parity.repro_script.embed`),
so the script and the harness run the same code.

Refusals. When the wrapped library itself declines a case at call time ("not supported",
"is only supported with ..."), ``run`` raises :class:`Unsupported` with the library's words:
each backend file keeps a small tuple of its library's refusal phrases and wraps the call in
:func:`refusals`. Any other exception (a CUDA fault, a wrong shape, a bug) is re-raised
unchanged and stays an ``error``; a wrong result stays a ``fail``.

Log-sum-exp. A backend whose library returns the softmax's log-sum-exp sets ``returns_lse = True``
and implements ``run_lse``, which returns ``(out, lse)``: ``out`` as ``run`` returns it, ``lse``
in the canonical layout ``(total_q, hq)`` float32, natural log, of the scaled (and softcapped)
scores over the keys the row sees. Each backend converts from its library's layout and base
(``(B, H, Sq)``, ``(H, total_q)``, log2...) in its own file. ``lse_empty`` names the values the
library documents for a row that sees no key (``"-inf"``, ``"+inf"``, ``"0"``, ``"nan"``; see
docs/lse.md): such a row passes with any of them. The harness calls ``run_lse`` for the measured
call only (the probes call ``run``), and only where ``run`` is not overridden in a subclass of
the class that defines ``run_lse`` (:func:`lse_call`): a subclass that changes ``run`` (a planted
bug, a test's fault) is then measured through its own ``run``, without LSE. Backends without
it (the default) are recorded ``lse_check = none``; nothing else changes for them.

The canonical :class:`parity.Window` reaches ``run`` inside ``case.window``; each
backend translates it into its own native arguments in its own file, from :meth:`parity.Window.native_sides`: a
side as named where it fits a C ``int`` (a window wider than the sequence is tested as named); a side past that is
passed as the longest ``Sq`` plus the longest ``Sk`` (the same keys), so the argument never overflows.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator, Sequence

import torch

from ..case import Case, Inputs
from ..grad import autograd_grads


class BackendError(RuntimeError):
    """Raised by the harness for a backend that breaks the interface (shape, dtype...)."""


class Unsupported(Exception):
    """Raised from ``run`` when the wrapped library refuses the case at call time.

    Recorded as ``unsupported`` with the message as its reason.
    """


class Backend:
    name: str = "unnamed"
    device: str = "cpu"
    description: str = ""
    #: The backend this one is a variant of: the same library, called with other arguments (a split-KV count forced).
    #: A worker path given for that one (``--worker-path``, ``$PARITY_WORKER_PATH``) applies to this one too unless
    #: it has its own entry (:func:`parity.backends.worker_path`). None: no variant.
    variant_of: str | None = None
    #: True when ``run`` reads a paged KV cache (``inputs.paged()``) for cases with a
    #: ``page_size``; other backends get those cases recorded as unsupported.
    supports_paged: bool = False

    def padded_kv(self, case: Case) -> bool:
        """True when ``run`` reads this contiguous case's keys through a padded cache with used
        lengths (``inputs.padded()``, as ``cache_seqlens`` / ``seqused_k`` kernels do): the read
        probe then poisons the slots past each used length."""
        return False

    #: True when ``run`` passes ``inputs.sinks`` (learned sink logits, ``Case.sinks``) to its library;
    #: ``no_sinks``: why not, in the library's terms, for the ``unsupported`` row.
    supports_sinks: bool = False
    no_sinks: str = ""
    #: True when ``run`` passes ``case.chunk`` (chunked local attention) to its library; ``no_chunk``: why not.
    supports_chunk: bool = False
    no_chunk: str = ""
    #: Rough relative cost of one sweep case (compile-bound backends are high); ``--jobs``
    #: lanes are balanced on it.
    cost_hint: float = 1.0
    #: True when the first call of a configuration (:func:`parity.shard.config_key`) builds a kernel on the
    #: host (a JIT or graph compiler): that row's time limit gets ``--compile-grace`` on top (a build can take
    #: minutes on a busy machine; a worker killed mid-build loses it, and the next row starts it again).
    first_use_compile: bool = False
    #: CPU threads one first-use build keeps busy: the compile pre-pass (:mod:`parity.sweep.precompile`) gives each
    #: of this backend's build workers that many (``MAX_JOBS``, ``TORCHINDUCTOR_COMPILE_THREADS``) and counts them
    #: against the machine's CPUs. 1: a build is one compiler thread (a Triton kernel, a CuTe DSL kernel, XLA).
    compile_threads: int = 1
    #: Backends of one non-empty group build the same kernels into one cache (one library, the same compile keys):
    #: the pre-pass builds each key once for the group. "": none.
    build_group: str = ""
    #: fp8 dtypes of a KV cache ``run`` reads (see the module docstring); () = none.
    kv_dtypes: tuple[str, ...] = ()
    #: True when ``run`` also takes an fp8 query (``case.q_fp8``: ``inputs.q`` fp8, ``inputs.q_descale``).
    fp8_queries: bool = False
    #: The fp8 descale layouts ``run`` takes (``case.fp8_scales``, :data:`parity.case.FP8_SCALES`); per tensor only by default.
    fp8_scale_layouts: tuple[str, ...] = ("tensor",)
    #: True when :meth:`backward` gives this backend's gradients (``parity run --grad``).
    supports_grad: bool = False
    #: Why a backend without ``supports_grad`` has no backward (the ``unsupported`` reason).
    no_grad_reason: str = "no backward in this backend (forward only)"
    #: its backward takes the case's learned sinks (autograd through a forward that scores them): dq / dk / dv are
    #: judged with sinks, and dsinks where the backward returns it
    grad_sinks: bool = False
    #: with sinks, the default :meth:`backward` also differentiates ``run`` by the sinks (``dsinks``, judged)
    grad_dsinks: bool = True
    #: True when ``run_lse`` returns the log-sum-exp beside the output (see the module docstring).
    returns_lse: bool = False
    #: The LSE values the library documents for a row that sees no key (any of them passes).
    lse_empty: tuple[str, ...] = ("-inf",)
    #: A stop signal for a long computation ``run`` does on the host: asked between its steps, ``run`` ends by raising
    #: once it says True. Set where the backend runs in the harness's own process (``--no-isolate``:
    #: :class:`parity.execute.InlineExecutor`, to its ``halt``); a worker process is stopped by its end instead. None: no stop.
    stop: Callable[[], bool] | None = None

    def unavailable_reason(self) -> str | None:
        return None

    def unsupported_reason(self, case: Case) -> str | None:
        return None

    def run(self, case: Case, inputs: Inputs, out: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def grad_unsupported_reason(self, case: Case) -> str | None:
        """``None`` when :meth:`backward` can run ``case``, else why not (the forward is not affected)."""
        if not self.supports_grad:
            return self.no_grad_reason
        if case.page_size is not None:
            return "paged KV is an inference layout: no backward"
        if case.sinks and not self.grad_sinks:
            return "learned sinks: this backend's backward with sinks is not wired to the check (grad_sinks)"
        if case.kv_dtype is not None:
            return "fp8 inputs: an inference layout (FA3 has no fp8 backward); no backward check"
        return None

    def backward(self, case: Case, inputs: Inputs, dout: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """``(dq, dk, dv)`` of ``run``'s output against ``dout`` ``(total_q, hq, d)``: autograd through ``run``;
        with learned sinks and :attr:`grad_dsinks`, also ``dsinks`` ``(hq,)`` (the sinks as a leaf too)."""
        if inputs.sinks is not None and self.grad_sinks and self.grad_dsinks:

            def attention_sinks(q, k, v, sinks):
                return self.run(case, dataclasses.replace(inputs.with_tensors(q, k, v), sinks=sinks), torch.empty_like(q))

            grads = autograd_grads(attention_sinks, inputs.q, inputs.k, inputs.v, dout, inputs.sinks)
            return grads if grads[3] is not None else grads[:3]  # dsinks only where the graph reaches the sinks

        def attention(q, k, v):
            return self.run(case, inputs.with_tensors(q, k, v), torch.empty_like(q))

        return autograd_grads(attention, inputs.q, inputs.k, inputs.v, dout)

    #: Why ``run`` cannot be captured in a CUDA graph (JAX's own runtime, a host-side library): the graph
    #: replay check (``--graph-replay``) is then ``not_run`` with it; "" = it can.
    no_graph: str = ""

    def graph_unsupported_reason(self, case: Case) -> str | None:
        """Why ``case``'s call cannot be captured in a CUDA graph (:attr:`no_graph` by default); None: it can."""
        return self.no_graph or None

    def graph_call(self, case: Case, inputs: Inputs) -> Callable[[torch.Tensor], torch.Tensor]:
        """The function :mod:`parity.graphs` captures once and replays: ``out -> output`` on ``inputs``' tensors,
        which the harness refills with new values between replays. Default: ``run`` as it is."""
        return lambda out: self.run(case, inputs, out)

    def graph_padded_call(self, case: Case, inputs: Inputs, pad: int) -> Callable[[torch.Tensor], torch.Tensor] | None:
        """:meth:`graph_call` on a batch padded as engines pad one to a captured batch size: ``pad`` more
        sequences of 0 keys (and queries) after ``inputs``' own, their block-table slots ``-1``; the function
        returns the real sequences' output ``(total_q, hq, d)``. None (the default): no padded layout here."""
        return None

    def lse_unsupported(self, case: Case) -> str | None:
        """Why a backend that ``returns_lse`` gives none for this case (a code path without it); None: it does."""
        return None

    def run_lse(self, case: Case, inputs: Inputs, out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``run`` that also returns the LSE ``(total_q, hq)`` float32, natural log (``returns_lse``)."""
        raise NotImplementedError

    #: Device bytes its worker keeps allocated between rows once it ran (a library buffer it holds on to): a hint
    #: for :func:`parity.memory.estimate`, like the methods below.
    resident_bytes = 0

    def compile_key(self, case: Case) -> tuple | None:
        """What makes this backend build a new kernel for ``case`` (``None``: it builds nothing on first use).

        Two cases with the same key run on one kernel once it is built, so a run builds each key once:
        its ``--split`` parts keep a key whole, its compile pre-pass (:mod:`parity.sweep.precompile`)
        builds one case per key before the lanes start, and ``timing.json`` counts the keys per backend.
        A key that is too coarse costs a build inside a row (it shows as compile time there); one too fine
        costs a needless pre-pass row. The default, for a backend with :attr:`first_use_compile`, is the
        case's configuration (:func:`parity.shard.config_key`'s fields); backends that know their
        library's cache key override it, in their own file. Pure: no library import."""
        if not self.first_use_compile:
            return None
        return (case.dtype, case.hq, case.hkv, case.head_dim, case.softcap, case.page_size is not None)

    def compile_kernels(self, case: Case) -> tuple:
        """The kernels ``case``'s :meth:`compile_key` stands for, each a hashable key of its own: the key itself where
        one key is one kernel (the default), several where the backend builds one per part of a case (JAX: one
        executable per sequence signature). ``benchmarks/compile_keys.py`` sets the distinct kernels of a run's
        rows beside what its workers built. Pure, as :meth:`compile_key`."""
        key = self.compile_key(case)
        return () if key is None else (key,)

    def kernels_built(self) -> int | None:
        """Kernels this process has built so far, by the library's own count (Dynamo's graphs, FA4's compile
        cache, XLA's compiles); None where the library keeps no count. A row's difference is what it built:
        ``timing.json`` sets it beside the backend's distinct :meth:`compile_key` values."""
        return None

    def workspace_bytes(self, case: Case) -> int:
        """Device bytes ``run`` allocates for ``case`` beyond its inputs and the output buffer it is given: its own
        output copy, the paged / padded cache it builds (:func:`parity.memory.paged_bytes`), a library's
        workspace. A hint for :func:`parity.memory.estimate`, which places rows so that they fit free memory
        and refuses a row its card cannot hold; 0 = none."""
        return 0

    def workspace_again_bytes(self, case: Case) -> int:
        """:meth:`workspace_bytes` for a call of lengths this worker has already run (the probes, a second call):
        less where the backend keeps what it built (flex's block masks)."""
        return self.workspace_bytes(case)

    def foreign_bytes(self, case: Case) -> int:
        """Device bytes ``run`` allocates outside torch's caching allocator (JAX's buffers): counted by the memory
        gate, not seen by a row's ``peak_mem_mb``."""
        return 0

    def workspace_words(self, case: Case) -> str:
        """What dominates this backend's memory on ``case``, in words ("dense float32 scores ..."): said where a
        row is refused for its card (:func:`parity.memory.card_refusal`); "" = nothing to name."""
        return ""

    def version(self) -> str:
        return torch.__version__

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} on {self.device}>"


def fp8_reason(backend: object, case: Case) -> str | None:
    """Why ``backend`` cannot take ``case``'s fp8 inputs (its ``kv_dtypes`` / ``fp8_queries``); ``None`` if it can."""
    takes = tuple(getattr(backend, "kv_dtypes", ()))
    name = getattr(backend, "name", type(backend).__name__)
    if case.kv_dtype is not None and case.kv_dtype not in takes:
        if takes:
            return f"{name} takes no {case.kv_dtype} KV cache (it takes {', '.join(takes)})"
        return f"{name} has no fp8 KV path (case has kv_dtype={case.kv_dtype}; it takes none)"
    if case.q_fp8 and not getattr(backend, "fp8_queries", False):
        return f"{name} takes no fp8 query (case has q_fp8)"
    layouts = tuple(getattr(backend, "fp8_scale_layouts", ("tensor",)))
    if case.kv_dtype is not None and case.fp8_scales not in layouts:
        return f"{name} takes fp8 descales laid out {', '.join(layouts)} only (case has fp8_scales={case.fp8_scales})"
    return None


def feature_reason(backend: object, case: Case) -> str | None:
    """Why ``backend`` cannot take ``case``'s paged KV, learned sinks or chunk (its ``supports_*``
    flags, the reason its ``no_*`` words); None when it can. Checked before ``unsupported_reason``'s
    verdict is final, for every backend, plugins included."""
    if case.page_size is not None and not getattr(backend, "supports_paged", False):
        return f"no paged-KV path (case has page_size={case.page_size})"
    if case.sinks and not getattr(backend, "supports_sinks", False):
        why = getattr(backend, "no_sinks", "") or "the backend takes no learned-sink logits"
        return f"learned sinks: {why}"
    if case.chunk is not None and not getattr(backend, "supports_chunk", False):
        why = getattr(backend, "no_chunk", "") or "the backend has no chunked local attention"
        return f"chunk={case.chunk}: {why}"
    return None


#: The longest query a sequence that the split-KV variants (``*-split*-cuda``) take. Split-KV is the decode path
#: (engines force splits for decode and short speculative or chunked steps); their base backends' rows cover prefill,
#: and a variant per split count over every prefill case would multiply a GPU sweep's rows for nothing new.
SPLIT_MAX_QUERY = 16


def split_scope_reason(case: Case) -> str | None:
    """Why a split-KV variant does not take ``case`` (a query longer than :data:`SPLIT_MAX_QUERY`); None if it does."""
    if max(case.q_lens) > SPLIT_MAX_QUERY:
        return (
            f"split-KV variants run decode-shaped cases only (at most {SPLIT_MAX_QUERY} queries a sequence, this case has "
            f"{max(case.q_lens)}): the base backend's rows cover prefill"
        )
    return None


def refusal_reason(backend: Backend, case: Case) -> str | None:
    """Why ``backend`` does not take ``case``, in the order a sweep asks (:mod:`parity.execute`): its own
    ``unsupported_reason``, then :func:`feature_reason` and :func:`fp8_reason`; None when it takes it."""
    return backend.unsupported_reason(case) or feature_reason(backend, case) or fp8_reason(backend, case)


def _definer(cls: type, attr: str) -> type | None:
    return next((c for c in cls.__mro__ if attr in vars(c)), None)


def lse_call(backend: Backend) -> Callable[[Case, Inputs, torch.Tensor], tuple[torch.Tensor, torch.Tensor]] | None:
    """``backend.run_lse`` where the backend returns its LSE and ``run`` is not overridden below the class
    that defines ``run_lse`` (a subclass that changes ``run`` is measured through it); else ``None``."""
    if not getattr(backend, "returns_lse", False):
        return None
    cls = type(backend)
    run_cls, lse_cls = _definer(cls, "run"), _definer(cls, "run_lse")
    if lse_cls is None or lse_cls is Backend or run_cls is None:
        return None
    if run_cls is not lse_cls and issubclass(run_cls, lse_cls):
        return None
    return backend.run_lse


def packed_lse(lse: torch.Tensor, q_lens: Sequence[int]) -> torch.Tensor:
    """A padded ``(B, H, Sq_max)`` LSE -> the canonical ``(total_q, H)`` float32 (copied into repro scripts)."""
    rows = [lse[b, :, :n].transpose(0, 1) for b, n in enumerate(q_lens)]  # (Sq_b, H) each
    return torch.cat(rows, dim=0).float()  # (total_q, H)


def lse_rows(lse: torch.Tensor, q_lens: Sequence[int], hq: int) -> torch.Tensor:
    """A library's LSE in either layout flash-style kernels use -> the canonical ``(total_q, hq)`` float32:
    padded ``(B, hq, Sq_max)`` (dense calls, older varlen builds) or packed ``(hq, total_q)`` (varlen
    since flash-attn 2.6, FA3, FA4). The base is not changed (natural log in, natural log out)."""
    total = sum(q_lens)
    if lse.dim() == 3 and lse.shape[0] == len(q_lens) and lse.shape[1] == hq and lse.shape[2] >= max(q_lens, default=0):
        return packed_lse(lse, q_lens)  # (total_q, hq)
    if lse.dim() == 2 and tuple(lse.shape) == (hq, total):
        return lse.transpose(0, 1).float()  # (total_q, hq)
    raise BackendError(f"LSE of shape {tuple(lse.shape)}: expected (B, hq, Sq_max) or (hq, total_q) for hq={hq}, total_q={total}")


def cuda_unavailable_reason() -> str | None:
    if not torch.cuda.is_available():
        return "no CUDA device (torch.cuda.is_available() is False)"
    return None


def import_error_reason(module: str) -> str | None:
    """``None`` when ``module`` imports, else a one-line reason."""
    import importlib

    try:
        importlib.import_module(module)
    except Exception as exc:  # noqa: BLE001 - any import failure makes it unavailable
        return f"cannot import {module}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return None


def cu_seqlens(lens, device):
    """Prefix sums ``[0, l0, l0 + l1, ...]`` as an int32 tensor ``(B + 1,)`` on ``device`` (copied into repro scripts)."""
    out = [0]
    for n in lens:
        out.append(out[-1] + n)
    return torch.tensor(out, dtype=torch.int32, device=device)  # (B + 1,)


#: Autograd's words when an operator has no backward (or none for these arguments): a refusal of the
#: backward, recorded ``unsupported`` with the words (the forward's row stands).
GRAD_REFUSALS: tuple[str, ...] = (
    "derivative for",
    "is not implemented",
    "does not support backward",
    "backward is not supported",
)


#: The most characters of a library's message kept in an ``unsupported`` row's detail.
REFUSAL_CHARS = 600


def refusal(exc: BaseException, phrases: Sequence[str], library: str) -> Unsupported | None:
    """``Unsupported("<library> refused: <its words>")`` when ``exc`` is the library declining the case.

    ``exc`` is a refusal when its message holds one of ``phrases`` (case-insensitive, whitespace
    collapsed); the words are the message itself. Anything else, and an :class:`Unsupported`
    already raised by the backend's own translation, gives ``None``: the caller re-raises it.

    ===============================================  ===========================================
    exception                                        result (phrases = ("does not support",))
    ===============================================  ===========================================
    ``AssertionError("Paged KV does not support``    ``Unsupported("flash-attn-4 refused: Paged
    ``irregular head dim")``                         KV does not support irregular head dim")``
    ``RuntimeError("CUDA error: an illegal memory``  ``None`` (an error, not a refusal)
    ``access was encountered")``
    ``AssertionError()`` (no message)                ``None``
    ``Unsupported("...")``                           ``None`` (already the right outcome)
    ===============================================  ===========================================
    """
    if isinstance(exc, Unsupported):
        return None
    words = " ".join(str(exc).split())
    low = words.lower()
    if not words or not any(p.lower() in low for p in phrases):
        return None
    if len(words) > REFUSAL_CHARS:
        words = words[: REFUSAL_CHARS - 3] + "..."
    return Unsupported(f"{library} refused: {words}")


@contextlib.contextmanager
def refusals(phrases: Sequence[str], library: str) -> Iterator[None]:
    """Run the library call inside ``with refusals(PHRASES, "library"):``; see :func:`refusal`."""
    try:
        yield
    except Exception as exc:
        found = refusal(exc, phrases, library)
        if found is None:
            raise
        raise found from None
