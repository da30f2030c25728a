"""JAX ``jax.nn.dot_product_attention`` with ``local_window_size``, XLA and cuDNN implementations.

Layout ``(B, T, N, H)``; GQA is native (``N`` query heads over ``K`` kv heads). Tensors
cross between torch and JAX through DLPack on the GPU (no host copy). Before JAX is
imported its allocator is set to share the card (:data:`JAX_ENV`, each only where the user has not
set it): no pre-allocation (``XLA_PYTHON_CLIENT_PREALLOCATE=false``), and the ``platform`` allocator,
which gives memory back when a buffer dies, where the default BFC pool keeps all it ever grew to (a
lane's worker that ran one large row would hold that memory for the rest of the run, unseen by the
memory gate: on the H100 on 2026-12-06 a row that had drained the card still found 8.9 GiB free of 80).

Window translation: JAX's window is **top-left aligned** and inclusive: query ``i`` sees key
``j`` iff ``i - left <= j <= i + right`` (``local_window_size=(left, right)``), and its causal
mask is ``tril`` (also top-left). The canonical window maps as:

* ``top_left``: ``local_window_size=(left, right)`` directly; an unbounded side becomes
  ``Sq + Sk`` (covers every key); ``(None, 0)`` is ``is_causal=True``; ``(None, None)`` no mask.
* ``bottom_right`` with ``Sq == Sk``: the same (the offset is 0).
* ``bottom_right`` with ``Sq < Sk`` (decode, chunked prefill): ``Sk - Sq`` zero query rows
  are prepended, so the real queries sit at rows ``Sk - Sq ..``: there the top-left rule is the
  bottom-right one; the padded rows are dropped.
* ``bottom_right`` with ``Sq > Sk``: no translation (would need keys before key 0): unsupported.

Each call runs under ``jax.jit`` (the window, causal flag and scale are static), as a model
would run it: one XLA executable per sequence signature, ``(T, Sk, is_causal,
local_window_size)`` with ``T`` the query rows after padding (and the dtype, heads, head dim
and scale of the case), loaded from the persistent compile cache when ``--compile-cache`` is
set. The padded rows are dropped on torch's side, so a padded decode sequence and an
unpadded one of the same ``T`` share one executable; :meth:`JaxBackend.compile_key` is the
set of a case's signatures, so a key of ``n`` signatures is ``n`` executables, and
``--grad`` adds one more per signature (``jax.vjp`` is jitted apart). Called eagerly instead,
JAX dispatches the function's dozens of primitives one by one, each its own small compiled
op, which made every call cost ~0.1 s on the H200 whatever the case's size.

No softcap. The cuDNN implementation takes float16/bfloat16 and, in JAX, only
``right == 0`` windows; its refusals are recorded as unsupported.

Refusal phrases (:data:`JAX_REFUSALS`): JAX's own checks before it builds the cuDNN call,
then cuDNN's (:data:`.cudnn.CUDNN_REFUSALS`), which XLA raises as its runtime error when it
compiles the call, or when the result is awaited:

===============================  =============================================================
``doesn't support``              JAX: "cuDNN doesn't support right window: R when causal mask
                                 is not used." (``ValueError``)
``The head dim must be``         JAX: "The head dim must be <= 256 and a multiple of 8, but
                                 got D." (``NotImplementedError``)
``Unsupported sequence length``  JAX: "Unsupported sequence length Q T, KV S."
``requires cudnn version``       JAX: "Packed layout requires cudnn version >= 9.6 ...",
                                 "Compute capability 10.3 requires cuDNN version >= 9.11."
cuDNN's phrases                  "Sliding window attention is only supported with max_s_q <=
                                 max_s_kv." (Sq > Sk on jax-cudnn-causal-cuda, seen on
                                 the H200 with jax 0.11.2)
===============================  =============================================================
"""

from __future__ import annotations

import functools
import os

import torch

from ..case import Case, Inputs
from ..results import HALF_DTYPES
from ..window import Window
from .base import GRAD_REFUSALS, Backend, Unsupported, cuda_unavailable_reason, refusals
from .cudnn import CUDNN_REFUSALS

#: JAX's own words when it declines a cuDNN call, then cuDNN's; see the module docstring.
JAX_REFUSALS: tuple[str, ...] = (
    "doesn't support",
    "The head dim must be",
    "Unsupported sequence length",
    "requires cudnn version",
    *CUDNN_REFUSALS,
)


def jax_window(window: Window, sq: int, sk: int, causal_with_window: bool = False) -> tuple[int, bool, tuple[int, int] | None]:
    """``(pad_q, is_causal, local_window_size)`` for one sequence; raises :class:`Unsupported`.

    ``pad_q`` zero query rows go in front of the real ones (see the module docstring).
    ``causal_with_window``: a ``(left, 0)`` window is passed as ``is_causal=True`` plus
    ``local_window_size=(left, 0)`` instead of the window alone.
    """
    pad = 0
    if window.align == "bottom_right" and sq != sk:
        if sq > sk:
            raise Unsupported("JAX windows are top-left aligned; bottom-right with Sq > Sk has no translation")
        pad = sk - sq
    left, right = window.native_sides([sq], [sk])  # a side past a C int (2**62) passed as Sq + Sk
    if left is None and right is None:
        return pad, False, None
    if left is None and right == 0:
        return pad, True, None
    big = sq + pad + sk
    if causal_with_window and right == 0:
        return pad, True, (big if left is None else left, 0)
    return pad, False, (big if left is None else left, big if right is None else right)


#: JAX's allocator settings for a card shared with other lanes' workers; see the module docstring.
JAX_ENV = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false", "XLA_PYTHON_CLIENT_ALLOCATOR": "platform"}


def _prepare_jax() -> None:
    for key, value in JAX_ENV.items():
        os.environ.setdefault(key, value)


def jax_attention_fn(implementation, is_causal, local_window_size, scale):
    """``jax.nn.dot_product_attention`` for one static configuration, jitted; see the module docstring.
    The jitted function takes ``q`` ``(T, N, H)``, ``k`` / ``v`` ``(S, K, H)`` and returns every one of the
    ``T`` output rows (the caller drops padded ones: the padding is no part of the executable)."""
    import jax

    def attend(q, k, v):  # q: (T, N, H); k, v: (S, K, H)
        o = jax.nn.dot_product_attention(
            q[None],  # (1, T, N, H)
            k[None],  # (1, S, K, H)
            v[None],  # (1, S, K, H)
            scale=scale,
            is_causal=is_causal,
            local_window_size=local_window_size,
            implementation=implementation,
        )  # (1, T, N, H)
        return o[0]  # (T, N, H)

    return jax.jit(attend)


_attention_fn = functools.lru_cache(maxsize=4096)(jax_attention_fn)

#: Byte alignment XLA requires of a buffer it is handed (it failed on the H200 with "INTERNAL:
#: Address of buffer 2 must be a multiple of 10" (hex) for a sequence's view into a packed batch).
XLA_ALIGNMENT = 64


def dlpack_ready(t, alignment=64):
    """``t`` contiguous and starting on an ``alignment``-byte boundary (:data:`XLA_ALIGNMENT`; a copy
    where the view into the packed batch does not): JAX takes DLPack buffers without copying, and XLA
    then refuses an unaligned one at run time instead of at import."""
    t = t.contiguous()
    return t if t.data_ptr() % alignment == 0 else t.clone()


def jax_attention(q, k, v, out, q_lens, k_lens, natives, implementation, scale, jitted):
    """``jax.nn.dot_product_attention`` per sequence of a packed torch batch, through DLPack.

    ``q`` ``(total_q, hq, d)``, ``k`` / ``v`` ``(total_k, hkv, d)``; ``out`` ``(total_q, hq, d)`` written
    and returned. ``natives``: per sequence ``(pad_q, is_causal, local_window_size)`` (:func:`jax_window`):
    ``pad_q`` zero query rows go in front, their outputs dropped. ``jitted``: :func:`jax_attention_fn` or a
    cache of it.
    """
    import jax  # JAX_ENV is set before: by the backend (_prepare_jax), or by a repro script's head

    if q.is_cuda:
        torch.cuda.synchronize()  # torch's stream must be done before JAX reads the buffers
    q0 = k0 = 0
    for (sq, sk), (pad, is_causal, local) in zip(zip(q_lens, k_lens), natives):
        qb = q[q0 : q0 + sq]  # (Sq, hq, d)
        if pad:
            qb = torch.cat([qb.new_zeros(pad, *qb.shape[1:]), qb])  # (pad + Sq, hq, d)
        args = [jax.dlpack.from_dlpack(dlpack_ready(t)) for t in (qb, k[k0 : k0 + sk], v[k0 : k0 + sk])]
        o = jitted(implementation, is_causal, local, scale)(*args).block_until_ready()  # (pad + Sq, hq, d)
        out[q0 : q0 + sq] = torch.from_dlpack(o)[pad:].to(out.device)  # (Sq, hq, d): the padded rows dropped
        q0, k0 = q0 + sq, k0 + sk
    return out


def jax_grad_fn(implementation, is_causal, local_window_size, scale, forward=None):
    """The backward of :func:`jax_attention_fn`'s configuration, jitted: ``jax.vjp`` of the same attention
    (``forward``: :func:`jax_attention_fn` or a cache of it). The jitted function takes ``q`` ``(T, N, H)``,
    ``k`` / ``v`` ``(S, K, H)`` and ``do`` ``(T, N, H)`` (zero on padded rows); returns ``(dq (T, N, H), dk, dv)``."""
    import jax

    attend = (forward or jax_attention_fn)(implementation, is_causal, local_window_size, scale)

    def grads(q, k, v, do):
        _, vjp = jax.vjp(attend, q, k, v)
        return vjp(do)  # (dq, dk, dv)

    return jax.jit(grads)


_grad_fn = functools.lru_cache(maxsize=4096)(jax_grad_fn)


def jax_attention_grads(q, k, v, dout, q_lens, k_lens, natives, implementation, scale, jitted):
    """``(dq, dk, dv)`` of :func:`jax_attention` against ``dout`` ``(total_q, hq, d)``, per sequence, through
    DLPack; ``jitted``: :func:`jax_grad_fn` or a cache of it. Shapes as ``q``, ``k``, ``v``."""
    import jax  # JAX_ENV is set before: by the backend (_prepare_jax), or by a repro script's head

    if q.is_cuda:
        torch.cuda.synchronize()  # torch's stream must be done before JAX reads the buffers
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)  # (total_q, hq, d), (total_k, hkv, d) x 2
    q0 = k0 = 0
    for (sq, sk), (pad, is_causal, local) in zip(zip(q_lens, k_lens), natives):
        qb, dob = q[q0 : q0 + sq], dout[q0 : q0 + sq]  # (Sq, hq, d) x 2
        if pad:  # zero query rows in front, and a zero gradient on their outputs
            qb, dob = (torch.cat([t.new_zeros(pad, *t.shape[1:]), t]) for t in (qb, dob))  # (pad + Sq, hq, d) x 2
        parts = (qb, k[k0 : k0 + sk], v[k0 : k0 + sk], dob)
        args = [jax.dlpack.from_dlpack(dlpack_ready(t)) for t in parts]
        gq, gk, gv = jitted(implementation, is_causal, local, scale)(*args)
        gq.block_until_ready()
        dq[q0 : q0 + sq] = torch.from_dlpack(gq)[pad:].to(dq.device)  # (Sq, hq, d): the padded rows dropped
        dk[k0 : k0 + sk] = torch.from_dlpack(gk).to(dk.device)  # (Sk, hkv, d)
        dv[k0 : k0 + sk] = torch.from_dlpack(gv).to(dv.device)  # (Sk, hkv, d)
        q0, k0 = q0 + sq, k0 + sk
    return dq, dk, dv


_COMPILES: list[int] = []  # [executables compiled or loaded, loaded from the persistent cache], once listening


def _compile_events() -> int | None:
    """How many executables XLA compiled in this process since the listeners were registered; None without JAX.

    JAX times each executable it compiles *or loads from the persistent cache* as one ``backend_compile_duration``
    event (``compile_or_get_cached`` inside the timer, jax 0.10.2 and 0.11.x), so the loads it counts
    (``/jax/compilation_cache/cache_hits``: a lane running a key the compile pre-pass built) are taken off."""
    if not _COMPILES:
        try:
            from jax import monitoring
        except Exception:  # noqa: BLE001 - no jax here
            return None

        def timed(event: str, duration: float, **_: object) -> None:
            if event.endswith("backend_compile_duration"):
                _COMPILES[0] += 1

        def counted(event: str, **_: object) -> None:
            if event.endswith("compilation_cache/cache_hits"):
                _COMPILES[1] += 1

        _COMPILES.extend((0, 0))
        monitoring.register_event_duration_secs_listener(timed)
        monitoring.register_event_listener(counted)
    return _COMPILES[0] - _COMPILES[1]


def executable_signatures(window: Window, q_lens, k_lens, causal_with_window: bool = False) -> tuple:
    """What decides the XLA executables of a case's sequences (see the module docstring), each once, sorted:
    ``(T, Sk, is_causal, local_window_size)`` per sequence, ``T`` its query rows after :func:`jax_window`'s padding;
    a sequence it refuses as ``(Sq, Sk)``. Not the order or count of the sequences, not the padding itself, nor the
    canonical window beyond what it translates to."""
    seqs: set[tuple] = set()
    for sq, sk in zip(q_lens, k_lens):
        try:
            pad, causal, local = jax_window(window, sq, sk, causal_with_window)
        except Unsupported:
            seqs.add((sq, sk))
            continue
        seqs.add((pad + sq, sk, causal, local))
    return tuple(sorted(seqs, key=repr))


class JaxBackend(Backend):
    name = "jax-cuda"
    first_use_compile = True  # XLA / cuDNN build per shape
    no_sinks = "jax.nn.dot_product_attention has no sink argument"
    no_chunk = "jax.nn.dot_product_attention's local_window_size has no chunks (attention_chunk)"
    device = "cuda"
    implementation: str | None = None  # "xla" | "cudnn"
    causal_with_window = False  # see the module docstring
    description = "jax.nn.dot_product_attention"
    #: torch's CUDA graph sees none of XLA's launches (its own stream and runtime; the tensors cross by DLPack)
    no_graph = "JAX runs on XLA's own stream and runtime: a torch CUDA graph cannot capture it (jax.jit is its own graph)"

    def unavailable_reason(self) -> str | None:
        if r := cuda_unavailable_reason():
            return r
        _prepare_jax()
        try:
            import jax
        except Exception as exc:  # noqa: BLE001
            return f"cannot import jax: {type(exc).__name__}: {exc}"
        try:
            gpus = jax.devices("gpu")
        except Exception as exc:  # noqa: BLE001
            return f"jax sees no GPU: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        if not gpus:
            return "jax sees no GPU"
        import inspect

        if "local_window_size" not in inspect.signature(jax.nn.dot_product_attention).parameters:
            return f"jax {jax.__version__}: dot_product_attention has no local_window_size"
        return None

    def compile_key(self, case: Case) -> tuple | None:
        """XLA (and cuDNN through it) compiles one executable per sequence signature (:func:`executable_signatures`)
        and dtype, heads, head dim and scale: a key of ``n`` signatures is ``n`` executables (``n`` more with
        ``--grad``), and every case of the key runs on the same ones (tests/test_jax_compile_key.py)."""
        seqs = executable_signatures(case.window, case.q_lens, case.k_lens, self.causal_with_window)
        return (case.dtype, case.hq, case.hkv, case.head_dim, case.softmax_scale, seqs)

    def compile_kernels(self, case: Case) -> tuple:
        """One kernel per sequence signature of :meth:`compile_key` (with the dtype, heads, head dim and scale)."""
        key = self.compile_key(case)
        assert key is not None  # JAX builds on first use: every case has a key
        *config, seqs = key
        return tuple((*config, s) for s in seqs)

    def kernels_built(self) -> int | None:
        """XLA executables compiled in this process, once listening (:func:`_compile_events`: not those loaded
        from the persistent cache)."""
        return _compile_events()

    def version(self) -> str:
        import jax
        import jaxlib

        how = ", is_causal=True with (left, 0) windows" if self.causal_with_window else ""
        return f"jax {jax.__version__}, jaxlib {jaxlib.__version__}, implementation={self.implementation}{how}"

    def unsupported_reason(self, case: Case) -> str | None:
        if case.softcap is not None:
            return "jax.nn.dot_product_attention has no softcap"
        if self.implementation == "cudnn" and case.dtype not in HALF_DTYPES:
            return f"the cuDNN implementation takes float16/bfloat16, not {case.dtype}"
        try:
            for sq, sk in zip(case.q_lens, case.k_lens):
                jax_window(case.window, sq, sk, self.causal_with_window)
        except Unsupported as exc:
            return str(exc)
        return None

    #: The backward: ``jax.vjp`` of the same jitted ``dot_product_attention`` (:func:`jax_attention_grads`).
    supports_grad = True

    def backward(self, case: Case, inputs: Inputs, dout: torch.Tensor) -> tuple[torch.Tensor, ...]:
        natives = self.natives(case)
        _prepare_jax()
        with refusals(JAX_REFUSALS + GRAD_REFUSALS, f"jax ({self.implementation}) backward"):
            return jax_attention_grads(
                inputs.q, inputs.k, inputs.v, dout, case.q_lens, case.k_lens, natives, self.implementation, case.softmax_scale, _grad_fn
            )

    def _padded_rows(self, case: Case) -> list[tuple[int, int]]:
        """Per sequence ``(T, Sk)``: its query rows after :func:`jax_window`'s padding (a refused sequence as it is)."""

        def queries(sq: int, sk: int) -> int:
            try:
                return jax_window(case.window, sq, sk, self.causal_with_window)[0] + sq
            except Unsupported:
                return sq

        return [(queries(sq, sk), sk) for sq, sk in zip(case.q_lens, case.k_lens)]

    def workspace_bytes(self, case: Case) -> int:
        """Torch's side of :func:`jax_attention`: a padded sequence's zero rows and the query they are joined to,
        while the previous sequence's padded query is still held by its DLPack array (measured on the H100,
        2026-12-06: a decode row over 128k keys 2 GiB of padded queries, two sequences of 32k and 30k keys
        0.7 GiB at once)."""
        row = case.hq * case.head_dim * (torch.finfo(case.torch_dtype).bits // 8)
        most, held = 0, 0
        for (t, _), sq in zip(self._padded_rows(case), case.q_lens):
            padded = t * row if t != sq else 0  # a view of q when nothing is padded
            most = max(most, held + (t - sq) * row + padded)
            held = padded
        return most

    def foreign_bytes(self, case: Case) -> int:
        """JAX's own buffers (outside torch's allocator: ``peak_mem_mb`` does not see them), per sequence: the
        output over the padded rows, the rows kept, and the softmax statistics; not measured."""
        row = case.hq * case.head_dim * (torch.finfo(case.torch_dtype).bits // 8)
        return max((t * row + sq * row + t * case.hq * 4 for (t, _), sq in zip(self._padded_rows(case), case.q_lens)), default=0)

    def natives(self, case: Case) -> list:
        """Per sequence ``(pad_q, is_causal, local_window_size)`` from :func:`jax_window`."""
        return [jax_window(case.window, sq, sk, self.causal_with_window) for sq, sk in zip(case.q_lens, case.k_lens)]

    def run(self, case: Case, inputs: Inputs, out: torch.Tensor) -> torch.Tensor:
        natives = self.natives(case)
        _prepare_jax()
        with refusals(JAX_REFUSALS, f"jax ({self.implementation})"):
            return jax_attention(
                inputs.q, inputs.k, inputs.v, out, case.q_lens, case.k_lens, natives, self.implementation, case.softmax_scale, _attention_fn
            )

    def repro_backward(self, case: Case) -> str:
        """``attention_grads(q, k, v, dout)`` for a ``--grad`` script: :func:`jax_attention_grads` as
        :meth:`backward` calls it (``NATIVE`` from :meth:`repro_call`'s part)."""
        from ..repro_script import embed

        return embed(
            [jax_grad_fn, jax_attention_grads],
            f"""\
            def attention_grads(q, k, v, dout):
                return jax_attention_grads(q, k, v, dout, Q_LENS, K_LENS, NATIVE, {self.implementation!r}, SCALE, jax_grad_fn)
            """,
        )

    def repro_call(self, case: Case) -> str:
        """``attention(q, k, v)`` for a standalone script: :func:`jax_attention` as ``run`` calls it, per
        sequence from :func:`jax_window`."""
        from ..repro_script import embed

        if case.softcap is not None:
            raise Unsupported("jax.nn.dot_product_attention has no softcap")
        return embed(
            [jax_attention_fn, dlpack_ready, jax_attention],
            f"""\
            # per sequence (pad_q, is_causal, local_window_size): JAX's window is top-left aligned, so a
            # bottom-right case with Sq < Sk gets pad_q zero query rows in front (dropped from the output)
            NATIVE = {self.natives(case)!r}


            def attention(q, k, v):
                return jax_attention(q, k, v, torch.empty_like(q), Q_LENS, K_LENS, NATIVE, {self.implementation!r}, SCALE,
                                     jax_attention_fn)
            """,
            head="\n".join(
                [
                    "import os",
                    "",
                    *(f"os.environ.setdefault({k!r}, {v!r})  # JAX shares the GPU with torch" for k, v in JAX_ENV.items()),
                    "import jax  # noqa: F401, E402 - the backend's package (exit 2 here when it does not import)",
                ]
            ),
        )


class JaxXla(JaxBackend):
    cost_hint = 8  # XLA compiles each new (shape, window): cold 2.5 s per row on the H100 of 2026-12-06c
    name = "jax-xla-cuda"
    implementation = "xla"
    description = "jax.nn.dot_product_attention(implementation='xla') with local_window_size"

    def foreign_bytes(self, case: Case) -> int:
        """XLA's implementation is dense, one call per sequence (the largest counts): float32 scores and
        weights ``(hq, T, Sk)`` and the boolean window mask ``(T, Sk)``, where ``T`` is the query length after
        :func:`jax_window`'s padding (a bottom-right window with Sq < Sk pads the queries to Sk: a decode row
        over 32k keys is a 32k x 32k call; XLA's GEMM autotuner asked for 128 GiB there on the H100,
        lab/runs/h100-2026-12-06b-models), besides its output. JAX allocates outside torch's allocator, so a
        row's ``peak_mem_mb`` does not show it: this hint is what the memory gate knows."""
        return max(2 * case.hq * t * sk * 4 + t * sk + 2 * t * case.hq * case.head_dim * 4 for t, sk in self._padded_rows(case))

    def workspace_words(self, case: Case) -> str:
        t, sk = max(self._padded_rows(case), key=lambda p: p[0] * p[1])
        return f"dense float32 scores {t} x {sk} x {case.hq} heads, queries padded to the keys"


class JaxCudnn(JaxBackend):
    cost_hint = 4  # cuDNN builds a graph per shape
    name = "jax-cudnn-cuda"
    implementation = "cudnn"
    description = "jax.nn.dot_product_attention(implementation='cudnn') with local_window_size"


class JaxCudnnCausal(JaxCudnn):
    name = "jax-cudnn-causal-cuda"
    causal_with_window = True
    description = "jax.nn.dot_product_attention(implementation='cudnn'), is_causal=True with local_window_size=(left, 0)"
