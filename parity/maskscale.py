"""The scaled mask probe's arithmetic: signed residue passes, what they read for a band, and back.

With ``q = 0`` every visible key weighs the same, so a row's output is ``(sum of V over its visible
keys) / l`` (``l``: their count, plus the sink's mass where the case has learned sinks). The full
probe (:mod:`parity.maskcheck`) spends one channel per key: ``Sk / d`` passes. The scaled probe
reads every row's band in a few passes whatever ``Sk``:

Signed residue pass, modulus ``m <= d``
    Key ``j`` carries ``V = (-1)^(j div m)`` in channel ``j mod m`` and 0 elsewhere. The keys of
    one channel alternate in sign, so a contiguous band sums to -1, 0 or +1 in each channel; with
    ``G(k)`` the 0/1 vector whose channel ``c`` is ``(k - 1 - c) mod 2m < m`` (the prefix sums),
    band ``a..x-1`` reads ``G(x) - G(a)`` (:func:`expected`). Read out by dividing each (head, row)
    by its largest ``|value|`` over all passes and rounding: exact in any dtype (the values of one
    row are 0 or ``+-1/l``), the sink and the scale drop out, a channel more than
    :data:`INTEGER_TOLERANCE` from an integer is non-uniform weight.

The moduli (:func:`moduli`): pairwise coprime, odd first (an even modulus ``m`` is blind to every
change of a band ``2m k`` keys long, and real windows are powers of two: 4096 keys), at least 3,
more until their product ``M`` exceeds ``Sk + d``. d 128: 127, 125, 123 (``M`` = 1952625);
d 64: 63, 61, 59; d 32 at 131072 keys: 31, 29, 27, 25.

What the readouts of band ``S = a..x-1`` and visible keys ``E`` (uniform weights) tell apart:

==============================================================  ==========================================
``E`` against ``S``                                               detected
==============================================================  ==========================================
one run of keys added or removed (one edge moved any distance,   always (missed only when the run's length
a hole, an extra run anywhere, ``E`` or ``S`` empty)             is a multiple of ``2M > Sk``)
both edges moved, each by fewer than ``min(m)`` keys             always (for ``M > Sk + min(m)``)
(a shift, a band wider or narrower on both sides)
both edges moved further, two bands                               unless every pass is blind: per modulus
                                                                  ``m`` (mod ``2m``) both edges moved by
                                                                  multiples of ``2m``, or both bands'
                                                                  lengths multiples of ``2m``, or
                                                                  ``a' = x + m`` and ``x' = a + m``
several runs, non-uniform weights                                 unless they cancel in every channel
==============================================================  ==========================================

``tests/test_maskscale.py`` checks the table exhaustively at small moduli. A shift by ``t`` of a band
of ``L`` keys is missed only if every modulus divides ``t`` or ``L`` twice over: with odd moduli never
for a power-of-two band, and never for ``|t| < min(m)``.

Describing a mismatch (only then): a **block pass** (key ``j`` carries 1 in channel ``j div B``,
``B = ceil(Sk / d)``) gives every row's first and last visible block; :func:`decode_bands` then finds
the bands that read as the row's residues inside those blocks (exact where one fits); **refining
passes** (:func:`refine_values`) split the first and last blocks of one row per sequence into ``d / 2``
parts each until its first and last visible keys are exact: ``log_{d/2}(Sk / d)`` passes (2 at 131072
keys and d 128).
"""

from __future__ import annotations

import math

import torch

#: A readout channel farther than this from an integer (after dividing by the row's largest) is
#: non-uniform weight; honest kernels stay within ~2^-8 (bfloat16 partial outputs merged).
INTEGER_TOLERANCE = 0.25
#: At least this many residue passes (more where the moduli's product needs them).
MIN_RESIDUE_PASSES = 3
#: Candidate starts (and ends) of a band tried per row by :func:`decode_bands`.
MAX_CANDIDATES = 16
#: Band decoding statuses.
EXACT, NO_BAND, AMBIGUOUS = 0, 1, 2


def moduli(head_dim: int, max_sk: int) -> tuple[int, ...]:
    """Pairwise coprime moduli ``<= head_dim`` for the residue passes, largest odd ones first, then one
    even: at least :data:`MIN_RESIDUE_PASSES`, more until their product exceeds ``max_sk + head_dim``.
    Fewer where ``head_dim`` has no more (d < 8: the product may stay below ``Sk``: :func:`covered`)."""
    odd = [m for m in range(head_dim - (1 - head_dim % 2), 2, -2)]
    even = [m for m in range(head_dim - head_dim % 2, 1, -2)]
    chosen: list[int] = []
    for m in odd + even:
        if len(chosen) >= MIN_RESIDUE_PASSES and math.prod(chosen) > max_sk + head_dim:
            break
        if all(math.gcd(m, c) == 1 for c in chosen):
            chosen.append(m)
    return tuple(chosen)


def covered(mods: tuple[int, ...], max_sk: int) -> bool:
    """Whether the table of the module docstring holds up to ``max_sk`` keys (product > Sk + min(m))."""
    return bool(mods) and math.prod(mods) > max_sk + min(mods)


def residue_values(m: int, sk: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Pass ``m`` for one sequence of ``sk`` keys: each key's channel and sign ``(Sk,)`` each."""
    j = torch.arange(sk)  # (Sk,)
    return j % m, 1 - 2 * ((j // m) % 2)


def block_values(sk: int, d: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    """The block pass for one sequence: key ``j`` -> channel ``j div B`` (sign +1), and ``B``."""
    b = -(-sk // d)
    j = torch.arange(sk)  # (Sk,)
    return j // b, torch.ones(sk, dtype=torch.long), b


def state(k: torch.Tensor, m: int) -> torch.Tensor:
    """``G(k)`` of the module docstring: ``(..., m)`` int8 from positions ``k`` ``(...)``."""
    c = torch.arange(m, device=k.device)  # (m,)
    return (torch.remainder(k[..., None] - 1 - c, 2 * m) < m).to(torch.int8)  # (..., m)


def expected(lo: torch.Tensor, hi: torch.Tensor, m: int) -> torch.Tensor:
    """What band ``lo..hi`` ``(n,)`` reads in pass ``m``: ``(n, m)`` int8, 0 for an empty band."""
    e = state(hi + 1, m) - state(lo, m)  # (n, m)
    return torch.where((lo <= hi)[:, None], e, torch.zeros_like(e))


def runs(mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per row of ``mask`` ``(n, m)``: count, first and last set channel, and whether they are one run."""
    m = mask.shape[1]
    cnt = mask.sum(1)  # (n,)
    first = mask.int().argmax(1)  # (n,)
    last = m - 1 - mask.flip(1).int().argmax(1)  # (n,)
    return cnt, first, last, (cnt > 0) & (last - first + 1 == cnt)


def band_pairs(r: torch.Tensor, m: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The ``(x, a) mod 2m`` that read as ``r`` ``(n, m)`` in pass ``m``, for a band ``a..x-1``.

    A readout is ``G(x) - G(a)``, both prefixes ``[0, k)`` or suffixes ``[k - m, m)`` of the channels:

    ======================================  ==========================================
    readout                                  ``(x, a)``, two ways (the second: its complement)
    ======================================  ==========================================
    all 0                                    ``x = a`` (any)
    +1 on ``[u, v)`` only                    ``(v, u)``, ``(m + u, m + v)``
    -1 on ``[u, v)`` only                    ``(u, v)``, ``(m + v, m + u)``
    +1 on ``[0, u)``, -1 on ``[v, m)``       ``(u, m + v)``, ``(v, m + u)``
    -1 on ``[0, u)``, +1 on ``[v, m)``       ``(m + v, u)``, ``(m + u, v)``
    anything else                            none: not one band
    ======================================  ==========================================

    Returns ``pairs`` ``(n, 2, 2)`` (``[way, (x, a)]`` mod ``2m``), ``zero`` and ``valid`` ``(n,)``."""
    pos_n, pos_f, pos_l, pos_run = runs(r > 0)
    neg_n, neg_f, neg_l, neg_run = runs(r < 0)
    zero = (pos_n == 0) & (neg_n == 0)
    only_pos = pos_run & (neg_n == 0)
    only_neg = neg_run & (pos_n == 0)
    pos_neg = pos_run & neg_run & (pos_f == 0) & (neg_l == m - 1) & (pos_l < neg_f)
    neg_pos = pos_run & neg_run & (neg_f == 0) & (pos_l == m - 1) & (neg_l < pos_f)
    u = torch.where(only_pos, pos_f, torch.where(only_neg, neg_f, torch.where(pos_neg, pos_l + 1, neg_l + 1)))  # (n,)
    v = torch.where(only_pos, pos_l + 1, torch.where(only_neg, neg_l + 1, torch.where(pos_neg, neg_f, pos_f)))  # (n,)
    ways = [
        (only_pos, (v, u), (m + u, m + v)),
        (only_neg, (u, v), (m + v, m + u)),
        (pos_neg, (u, m + v), (v, m + u)),
        (neg_pos, (m + v, u), (m + u, v)),
    ]
    pairs = torch.zeros(r.shape[0], 2, 2, dtype=torch.long, device=r.device)  # (n, way, (x, a))
    for sel, one, two in ways:
        new = torch.stack([torch.stack(one, -1), torch.stack(two, -1)], 1)  # (n, 2, 2)
        pairs = torch.where(sel[:, None, None], new, pairs)
    return torch.remainder(pairs, 2 * m), zero, zero | only_pos | only_neg | pos_neg | neg_pos


def readout_unit(raw: torch.Tensor, spec_keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The value of one key in each pair's residue readouts ``raw`` ``(R, n, d)`` (``1 / l``) and whether its
    weights are not uniform (``(n,)`` each); ``spec_keys``: the keys (and sink mass) the spec gives each row ``(n,)``:

    ====================================================  ======================================  ===========
    readouts                                              one key's value                         uniform
    ====================================================  ======================================  ===========
    integers over their largest (a band: -1, 0, +1)       the largest                             yes
    else integers over their smallest, which is within    the smallest (keys not one band: a      yes
    1/4 of ``1 / spec_keys`` (or the spec has none)       channel reads 2 or more)
    else                                                  the largest                             no
    ====================================================  ======================================  ===========

    A key of half weight reads as half a unit: over the smallest readout all are integers, but that unit
    is twice the spec's; a key weighing within 1/4 of the others may read as keys not one band."""
    top = raw.abs().amax(-1).amax(0)  # (n,)
    small = torch.where(raw.abs() > top[None, :, None] / 16, raw.abs(), math.inf).amin(-1).amin(0)  # (n,)
    small = torch.where(torch.isfinite(small), small, top)

    def integer(unit: torch.Tensor) -> torch.Tensor:
        r = raw / torch.where(unit > 0, unit, 1.0)[None, :, None]
        return ((r - r.round()).abs() <= INTEGER_TOLERANCE).all(-1).all(0)  # (n,)

    near = (spec_keys <= 0) | ((small * spec_keys - 1).abs() <= 0.25)
    by_small = ~integer(top) & integer(small) & near
    return torch.where(by_small, small, top), ~integer(top) & ~by_small


def _candidates(lo: torch.Tensor, size: int, fits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The first :data:`MAX_CANDIDATES` positions ``lo + o`` (``o < size``) where ``fits`` ``(n, size)``
    holds: positions ``(n, K)``, valid ``(n, K)``, and rows with more than K such (ambiguous) flagged by K+1 valid."""
    k = min(MAX_CANDIDATES, size)
    order = torch.where(fits, torch.arange(size, device=fits.device), size)  # (n, size): offset, or size where it does not fit
    off = order.sort(1).values[:, : k + 1 if size > k else k]  # (n, <=K+1)
    return lo[:, None] + off, off < size


#: Rows decoded at once by :func:`decode_bands` (its largest temporary: rows x 17 x 17 x m int8).
DECODE_ROWS = 512


def decode_bands(
    readouts: list[torch.Tensor], mods: tuple[int, ...], a_lo: torch.Tensor, x_lo: torch.Tensor, size: int, sk: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The bands ``a..x-1`` of ``0..sk-1`` that read as ``readouts`` (one ``(n, m)`` int8 per modulus) with
    ``a`` in ``a_lo .. a_lo + size - 1`` and ``x`` in ``x_lo + 1 .. x_lo + size`` (``(n,)`` each; the blocks of
    the row's first and last visible key). Returns ``a``, ``x`` and a status ``(n,)``: :data:`EXACT` (one band
    fits), :data:`NO_BAND` (none: the visible keys are not one band), :data:`AMBIGUOUS` (several)."""
    parts = [
        _decode_rows([r[i : i + DECODE_ROWS] for r in readouts], mods, a_lo[i : i + DECODE_ROWS], x_lo[i : i + DECODE_ROWS], size, sk)
        for i in range(0, a_lo.shape[0], DECODE_ROWS)
    ]
    if not parts:
        empty = torch.zeros(0, dtype=torch.long, device=a_lo.device)
        return empty, empty, empty
    a, x, status = zip(*parts)
    return torch.cat(a), torch.cat(x), torch.cat(status)


def _decode_rows(
    readouts: list[torch.Tensor], mods: tuple[int, ...], a_lo: torch.Tensor, x_lo: torch.Tensor, size: int, sk: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`decode_bands` for at most :data:`DECODE_ROWS` rows."""
    n, dev = a_lo.shape[0], a_lo.device
    offs = torch.arange(size, device=dev)  # (size,)
    a_pos, x_pos = a_lo[:, None] + offs, x_lo[:, None] + 1 + offs  # (n, size) each
    a_fit, x_fit = a_pos < sk, x_pos <= sk  # (n, size) each
    valid = torch.ones(n, dtype=torch.bool, device=dev)
    for r, m in zip(readouts, mods):
        pairs, zero, ok = band_pairs(r, m)  # (n, 2, 2), (n,), (n,)
        valid &= ok
        a_res, x_res = torch.remainder(a_pos, 2 * m), torch.remainder(x_pos, 2 * m)  # (n, size)
        a_fit &= zero[:, None] | (a_res[..., None] == pairs[:, None, :, 1]).any(-1)
        x_fit &= zero[:, None] | (x_res[..., None] == pairs[:, None, :, 0]).any(-1)
    a_c, a_ok = _candidates(a_lo, size, a_fit)  # (n, K[+1]) each
    x_c, x_ok = _candidates(x_lo + 1, size, x_fit)
    match = a_ok[:, :, None] & x_ok[:, None, :] & (a_c[:, :, None] < x_c[:, None, :])  # (n, Ka, Kx)
    for r, m in zip(readouts, mods):
        read = state(x_c, m)[:, None, :, :] - state(a_c, m)[:, :, None, :]  # (n, Ka, Kx, m)
        match &= (read == r[:, None, None, :]).all(-1)
    match &= valid[:, None, None]
    count = match.flatten(1).sum(1)  # (n,)
    at = match.flatten(1).int().argmax(1)  # (n,)
    a = a_c.gather(1, (at // x_c.shape[1])[:, None])[:, 0]
    x = x_c.gather(1, (at % x_c.shape[1])[:, None])[:, 0]
    crowded = a_ok.all(1) & (a_ok.shape[1] > MAX_CANDIDATES) | x_ok.all(1) & (x_ok.shape[1] > MAX_CANDIDATES)
    status = torch.where(count == 1, EXACT, torch.where(count == 0, NO_BAND, AMBIGUOUS))
    status = torch.where(crowded, AMBIGUOUS, status)  # a band past the candidates tried may fit too
    return a, x, status


def refine_values(
    sk: int, d: int, f: tuple[int, int], last: tuple[int, int]
) -> tuple[torch.Tensor, torch.Tensor, tuple[int, int], tuple[int, int]]:
    """A refining pass for one sequence: the keys of interval ``f = (start, size)`` (where the first visible
    key is) and ``last`` (where the last one is) split into parts of one channel each, ``d // 2`` parts
    each (``d`` parts of one interval where both are the same); other keys carry nothing (channel -1).
    Returns each key's channel and sign ``(Sk,)`` and the part sizes and first channels of ``f`` and ``last``."""
    ch = torch.full((sk,), -1, dtype=torch.long)
    if f == last:
        part = -(-f[1] // d)
        ch[f[0] : f[0] + f[1]] = torch.arange(f[1]) // part
        return ch, torch.ones(sk, dtype=torch.long), (part, 0), (part, 0)
    half = d // 2
    pf, pl = -(-f[1] // half), -(-last[1] // (d - half))
    ch[f[0] : f[0] + f[1]] = torch.arange(f[1]) // pf
    ch[last[0] : last[0] + last[1]] = half + torch.arange(last[1]) // pl
    return ch, torch.ones(sk, dtype=torch.long), (pf, 0), (pl, half)


def narrow(interval: tuple[int, int], part: tuple[int, int], seen: torch.Tensor, first: bool) -> tuple[int, int] | None:
    """The part of ``interval`` ``(start, size)`` holding the first (``first``) or last visible key, from
    the refining pass's visible channels ``seen`` ``(d,)`` bool (``part``: part size, first channel); None
    where no part of it is visible."""
    size, c0 = part
    nparts = -(-interval[1] // size)
    idx = seen[c0 : c0 + nparts].nonzero().flatten()
    if idx.numel() == 0:
        return None
    k = int(idx[0] if first else idx[-1])
    start = interval[0] + k * size
    return start, min(size, interval[0] + interval[1] - start)
