"""CPU stand-ins for the cache-reading and fp8 kernels (FA3, vLLM, FlashInfer are GPU-only), with a
``repro_call`` each, so the standalone scripts' read probe and fp8 path run end to end on the CPU.

:class:`EagerCache` is honest: eager float32 attention (bottom-right window ``(left, 0)``) over a
paged cache (paged cases: it loads only the pages its window reaches, as a windowed kernel does),
a padded cache with used lengths (other contiguous cases: ``padded_kv``, it reads each sequence's
used length), or fp8 ``q`` / ``k`` / ``v`` with their descales (fp8 cases: each tensor dequantized
by its descale). Each library-call stand-in is a module-level function that ``run`` calls and the
script copies, as the real backends do. Its planted bugs, the classes of
:mod:`parity.selftest.bugs` in a form a script can copy:

* :class:`EagerCacheReadsAll`: every page of the block table loaded, the unused tail of the last
  page included, and the padded cache read to its capacity, all masked by a zero probability
  (``bug-decode-reads-cache-capacity``, and the paged kernel that loads V outside the window);
* :class:`EagerCacheDescaleTwice`: V's descale applied twice (``bug-fp8-descale-twice``).
"""

from __future__ import annotations

import torch

from parity import Backend, Case, Inputs
from parity.case import FP8_DTYPES, padded_capacity, padded_layout
from parity.repro_script import embed


def window_attention(q, k, v, sk, left, scale):
    """One sequence in float32: ``q`` ``(Sq, hq, d)`` against ``k`` / ``v`` ``(n, hkv, d)``, ``n >= sk``: its
    ``sk`` keys, then slots past its end. Bottom-right window ``(left, 0)`` over the first ``sk`` (``left``
    None: causal); every key of ``k`` / ``v`` is multiplied by its probability (0 outside the window)."""
    sq, hq, _ = q.shape
    g = hq // k.shape[1]
    kf = k.float().repeat_interleave(g, dim=1)  # (n, hq, d)
    vf = v.float().repeat_interleave(g, dim=1)  # (n, hq, d)
    s = torch.einsum("qhd,khd->hqk", q.float(), kf) * scale  # (hq, Sq, n)
    i = torch.arange(sq)[:, None] + sk - sq  # (Sq, 1) the aligned key of each row
    j = torch.arange(k.shape[0])[None, :]  # (1, n)
    ok = (j <= i) & (j < sk) & ((j >= i - left) if left is not None else True)  # (Sq, n)
    p = torch.softmax(s.masked_fill(~ok.to(s.device), float("-inf")), dim=-1)  # (hq, Sq, n)
    return torch.einsum("hqk,khd->qhd", p, vf)  # (Sq, hq, d)


def padded_cache_attention(q, k_cache, v_cache, q_lens, k_lens, left, scale, read_capacity=False):
    """``q`` ``(total_q, hq, d)`` against padded caches ``(B, capacity, hkv, d)`` with used lengths ``k_lens``;
    ``read_capacity``: load every slot of each row of the cache (the bug), else its used length."""
    out, q0 = [], 0
    for b, (sq, sk) in enumerate(zip(q_lens, k_lens)):
        n = k_cache.shape[1] if read_capacity else sk
        out.append(window_attention(q[q0 : q0 + sq], k_cache[b, :n], v_cache[b, :n], sk, left, scale))
        q0 += sq
    return torch.cat(out).to(q.dtype)  # (total_q, hq, d)


def paged_cache_attention(q, k_cache, v_cache, block_table, q_lens, k_lens, page_size, left, scale, read_all=False):
    """``q`` ``(total_q, hq, d)`` against paged caches ``(pages, page_size, hkv, d)`` through ``block_table``;
    loads the pages the window reaches (the others stay zero), or with ``read_all`` every page of the
    sequence, its last page whole (the bug)."""
    out, q0 = [], 0
    for b, (sq, sk) in enumerate(zip(q_lens, k_lens)):
        pages = block_table[b, : -(-sk // page_size)].long()  # (pages_b,) logical -> physical
        first = 0 if left is None else max(0, sk - sq - left) // page_size  # the first page a row reaches
        load = torch.arange(len(pages)) >= (0 if read_all else first)  # (pages_b,)
        k = torch.zeros(len(pages), *k_cache.shape[1:], dtype=k_cache.dtype)  # (pages_b, ps, hkv, d)
        v = torch.zeros_like(k)  # (pages_b, ps, hkv, d)
        k[load], v[load] = k_cache[pages[load]], v_cache[pages[load]]
        n = len(pages) * page_size if read_all else sk
        out.append(window_attention(q[q0 : q0 + sq], k.flatten(0, 1)[:n], v.flatten(0, 1)[:n], sk, left, scale))
        q0 += sq
    return torch.cat(out).to(q.dtype)  # (total_q, hq, d)


def fp8_attention(q, k, v, q_lens, k_lens, left, scale, descales, dtype, v_descale_twice=False):
    """fp8 ``q`` (or ``q`` in ``dtype``), ``k``, ``v`` packed, with ``descales`` ``(q_descale or None, k_descale,
    v_descale)`` float32 scalars: each tensor times its descale, then float32 attention; output in ``dtype``.
    ``v_descale_twice``: V's descale applied once more (the bug)."""
    qd, kd, vd = descales
    q = q.float() * (1.0 if qd is None else qd)  # (total_q, hq, d)
    k = k.float() * kd  # (total_k, hkv, d)
    v = v.float() * (vd * vd if v_descale_twice else vd)  # (total_k, hkv, d)
    out, q0, k0 = [], 0, 0
    for sq, sk in zip(q_lens, k_lens):
        out.append(window_attention(q[q0 : q0 + sq], k[k0 : k0 + sk], v[k0 : k0 + sk], sk, left, scale))
        q0, k0 = q0 + sq, k0 + sk
    return torch.cat(out).to(dtype)  # (total_q, hq, d)


class EagerCache(Backend):
    """Honest; see the module docstring."""

    name = "test-eager-cache"
    device = "cpu"
    supports_paged = True
    kv_dtypes = tuple(FP8_DTYPES)
    fp8_queries = True
    read_all = False
    v_descale_twice = False

    def unsupported_reason(self, case: Case) -> str | None:
        w = case.window
        if w.align != "bottom_right" or w.right != 0 or case.softcap or case.sinks or case.chunk:
            return "test-eager-cache: bottom-right windows (left, 0) only, no softcap, sinks or chunk"
        if any(q > k for q, k in zip(case.q_lens, case.k_lens)):
            return "test-eager-cache: Sq <= Sk only"
        if case.kv_dtype is not None and case.page_size is not None:
            return "test-eager-cache: fp8 on contiguous keys only"
        return None

    def padded_kv(self, case: Case) -> bool:
        return case.page_size is None and case.kv_dtype is None

    def run(self, case: Case, inputs: Inputs, out: torch.Tensor) -> torch.Tensor:
        left, ql, kl, scale = case.window.left, list(case.q_lens), list(case.k_lens), case.softmax_scale
        if case.kv_dtype is not None:
            d = (inputs.q_descale, inputs.k_descale, inputs.v_descale)
            got = fp8_attention(inputs.q, inputs.k, inputs.v, ql, kl, left, scale, d, out.dtype, self.v_descale_twice)
        elif case.page_size is not None:
            c = inputs.paged()
            got = paged_cache_attention(inputs.q, c.k_cache, c.v_cache, c.block_table, ql, kl, c.page_size, left, scale, self.read_all)
        else:
            c = inputs.padded()
            got = padded_cache_attention(inputs.q, c.k_cache, c.v_cache, ql, kl, left, scale, self.read_all)
        return out.copy_(got)

    def repro_call(self, case: Case) -> str:
        left = case.window.left
        if case.kv_dtype is not None:
            fns, body = (
                [fp8_attention],
                f"""\
            def attention(q, k, v, descales):
                return fp8_attention(q, k, v, Q_LENS, K_LENS, {left!r}, SCALE, descales, DTYPE, {self.v_descale_twice!r})
            """,
            )
        elif case.page_size is not None:
            fns, body = (
                [paged_cache_attention],
                f"""\
            def attention(q, k, v):
                k_cache, v_cache, table, _ = paged_layout(k, v, K_LENS, PAGE_SIZE, SEED)
                return paged_cache_attention(q, k_cache, v_cache, table, Q_LENS, K_LENS, PAGE_SIZE, {left!r}, SCALE, {self.read_all!r})
            """,
            )
        else:
            fns, body = (
                [padded_layout, padded_cache_attention],
                f"""\
            def attention(q, k, v):
                k_cache, v_cache, _ = padded_layout(k, v, K_LENS, {padded_capacity(case.k_lens)})
                return padded_cache_attention(q, k_cache, v_cache, Q_LENS, K_LENS, {left!r}, SCALE, {self.read_all!r})
            """,
            )
        return embed([window_attention, *fns], body)


class EagerCacheReadsAll(EagerCache):
    name = "bug-test-eager-cache-reads-all"
    read_all = True


class EagerCacheDescaleTwice(EagerCache):
    name = "bug-test-eager-cache-descale-twice"
    v_descale_twice = True
