"""What a backend's CUDA-graph call (:meth:`.base.Backend.graph_call`, :mod:`parity.graphs`) builds once on the host,
and the device-only copy its captured function makes of the inputs' values.

During capture nothing may touch the host (no ``.tolist()``, ``.item()``, ``torch.tensor(list, device=...)``, no
library ``plan``), and whatever is built before capture is frozen: the graph replays it. So a backend's graph call
builds its layout tensors here, once, from the case's lengths (which a graph's buffers fix), and its captured
function reads ``inputs``' own tensors, which the harness refills in place between replays:

=======================  =================================================  =====================================================
helper                   built once (host)                                  inside the captured function (device)
=======================  =================================================  =====================================================
:func:`lens`             ``(B + pad,)`` int32 lengths, ``pad`` zeros after  nothing
:func:`cu_lens`          ``(B + pad + 1,)`` int32 prefix sums               nothing
:class:`CacheFill`       a paged / padded cache, the slot of every key      ``fill(k, v)``: the keys' new values into their slots
:func:`cache_or_inputs`  nothing                                            the prepared cache (refilled), else the inputs' keys
=======================  =================================================  =====================================================

A padded batch (:meth:`.base.Backend.graph_padded_call`) is ``pad`` more sequences of 0 keys (and 0 queries where the
layout is packed): their lengths 0, their cu_seqlens repeating the total, their block-table slots ``-1``.
"""

from __future__ import annotations

import dataclasses

import torch

from ..case import Inputs, padded_capacity, padded_layout, paged_layout
from .base import cu_seqlens


def lens(values, device, pad: int = 0) -> torch.Tensor:
    """``values`` then ``pad`` zeros as an int32 tensor ``(B + pad,)`` on ``device`` (host work: call it once)."""
    return torch.tensor([*values, *[0] * pad], dtype=torch.int32, device=device)  # (B + pad,)


def cu_lens(values, device, pad: int = 0) -> torch.Tensor:
    """:func:`.base.cu_seqlens` of ``values`` and ``pad`` empty sequences: ``(B + pad + 1,)`` int32, the total repeated."""
    return cu_seqlens([*values, *[0] * pad], device)  # (B + pad + 1,)


def key_slots(layout) -> torch.Tensor:
    """Where each packed key lands in a cache that ``layout`` (``ids -> cache``, the harness's own
    :func:`parity.case.paged_layout` / :func:`parity.case.padded_layout`) builds: ``(total_k,)`` int64 row indices into
    the cache flattened to ``(rows, hkv, d)``. Read off the layout itself (each key's id, 1-based, laid out as a
    key), so the placement is written once, in :mod:`parity.case`."""
    cache = layout().flatten()  # (rows,) float64: key id + 1 at its row, 0 elsewhere
    rows = torch.nonzero(cache).flatten()  # (total_k,)
    slots = torch.empty(len(rows), dtype=torch.int64)  # (total_k,)
    slots[(cache[rows] - 1).long()] = rows
    return slots


@dataclasses.dataclass
class CacheFill:
    """A cache the backend reads (paged ``(pages, page_size, hkv, d)`` or padded ``(B, capacity, hkv, d)``, built once
    with the values it was built from) and ``slots`` ``(total_k,)``, the row of each packed key in it flattened."""

    k_cache: torch.Tensor  # (pages, page_size, hkv, d) or (B, capacity, hkv, d)
    v_cache: torch.Tensor  # same shape
    slots: torch.Tensor | None  # (total_k,) int64 on the caches' device; None: built for ``run``, never refilled

    def fill(self, k: torch.Tensor, v: torch.Tensor) -> None:
        """The keys' and values' current values ``(total_k, hkv, d)`` into their slots: device work only."""
        assert self.slots is not None, "a cache built for run (graph=False) has no slots to refill"
        _copy_rows(self.k_cache, self.slots, k)
        _copy_rows(self.v_cache, self.slots, v)


def _copy_rows(cache: torch.Tensor, slots: torch.Tensor, x: torch.Tensor) -> None:
    """``x`` ``(total_k, hkv, d)`` into rows ``slots`` of ``cache`` flattened to ``(rows, hkv, d)``, in place. fp8 goes
    through same-size integer views of both (``index_copy_`` has no float8 kernel on CUDA or the CPU in torch 2.x: a
    row copy moves bits, so the integer copy is exact); no allocation, no host sync: capturable."""
    rows = cache.view(-1, *x.shape[1:])  # (rows, hkv, d)
    if x.dtype.is_floating_point and x.element_size() == 1:  # float8_e4m3fn, float8_e5m2 (and any other 1-byte float)
        rows, x = rows.view(torch.uint8), x.view(torch.uint8)  # (rows, hkv, d), (total_k, hkv, d): the same bits
    rows.index_copy_(0, slots, x)


def _on(slots: torch.Tensor | None, inputs: Inputs) -> torch.Tensor | None:
    return None if slots is None else slots.to(inputs.k.device)  # (total_k,)


def _ids(inputs: Inputs) -> torch.Tensor:
    return torch.arange(1, inputs.k.shape[0] + 1, dtype=torch.float64).view(-1, 1, 1)  # (total_k, 1, 1): key id + 1


def paged_fill(inputs: Inputs, page_size: int, pad: int = 0, graph: bool = True) -> tuple[CacheFill, torch.Tensor, torch.Tensor]:
    """``inputs.paged(page_size)`` as a :class:`CacheFill` (its slots only for a ``graph`` call: ``run`` reads the cache
    as built), its block table ``(B + pad, max_pages)`` int32 (the padded sequences' slots ``-1``) and its lengths
    ``(B + pad,)`` int32 (0 for them). The graph check's inputs are never the read probe's poisoned ones:
    :meth:`CacheFill.fill` rewrites every key's slot."""
    case, paged = inputs.case, inputs.paged(page_size)
    ids = _ids(inputs)
    slots = key_slots(lambda: paged_layout(ids, ids, list(case.k_lens), page_size, case.seed)[0]) if graph else None  # (total_k,)
    table = paged.block_table  # (B, max_pages) int32
    if pad:
        table = torch.cat([table, torch.full((pad, table.shape[1]), -1, dtype=table.dtype, device=table.device)])  # (B + pad, P)
    return CacheFill(paged.k_cache, paged.v_cache, _on(slots, inputs)), table, lens(case.k_lens, inputs.k.device, pad)


def padded_fill(inputs: Inputs, pad: int = 0, graph: bool = True) -> tuple[CacheFill, torch.Tensor]:
    """``inputs.padded()`` as a :class:`CacheFill` (slots for a ``graph`` call) with ``pad`` more rows of zeros
    ``(B + pad, capacity, hkv, d)``, and its used lengths ``(B + pad,)`` int32 (0 for the padded rows)."""
    case, padded = inputs.case, inputs.padded()
    ids, cap = _ids(inputs), padded_capacity(case.k_lens)
    slots = key_slots(lambda: padded_layout(ids, ids, list(case.k_lens), cap)[0]) if graph else None  # (total_k,): rows of (B * cap)
    k_cache, v_cache = padded.k_cache, padded.v_cache  # (B, capacity, hkv, d) each
    if pad:
        k_cache = torch.cat([k_cache, k_cache.new_zeros(pad, *k_cache.shape[1:])])  # (B + pad, capacity, hkv, d)
        v_cache = torch.cat([v_cache, v_cache.new_zeros(pad, *v_cache.shape[1:])])  # (B + pad, capacity, hkv, d)
    return CacheFill(k_cache, v_cache, _on(slots, inputs)), lens(case.k_lens, inputs.k.device, pad)


def cache_or_inputs(kw: dict, inputs: Inputs, refill: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The keys and values a prepared call reads: ``kw``'s ``fill`` (popped; a :class:`CacheFill`), its keys refilled
    from ``inputs`` first when ``refill`` (a graph's replay), else ``inputs``' own ``(total_k, hkv, d)``."""
    fill = kw.pop("fill", None)
    if fill is None:
        return inputs.k, inputs.v  # (total_k, hkv, d) each
    if refill:
        fill.fill(inputs.k, inputs.v)
    return fill.k_cache, fill.v_cache  # (pages, page_size, hkv, d) each


def padded_rows(x: torch.Tensor, rows: int) -> torch.Tensor:
    """A zero buffer ``(rows, ...)`` shaped like ``x``'s rows (the padded batch's queries; ``x``'s own rows are copied
    into its head inside the captured function)."""
    return x.new_zeros(rows, *x.shape[1:])  # (rows, hq, d)


class PreparedCall:
    """A backend whose call is ``_prepare(case, inputs, pad, graph)`` (host work, once: layouts, lengths, a plan) then
    ``_launch(case, inputs, prep, out, refill=...)`` (device work on ``inputs``' tensors; ``refill``: the keys copied
    into a prepared cache first). ``run`` is both; the graph calls prepare outside the captured function and launch
    inside it. ``_pads(case)``: the layout takes a padded batch (:meth:`.base.Backend.graph_padded_call`)."""

    def _pads(self, case) -> bool:
        return False

    def graph_call(self, case, inputs):
        prep = self._prepare(case, inputs, 0, True)  # type: ignore[attr-defined]
        return lambda out: self._launch(case, inputs, prep, out, refill=True)  # type: ignore[attr-defined]

    def graph_padded_call(self, case, inputs, pad):
        if not self._pads(case):
            return None
        prep = self._prepare(case, inputs, pad, True)  # type: ignore[attr-defined]
        return lambda out: self._launch(case, inputs, prep, out, refill=True)  # type: ignore[attr-defined]
