"""Exact checks of which keys, and which kv head, a backend actually used.

Independent of rounding, so a window one token too wide is caught even where the
extra key carries too little weight for any error budget to notice.

Mask probe
    ``q = 0`` makes every score 0 (also after a tanh softcap), so softmax is uniform
    over the visible keys whatever the scale. ``V`` is one-hot per key: in pass ``p``
    key ``j`` of each sequence carries ``e_(j - p*d)`` when ``p*d <= j < (p+1)*d`` and 0
    otherwise. Output element ``[row i, dim c]`` of pass ``p`` is ``1/n_i`` when key
    ``p*d + c`` is visible to row ``i`` and 0 when it is not. ``ceil(max Sk / d)`` passes
    reveal the whole effective mask, per query head.

    The passes are batched: one backend call covers several passes by repeating the
    case's sequences once per pass (pass-major: block ``t`` of the batch is the case's
    own packing, carrying pass ``p0 + t``), with at most :data:`PROBE_CALL_ELEMENTS`
    score elements per call. Only the batch size differs from the case; sequence
    lengths, heads, window, scale, softcap and page size are the case's. A backend that
    declines or fails the batched call is probed one pass per call, at the case's own
    shape (``batch_passes=False`` forces that).

Scaled mask probe (when the full probe needs more than ``max_passes`` passes)
    The same ``q = 0``, with signed residue ``V`` (:mod:`parity.maskscale`): 3 to 5 passes whatever
    ``Sk``, batched as the full probe's (one call for a decode over 131072 keys), compared per
    (head, row) with what the spec's band reads. Every extra or missing run of keys shows, and every
    edge move of fewer than ``min(m)`` keys (about ``d``); its docstring has the table of what may
    escape. Where a pair differs, a block pass and ``log_{d/2}(Sk / d)`` refining passes locate the
    first differing row's first and last visible key per sequence, and the other differing rows are
    decoded to their band from the residues. ``ProbeResult.probe`` (``mask_probe`` in results.csv)
    says which probe ran: ``full`` or ``scaled``.

GQA probe
    ``V`` of kv head ``g`` is the constant ``g + 1``; query head ``h`` must output
    ``h // (hq // hkv) + 1`` in every row that sees a key (learned sinks, if the case has them,
    are set to :data:`NEUTRAL_SINK` for it). The mask probe keeps the case's sinks: they lower
    the weight of every visible key of a row alike. ``q = 0`` as in the mask probe: with ``V``
    constant per kv head the output is that constant whatever the weights, so ``Q`` (and ``K``)
    cannot change what the probe reads; zero scores make every weight equal, so the output is
    the constant up to the rounding of ``1/n`` (a kernel that rounds ``P`` to bfloat16 before
    ``P @ V`` is within an ulp of it). The probe sees which kv head's ``V`` a query head reads;
    a slip in ``K``'s head mapping alone is invisible to it (the error budget sees it). A row
    value is read as an integer within :func:`gqa_tolerance` (two ulps of the output's dtype).

Read probe (paged cases, and padded caches with used lengths)
    The case's own inputs, with the cache as a real engine holds it: paged
    (:func:`parity.case.poison_paged`): NaN in pages wholly outside every window of their
    sequence, in the unused tail of each last page, and in the null page that every unused
    (padding) block-table slot points at, as an engine points them at a null block;
    padded (:func:`parity.case.poison_padded`, backends whose ``padded_kv(case)`` is true):
    NaN in the slots past each sequence's used length. A kernel that reads only what it needs
    outputs finite values; one that loads a poisoned position and multiplies it by a zero
    probability outputs NaN there (``NaN x 0 = NaN``). Contiguous keys of a sequence stay
    finite (a dense kernel may read every key of its tensor): ``n/a``.

    Which part reached the output is told by two more calls, made only when a paged probe
    turns some pair NaN: one with NaN in the null page alone, one with NaN in the pages outside
    the window and the tails alone (the other part holds zeros, as in the case's run). A pair
    NaN in the first "read a padding slot"; in the second, "read pages outside the window"; a
    kernel may do both. The poison value itself cannot tell them apart (``inf x 0`` is NaN too).
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Callable
from typing import Any

import torch

from . import maskscale
from .case import POISON_PARTS, Case, Inputs, make_inputs, padded_capacity, pages_seen
from .verdict import POISON

#: A key counts as visible when its weight exceeds this fraction of the row's largest.
VISIBLE_FRACTION = 2.0**-20
#: Weights between VISIBLE_FRACTION and this fraction of the row's largest are "partial".
UNIFORM_FRACTION = 0.5
DEFAULT_MAX_PASSES = 64
#: The GQA probe's sink logit (cases with sinks): exp(-30000) is 0 in float32, so the probe reads
#: the kv head alone; finite, so a kernel that subtracts it from a running max stays finite.
NEUTRAL_SINK = -30000.0
#: Score elements (query heads x sum of Sq*Sk over the batch) one batched probe call may cover.
PROBE_CALL_ELEMENTS = 1 << 26
#: Differing (head, row) pairs per sequence whose pattern is described (all are counted).
MAX_DESCRIBED_ROWS = 4096
#: Probes of at most this many (head, row, key) weights are decoded on the CPU.
CPU_DECODE_ELEMENTS = 1 << 23
#: Probes of more (head, row, key) weights than this are decoded pass by pass (:class:`MaskStream`):
#: memory grows with one pass's output, never with ``hq x Sq x Sk``.
STREAM_ELEMENTS = 1 << 24


@dataclasses.dataclass
class ProbeResult:
    status: str  # "ok" | "mismatch" | "not_run" | "n/a"
    detail: str
    differing_rows: int = 0
    rows: int = 0
    # First mismatching (sequence, head) drawn for reports: rows of "1"/"0"/"p" strings.
    image: dict[str, Any] | None = None
    probe: str = ""  # which mask probe ran: "full" (one-hot, Sk / d passes) or "scaled" (signed residues); "" for others

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


#: Runs the backend on ``inputs`` (of case ``inputs.case``) and returns its packed output.
RunFn = Callable[[Inputs], torch.Tensor]


def mask_passes(case: Case) -> int:
    """The full probe's passes: ``ceil(max Sk / d)``."""
    return math.ceil(max(case.k_lens) / case.head_dim)


def mask_plan(case: Case, max_passes: int = DEFAULT_MAX_PASSES) -> tuple[str, int]:
    """Which mask probe runs on ``case`` and its passes (before any describing a mismatch):

    ==========================================  ==========  ================================
    case                                        probe       passes
    ==========================================  ==========  ================================
    ``ceil(max Sk / d) <= max_passes``          ``full``    ``ceil(max Sk / d)``
    else, ``d >= 4``                            ``scaled``  its moduli (:func:`parity.maskscale.moduli`)
    else                                        ``not_run`` ``ceil(max Sk / d)``
    ==========================================  ==========  ================================
    """
    passes = mask_passes(case)
    if passes <= max_passes:
        return "full", passes
    if case.head_dim < 4:  # the refining passes split an edge's block into d / 2 parts
        return "not_run", passes
    return "scaled", len(maskscale.moduli(case.head_dim, max(case.k_lens)))


def mask_passes_at_most(case: Case, max_passes: int = DEFAULT_MAX_PASSES) -> int:
    """The mask probe's passes on ``case`` where it finds a mismatch (the work of as many forwards): the full
    probe's; the scaled probe's residue passes, its block pass and its refining passes (0 where none runs)."""
    kind, passes = mask_plan(case, max_passes)
    if kind != "scaled":
        return passes if kind == "full" else 0
    block = -(-max(case.k_lens) // case.head_dim)
    return passes + 1 + max(1, math.ceil(math.log(block) / math.log(case.head_dim // 2))) if block > 1 else passes + 1


def probe_case(case: Case, copies: int) -> Case:
    """``case`` with its sequences repeated ``copies`` times (the batched probe's case)."""
    if copies == 1:
        return case
    return dataclasses.replace(case, q_lens=case.q_lens * copies, k_lens=case.k_lens * copies)


def passes_per_call(case: Case, limit: int = PROBE_CALL_ELEMENTS, passes: int | None = None) -> int:
    """How many mask-probe passes one batched call covers (at least 1); ``passes``: the probe's
    (default: the full probe's, :func:`mask_passes`)."""
    per_pass = case.hq * sum(sq * sk for sq, sk in zip(case.q_lens, case.k_lens))
    return max(1, min(mask_passes(case) if passes is None else passes, limit // max(per_pass, 1)))


def probe_call_case(case: Case, max_passes: int = DEFAULT_MAX_PASSES) -> Case:
    """The case of the mask probe's largest batched call (``case`` itself where it runs one pass per call)."""
    kind, passes = mask_plan(case, max_passes)
    return case if kind == "not_run" else probe_case(case, passes_per_call(case, passes=passes))


def mask_probe_inputs(case: Case, p: int, device: torch.device | str = "cpu", base: Inputs | None = None, n: int = 1) -> Inputs:
    """Passes ``p .. p+n-1`` of the mask probe in one batch (see the module docstring).

    ``base``: the case's inputs (on any device), if already made; the probe is built on
    its device, then moved to ``device``. ``n = 1`` is the case's own shape.
    """
    base = base if base is not None else make_inputs(case, "cpu")
    dev = base.q.device
    v = torch.zeros((n * base.v.shape[0], *base.v.shape[1:]), dtype=base.v.dtype, device=dev)  # (n*total_k, hkv, d)
    _, ck = case.cu_seqlens()
    rows, dims = [], []
    for t in range(n):
        for b, sk in enumerate(case.k_lens):
            j0, j1 = (p + t) * case.head_dim, min(sk, (p + t + 1) * case.head_dim)
            if j1 > j0:
                off = t * ck[-1] + ck[b]
                rows.append(torch.arange(off + j0, off + j1))  # packed key positions
                dims.append(torch.arange(j1 - j0))  # key j -> one-hot dim j - (p+t)*d
    if rows:
        v[torch.cat(rows).to(dev), :, torch.cat(dims).to(dev)] = 1
    return _batched_inputs(case, base, n, v, device)


def _batched_inputs(case: Case, base: Inputs, n: int, v: torch.Tensor, device: torch.device | str) -> Inputs:
    """A probe of ``n`` passes in one batch: ``q = 0``, the case's keys repeated ``n`` times, ``v``
    ``(n*total_k, hkv, d)`` (on ``base``'s device), the case's sinks and descales (V's: 1)."""
    dev = base.q.device
    pc = probe_case(case, n)
    q = torch.zeros((n * base.q.shape[0], *base.q.shape[1:]), dtype=base.q.dtype, device=dev)  # (n*total_q, hq, d)
    k = base.k.repeat(n, 1, 1) if n > 1 else base.k  # (n*total_k, hkv, d)
    cq, ck = pc.cu_seqlens()
    probe = Inputs(
        pc,
        q,
        k,
        v,
        torch.tensor(cq, dtype=torch.int32, device=dev),
        torch.tensor(ck, dtype=torch.int32, device=dev),
        q_descale=_tile(base.q_descale, n),  # per-sequence descales (B, hkv): one row per sequence of the batch
        k_descale=_tile(base.k_descale, n),
        v_descale=_unit(_tile(base.v_descale, n)),  # fp8 V: the probe's values (0, +-1) are exact, their descale 1
        sinks=base.sinks,  # a sink lowers every visible key's weight alike: the softmax stays uniform over them
    )
    return probe if str(device) == str(dev) else probe.to(device)


#: One pass of the scaled probe: per key of the packed case its channel (-1: none) and sign, ``(total_k,)`` each.
PassValues = tuple[torch.Tensor, torch.Tensor]


def values_inputs(case: Case, base: Inputs, passes: list[PassValues], device: torch.device | str = "cpu") -> Inputs:
    """``passes`` of the scaled probe in one batch (the case's sequences repeated once per pass, as
    :func:`mask_probe_inputs`): key ``j`` of pass ``t`` carries its sign in its channel, in every kv head."""
    n, (tk, hkv, _) = len(passes), base.v.shape
    dev = base.q.device
    build = torch.float16 if base.v_descale is not None else base.v.dtype  # fp8: 0, +-1 made in float16, cast exactly
    v = torch.zeros((n * tk, *base.v.shape[1:]), dtype=build, device=dev)  # (n*total_k, hkv, d)
    for t, (ch, sign) in enumerate(passes):
        keep = (ch >= 0).nonzero().flatten()  # (keys,)
        v[(t * tk + keep).to(dev), :, ch[keep].to(dev)] = sign[keep].to(dev, build)[:, None].expand(-1, hkv)
    return _batched_inputs(case, base, n, v.to(base.v.dtype), device)


def _tile(descale: torch.Tensor | None, n: int) -> torch.Tensor | None:
    """A descale of the case's batch for its sequences repeated ``n`` times: per-sequence ``(B, hkv)`` ones
    repeated to ``(n*B, hkv)``; others (``()``, ``(hkv,)``, None) as they are."""
    return descale.repeat(n, 1) if descale is not None and descale.dim() == 2 else descale


def _unit(descale: torch.Tensor | None) -> torch.Tensor | None:
    """A probe's V descale: 1 where the case's V is fp8 (its probe values are exact fp8 numbers), else None."""
    return None if descale is None else torch.ones_like(descale)


def gqa_probe_inputs(case: Case, device: torch.device | str = "cpu", base: Inputs | None = None) -> Inputs:
    """The GQA probe (module docstring): ``q = 0``, the case's ``K``, ``V`` of kv head ``g`` the constant ``g + 1``."""
    base = base if base is not None else make_inputs(case, "cpu")
    heads = (torch.arange(case.hkv, device=base.v.device, dtype=torch.float32) + 1).to(base.v.dtype)  # (hkv,); exact in fp8 up to 16
    v = heads[None, :, None].expand_as(base.v).contiguous()  # (total_k, hkv, d)
    # q = 0 in every dtype: V is constant per kv head, so the output is V's value whatever the weights and Q
    # cannot change which head the probe reads; zero scores make every weight exp(0), equal (exact in fp8), so
    # the output is V's value up to the rounding of 1/n. With the case's Q a kernel that rounds P to bfloat16
    # before P @ V (JAX XLA, h100 models run 2026-12-07) read 13 as 12.94, one ulp ("a mix of kv heads").
    q = torch.zeros_like(base.q)  # (total_q, hq, d)
    probe = dataclasses.replace(base.with_tensors(q, base.k, v), v_descale=_unit(base.v_descale))
    if base.sinks is not None:  # a sink would scale each head's constant by its own weight: out of the way
        probe = dataclasses.replace(probe, sinks=torch.full_like(base.sinks, NEUTRAL_SINK))  # (hq,)
    return probe if str(device) == str(base.q.device) else probe.to(device)


def key_ranges(keys: list[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``'0..2, 5'``; ``[]`` -> ``'none'``. Repro scripts embed it."""
    if not keys:
        return "none"
    parts, start, prev = [], keys[0], keys[0]
    for j in keys[1:]:
        if j != prev + 1:
            parts.append(f"{start}..{prev}" if prev != start else f"{start}")
            start = j
        prev = j
    parts.append(f"{start}..{prev}" if prev != start else f"{start}")
    return ", ".join(parts)


def _tokens(n: int) -> str:
    words = {1: "one token", 2: "two tokens", 3: "three tokens"}
    return words.get(n, f"{n} tokens")


def _pattern(e_lo: int, e_hi: int, n: int, spec_lo: int, spec_hi: int, sk: int) -> str:
    """A short phrase for how one row's effective keys differ from its spec band ``spec_lo..spec_hi``.

    The row is described by its first and last visible key ``e_lo``, ``e_hi`` and their count ``n``.
    """
    spec_empty = spec_lo > spec_hi
    if n == 0:
        return "row sees no key" if not spec_empty else "same"
    contiguous = e_hi - e_lo + 1 == n
    if spec_empty:
        return "row should see no key but sees " + ("every key" if n == sk else "some")
    if not contiguous:
        return "visible keys are not one band"
    dl, dr = spec_lo - e_lo, e_hi - spec_hi  # > 0: sees more on that side
    if e_lo == 0 and e_hi == sk - 1 and dl + dr > 1:
        return "row sees every key: window ignored"
    if dl != 0 and dr != 0 and dl == -dr:
        side = "left" if dl > 0 else "right"
        return f"band shifted {_tokens(abs(dl))} to the {side} (alignment slip?)"
    bits = []
    if dl:
        bits.append(f"{_tokens(abs(dl))} {'wider' if dl > 0 else 'narrower'} on the left")
    if dr:
        bits.append(f"{_tokens(abs(dr))} {'wider' if dr > 0 else 'narrower'} on the right")
    return "window is " + " and ".join(bits)


def _image(spec: torch.Tensor, eff: torch.Tensor, partial: torch.Tensor, shape: tuple[int, int] | None = None) -> dict[str, Any]:
    """Compact drawing of spec vs effective mask: '1' both, '+' extra, '-' missing, 'p' partial.
    ``shape``: the whole mask's ``(Sq, Sk)`` when the tensors are only its drawn corner."""
    sq, sk = shape or spec.shape
    s, e, pp = spec[:128, :256], eff[:128, :256], partial[:128, :256]  # (<=128, <=256) bool each
    chars = torch.full(s.shape, ord("."), dtype=torch.uint8)
    chars[s & ~e] = ord("-")
    chars[e & ~s] = ord("+")
    chars[s & e] = ord("1")
    chars[pp] = ord("p")
    rows = [bytes(r).decode("ascii") for r in chars.tolist()]
    return {"rows": rows, "sq": sq, "sk": sk, "legend": "1 seen as spec, + extra key, - missing key, p partial weight, . masked"}


def decode_mask(case: Case, outputs: list[torch.Tensor]) -> ProbeResult:
    """Turn the probe outputs (one per pass, packed ``(total_q, hq, d)``) into a verdict."""
    cq, _ = case.cu_seqlens()
    total_rows, bad_rows = 0, 0
    patterns: Counter[str] = Counter()
    first: str | None = None
    image = None
    # float32 (probe weights are 1/n or 0, held exactly enough); decoded on the CPU when
    # small (one copy instead of many small synchronising kernels on a shared GPU), else
    # on the backend's device
    small = case.hq * sum(sq * sk for sq, sk in zip(case.q_lens, case.k_lens)) <= CPU_DECODE_ELEMENTS
    outs = [o.detach().to("cpu" if small else o.device, torch.float32) for o in outputs]
    dev = outs[0].device
    # (total_q, hq): (row, head) pairs some probe call left with poison in the buffer (compared in the
    # output's own dtype): not judged, so an unwritten row is never described as a window error
    unwritten = torch.stack([(o.detach() == POISON).any(-1).to(dev) for o in outputs]).any(0)
    skipped = 0
    for b, (sq, sk) in enumerate(zip(case.q_lens, case.k_lens)):
        spec = case.mask(sq, sk).to(dev)  # (Sq, Sk)
        lo, hi = case.band(sq, sk)
        # weights[h, i, j]: what row i of head h gave key j
        w = torch.cat([o[cq[b] : cq[b + 1]] for o in outs], dim=-1)[..., :sk]  # (Sq, hq, Sk)
        w = w.permute(1, 0, 2)  # (hq, Sq, Sk)
        u = unwritten[cq[b] : cq[b + 1]].T  # (hq, Sq)
        skipped += int(u.sum())
        if not torch.isfinite(w[~u]).all():
            bad = int(((~torch.isfinite(w)).any(-1) & ~u).sum())
            return ProbeResult(
                "mismatch",
                f"mask probe output has NaN/Inf in {bad} (head, row) pairs of seq {b}",
                bad,
                sq * case.hq,
            )
        rowmax = w.abs().amax(dim=-1, keepdim=True)  # (hq, Sq, 1)
        eff = w.abs() > rowmax * VISIBLE_FRACTION  # (hq, Sq, Sk)
        eff &= rowmax > 0
        eff = torch.where(u[..., None], spec[None], eff)  # unwritten pairs: drawn as the spec, not judged
        partial = eff & (w.abs() < rowmax * UNIFORM_FRACTION) & ~u[..., None]  # (hq, Sq, Sk)
        diff = (eff != spec[None]) | partial  # (hq, Sq, Sk)
        row_bad = diff.any(dim=-1)  # (hq, Sq)
        total_rows += sq * case.hq - int(u.sum())
        n_bad = int(row_bad.sum())
        bad_rows += n_bad
        if not n_bad:
            continue
        hs, rs = row_bad.nonzero()[:MAX_DESCRIBED_ROWS].unbind(1)  # (n,), (n,) in (head, row) order
        patterns.update(_row_patterns(eff[hs, rs], partial[hs, rs], lo.to(dev)[rs], hi.to(dev)[rs], sk))
        if first is None:
            h, i = int(hs[0]), int(rs[0])
            keys = eff[h, i].nonzero().flatten().tolist()
            pk = partial[h, i].nonzero().flatten().tolist()
            lo_i, hi_i = int(lo[i]), int(hi[i])
            spec_txt = f"{lo_i}..{hi_i}" if lo_i <= hi_i else "none"
            extra = f" (partial weight on {key_ranges(pk)})" if pk else ""
            first = f"seq {b} head {h} row {i} sees keys {key_ranges(keys)}{extra}, spec says {spec_txt}"
            image = {"seq": b, "head": h, **_image(spec.cpu(), eff[h].cpu(), partial[h].cpu())}
    return _mask_verdict(total_rows, bad_rows, skipped, patterns, first, image)


def _row_patterns(e: torch.Tensor, partial: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor, sk: int) -> Counter[str]:
    """Phrases for differing rows ``e`` ``(n, Sk)`` (their partial-weight keys, spec bounds ``(n,)``):
    each row is named by (first key, last key, key count, partial?), one phrase per distinct tuple,
    not a Python pass over every row's keys; counted in row order."""
    cnt = e.sum(-1)  # (n,)
    first_k = torch.where(cnt > 0, e.int().argmax(-1), -1)  # (n,)
    last_k = torch.where(cnt > 0, sk - 1 - e.flip(-1).int().argmax(-1), -1)  # (n,)
    sig = torch.stack([lo, hi, first_k, last_k, cnt, partial.any(-1).long()], 1)  # (n, 6)
    uniq, inv, counts = sig.cpu().unique(dim=0, return_inverse=True, return_counts=True)
    first_at = torch.full((len(uniq),), len(inv), dtype=torch.long).scatter_reduce(
        0, inv, torch.arange(len(inv)), "amin"
    )  # (u,): where each tuple first occurs, so patterns are counted in row order (ties in row order)
    out: Counter[str] = Counter()
    for (lo_i, hi_i, f_k, l_k, c, pp), n in zip(uniq[first_at.argsort()].tolist(), counts[first_at.argsort()].tolist()):
        pat = "keys get partial weight (non-uniform softmax over visible keys)" if pp else _pattern(f_k, l_k, c, lo_i, hi_i, sk)
        out[pat] += n
    return out


def _mask_verdict(total_rows: int, bad_rows: int, skipped: int, patterns: Counter[str], first: str | None, image) -> ProbeResult:
    """The mask probe's result and words from its counts (unwritten pairs are not judged)."""
    if total_rows == 0:
        return ProbeResult("n/a", f"output not written: none of the {skipped} (head, row) pairs to judge")
    note = f" ({skipped} unwritten (head, row) pairs not judged)" if skipped else ""
    if bad_rows == 0:
        return ProbeResult(
            "ok",
            f"all {total_rows} written (head, row) pairs see exactly the spec's keys{note}"
            if skipped
            else f"all {total_rows} (head, row) pairs see exactly the spec's keys",
            0,
            total_rows,
        )
    common = "; ".join(f"{n} x {p}" for p, n in patterns.most_common(3))
    head = patterns.most_common(1)[0][0]
    detail = f"{head}: {bad_rows} of {total_rows} (head, row) pairs differ{note} [{common}]. First: {first}"
    return ProbeResult("mismatch", detail, bad_rows, total_rows, image)


#: Elements of the GQA probe's output checked at once on its device (:func:`_gqa_all_ok`; float32: 64 MiB).
GQA_CHUNK_ELEMENTS = 1 << 24
#: The GQA probe's tolerance around an integer: at least this (float32 outputs) ...
GQA_MIN_TOLERANCE = 0.05
#: ... and at most this: below 0.5, so a value is never as near one head as the next, and a half-and-half mix stays a
#: mix (on the bf16 / fp16 grids any cap in [0.25, 0.5) reads alike: where 2 ulps reach 0.5, one ulp is 0.25).
GQA_MAX_TOLERANCE = 0.25


def gqa_tolerance(k: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """How far a GQA probe value may lie from the integer ``k`` (a tensor, float) and still read as ``k``:
    ``max(0.05, 2 ulp of dtype at k)``, at most 0.25 (:data:`GQA_MAX_TOLERANCE`); the ulp at ``k`` is the spacing
    above it, ``eps * 2**floor(log2 k)``. The probe's output is ``k`` up to the rounding of ``1/n`` (at most
    ``2**-9`` relative where ``P`` is rounded to bfloat16, one ulp of a bfloat16 output):

    ============  ==========  =========  ===============
    ``k``         bfloat16    float16    float32, others
    ============  ==========  =========  ===============
    1 .. 3        0.05        0.05       0.05
    4 .. 7        0.0625      0.05       0.05
    8 .. 15       0.125       0.05       0.05
    16 .. 31      0.25        0.05       0.05
    32 .. 63      0.25 (cap)  0.0625     0.05
    64 .. 127     0.25 (cap)  0.125      0.05
    128 and up    0.25 (cap)  0.25       0.05
    ============  ==========  =========  ===============
    """
    k = k.to(torch.float32)
    if not dtype.is_floating_point:
        return torch.full_like(k, GQA_MIN_TOLERANCE)
    return (2 * dtype_ulp(k, dtype)).clamp(GQA_MIN_TOLERANCE, GQA_MAX_TOLERANCE)


def dtype_ulp(k: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The spacing of ``dtype``'s values just above ``|k|`` (a float tensor; ``dtype`` a floating one):
    ``eps * 2**floor(log2 |k|)`` (bfloat16 at 8..15: 0.0625)."""
    _, e = torch.frexp(k.to(torch.float32).abs())  # k = m * 2**e, m in [0.5, 1): floor(log2 k) = e - 1
    return torch.finfo(dtype).eps * torch.exp2((e - 1).to(torch.float32))  # (like k)


def _seen_rows(case: Case, device: torch.device) -> torch.Tensor:
    """``(total_q,)`` bool: the rows that see a key under the case's spec, on ``device``."""
    empty = []
    for sq, sk in zip(case.q_lens, case.k_lens):
        lo, hi = case.band(sq, sk)
        empty.append(lo > hi)
    return (~torch.cat(empty)).to(device)  # (total_q,)


def _gqa_all_ok(case: Case, out: torch.Tensor) -> ProbeResult | None:
    """The GQA probe's ``ok`` where every written row that sees a key holds its kv head's value, checked on the
    output's device in float32 row chunks (exact for its dtype); None where anything else may be the answer:
    :func:`decode_gqa`'s float64 decode words it (8 s a 32k row on the CPU: lab/runs/cpu-models-cost-2026-12-07)."""
    o = out.detach()  # (total_q, hq, d)
    seen = _seen_rows(case, o.device)  # (total_q,)
    if o.dim() != 3 or not bool(seen.any()):
        return None
    want = (torch.arange(case.hq, device=o.device) // case.group + 1).to(torch.float32)[None, :, None]  # (1, hq, 1)
    tol = gqa_tolerance(want, o.dtype)  # (1, hq, 1): at the expected value, as only a value read as it passes
    bad = torch.zeros(case.hq, dtype=torch.bool, device=o.device)  # (hq,): mixed, other head or non-finite
    wrote = torch.zeros(case.hq, dtype=torch.bool, device=o.device)  # (hq,): wrote a row that sees a key
    step = max(1, GQA_CHUNK_ELEMENTS // max(1, o.shape[1] * o.shape[2]))
    for r0 in range(0, o.shape[0], step):
        part = o[r0 : r0 + step][seen[r0 : r0 + step]]  # (rows, hq, d), the output's dtype
        written = ~(part == POISON).any(-1)  # (rows, hq)
        f = part.to(torch.float32)  # (rows, hq, d)
        w = written[..., None]  # (rows, hq, 1)
        rounded = torch.round(f)  # (rows, hq, d)
        off = ((f - rounded).abs() > tol) | (rounded != want) | ~torch.isfinite(f)  # (rows, hq, d)
        bad |= (off & w).any(2).any(0)
        wrote |= written.any(0)
    if bool(bad.any()) or not bool(wrote.any()):
        return None
    return _gqa_ok(case, (~wrote).nonzero().flatten().tolist())


def _unjudged_note(unjudged: list[int]) -> str:
    return f" (query head(s) {unjudged} wrote no row: not judged)" if unjudged else ""


def _gqa_ok(case: Case, unjudged: list[int]) -> ProbeResult:
    """The GQA probe's ``ok``: every query head that wrote a row that sees a key read its kv head (``unjudged``: the
    heads that wrote none)."""
    note = _unjudged_note(unjudged)
    return ProbeResult("ok", f"all {case.hq - len(unjudged)} query heads read kv head h // {case.group}{note}", 0, case.hq)


def decode_gqa(case: Case, out: torch.Tensor) -> ProbeResult:
    """Which kv head each query head read, from the GQA probe output (``ok`` found on its device: :func:`_gqa_all_ok`)."""
    fast = _gqa_all_ok(case, out)
    if fast is not None:
        return fast
    raw = out.detach().to("cpu")  # (total_q, hq, d), the output's dtype
    written = ~(raw == POISON).any(-1)  # (total_q, hq): poison left in a row: not judged
    o = raw.to(torch.float64)  # (total_q, hq, d)
    seen = _seen_rows(case, raw.device)  # (total_q,)
    o, written = o[seen], written[seen]  # (rows, hq, d), (rows, hq)
    if o.numel() == 0:
        return ProbeResult("n/a", "no row sees a key")
    if not written.any():
        return ProbeResult("n/a", "output not written: no query head wrote a row that sees a key")
    if not torch.isfinite(o[written]).all():
        return ProbeResult("mismatch", "GQA probe output has NaN/Inf", 1, case.hq)
    wrong, unjudged = [], []  # the same tests as _gqa_all_ok, head by head, to word what it could not call ok
    for h in range(case.hq):
        vals = o[written[:, h], h, :]  # (rows written, d)
        if vals.numel() == 0:
            unjudged.append(h)
            continue
        want = h // case.group + 1
        used = torch.round(vals)  # (rows written, d)
        mixed = bool(((vals - used).abs() > gqa_tolerance(used, raw.dtype).to(vals.dtype)).any())
        if mixed or (used != want).any():
            heads = sorted({int(x) - 1 for x in used.flatten().tolist()})
            what = f"a mix of kv heads (values {vals.min():.3g}..{vals.max():.3g})" if mixed else f"kv head(s) {heads}"
            wrong.append(f"query head {h} used {what}, expected kv head {want - 1}")
    if not wrong:
        return _gqa_ok(case, unjudged)
    return ProbeResult(
        "mismatch",
        f"{len(wrong)} of {case.hq - len(unjudged)} query heads read the wrong kv head{_unjudged_note(unjudged)}. " + "; ".join(wrong[:4]),
        len(wrong),
        case.hq,
    )


def _pass_outputs(case: Case, run: RunFn, device: torch.device | str, base: Inputs, per_call: int):
    """Yield ``(p, output of pass p)`` ``(total_q, hq, d)`` for every pass, ``per_call`` passes per call
    where the backend accepts the batch, else one pass per call at the case's own shape."""
    passes = mask_passes(case)
    tq = base.q.shape[0]
    p = 0
    while p < passes:
        n = min(per_call, passes - p)
        if n > 1:
            try:
                out = run(mask_probe_inputs(case, p, device, base, n))  # (n*total_q, hq, d)
            except Exception:  # noqa: BLE001 - declined or failed at this batch size: probe at the case's shape
                per_call = n = 1
            else:
                for t, o in enumerate(out.reshape(n, tq, *out.shape[1:]).unbind(0)):  # n x (total_q, hq, d)
                    yield p + t, o
                p += n
                continue
        yield p, run(mask_probe_inputs(case, p, device, base))
        p += 1


def run_mask_probe(
    case: Case,
    run: RunFn,
    device: torch.device | str,
    max_passes: int = DEFAULT_MAX_PASSES,
    base: Inputs | None = None,
    batch_passes: bool = True,
) -> ProbeResult:
    """Probe the effective mask of the backend behind ``run``; ``base``: the case's inputs, if made.

    The full probe where it needs at most ``max_passes`` passes, else the scaled one
    (:func:`run_scaled_probe`; :func:`mask_plan`). A full probe of more than :data:`STREAM_ELEMENTS`
    weights is decoded pass by pass (:class:`MaskStream`); where it finds a mismatch the passes run
    once more to describe it (the backend is assumed deterministic on the probe's inputs)."""
    kind, passes = mask_plan(case, max_passes)
    if kind == "not_run":
        return ProbeResult("not_run", f"head dim {case.head_dim}: the scaled probe needs 4 channels; the full one {passes} passes")
    base = base if base is not None else make_inputs(case, device)  # once: every pass only rewrites q and v
    if kind == "scaled":
        return run_scaled_probe(case, run, device, base, batch_passes)
    result = _run_full_probe(case, run, device, base, batch_passes)
    result.probe = "full"
    return result


def _run_full_probe(case: Case, run: RunFn, device: torch.device | str, base: Inputs, batch_passes: bool) -> ProbeResult:
    """The full (one-hot) probe: :func:`decode_mask` or, for many weights, :class:`MaskStream`."""
    per_call = passes_per_call(case) if batch_passes else 1
    if case.hq * sum(sq * sk for sq, sk in zip(case.q_lens, case.k_lens)) <= STREAM_ELEMENTS:
        return decode_mask(case, [o for _, o in _pass_outputs(case, run, device, base, per_call)])
    stream = MaskStream(case, base.q.device)
    for p, o in _pass_outputs(case, run, device, base, per_call):
        stream.add(p, o)
    result = stream.verdict()
    if result is not None:
        return result
    for p, o in _pass_outputs(case, run, device, base, per_call):
        stream.gather(p, o)
    return stream.described()


# -- the scaled mask probe (parity.maskscale) -------------------------------------------------------

#: Readout elements (passes x rows x heads x d) compared with the spec's at once.
SCALED_CHUNK_ELEMENTS = 1 << 24
#: Refining passes at most per mismatch (each divides an edge's interval by d / 2: 2 at 131072 keys, d 128).
MAX_REFINING_PASSES = 32


def _value_outputs(case: Case, run: RunFn, device: torch.device | str, base: Inputs, passes: list[PassValues], per_call: int):
    """Each pass's output ``(total_q, hq, d)``, ``per_call`` passes per call where the backend accepts the
    batch, else one pass per call at the case's own shape (as :func:`_pass_outputs`)."""
    tq, outs, p = base.q.shape[0], [], 0
    while p < len(passes):
        n = min(per_call, len(passes) - p)
        try:
            out = run(values_inputs(case, base, passes[p : p + n], device))  # (n*total_q, hq, d)
        except Exception:  # noqa: BLE001 - declined or failed at this batch size: probe at the case's shape
            if n == 1:
                raise
            per_call = 1
            continue
        outs += list(out.reshape(n, tq, *out.shape[1:]).unbind(0))  # n x (total_q, hq, d)
        p += n
    return outs


def _packed(case: Case, per_seq: list[tuple[torch.Tensor, torch.Tensor]]) -> PassValues:
    """One pass's per-sequence ``(channel, sign)`` ``(Sk,)`` packed as the case's keys ``(total_k,)``."""
    return torch.cat([c for c, _ in per_seq]), torch.cat([s for _, s in per_seq])


@dataclasses.dataclass
class _Residues:
    """What the residue passes found: judged and unwritten pairs, differing pairs, and per sequence its
    first :data:`MAX_DESCRIBED_ROWS` differing pairs ``(b, rows (n,), heads (n,), readouts (R, n, d) float32)``."""

    total: int = 0
    skipped: int = 0
    bad: int = 0
    picks: list[tuple[int, torch.Tensor, torch.Tensor, torch.Tensor]] = dataclasses.field(default_factory=list)


def _reads_spec(w: torch.Tensor, want: torch.Tensor, nonempty: torch.Tensor) -> torch.Tensor:
    """Whether each (row, head) of residue outputs ``w`` ``(R, rows, hq, d)`` float32 reads ``want``
    ``(R, rows, d)`` (the spec's band; ``nonempty`` ``(rows,)``): its values divided by their largest are
    the spec's integers (an empty band: all 0) -> ``(rows, hq)`` bool."""
    scale = w.abs().amax(-1).amax(0)  # (rows, hq)
    r = w / torch.where(scale > 0, scale, 1.0)[None, :, :, None]  # (R, rows, hq, d)
    k = r.round()
    integer = ((r - k).abs() <= maskscale.INTEGER_TOLERANCE).all(-1).all(0)  # (rows, hq)
    same = (k == want[:, :, None, :]).all(-1).all(0)  # (rows, hq)
    return torch.where(scale > 0, integer & same & nonempty[:, None], ~nonempty[:, None])


def _spec_reads(case: Case, sq: int, sk: int, mods: tuple[int, ...], dev) -> tuple[torch.Tensor, torch.Tensor]:
    """What each row's spec band reads in each pass, ``(R, Sq, d)`` int8 (channels past ``m``: 0), and
    which bands are not empty ``(Sq,)``."""
    lo, hi = case.band(sq, sk, dev)  # (Sq,), (Sq,)
    want = torch.zeros(len(mods), sq, case.head_dim, dtype=torch.int8, device=dev)  # (R, Sq, d)
    for t, m in enumerate(mods):
        want[t, :, :m] = maskscale.expected(lo, hi, m)
    return want, lo <= hi


def _residue_check(case: Case, outs: list[torch.Tensor], mods: tuple[int, ...]) -> _Residues | ProbeResult:
    """Every (head, row) pair's residue readouts against its spec band's, in row chunks; a
    :class:`ProbeResult` where an output is not finite."""
    cq, _ = case.cu_seqlens()
    dev = outs[0].device
    found = _Residues()
    for b, (sq, sk) in enumerate(zip(case.q_lens, case.k_lens)):
        want, nonempty = _spec_reads(case, sq, sk, mods, dev)  # (R, Sq, d), (Sq,)
        bad = torch.zeros(sq, case.hq, dtype=torch.bool, device=dev)  # (Sq, hq)
        unwritten, nonfinite = torch.zeros_like(bad), torch.zeros_like(bad)
        step = max(1, SCALED_CHUNK_ELEMENTS // (len(mods) * case.hq * case.head_dim))
        for i0 in range(0, sq, step):
            i1 = min(sq, i0 + step)
            raw = torch.stack([o[cq[b] + i0 : cq[b] + i1] for o in outs])  # (R, rows, hq, d), the output's dtype
            u = (raw == POISON).any(-1).any(0)  # (rows, hq): poison left: not judged
            w = raw.to(torch.float32)  # (R, rows, hq, d)
            nonfinite[i0:i1] = ~torch.isfinite(w).all(-1).all(0) & ~u
            bad[i0:i1] = ~_reads_spec(w, want[:, i0:i1], nonempty[i0:i1]) & ~u
            unwritten[i0:i1] = u
        if nonfinite.any():
            n = int(nonfinite.sum())
            words = f"mask probe output has NaN/Inf in {n} (head, row) pairs of seq {b}"
            return ProbeResult("mismatch", words, n, sq * case.hq, probe="scaled")
        found.total += sq * case.hq - int(unwritten.sum())
        found.skipped += int(unwritten.sum())
        found.bad += int(bad.sum())
        if bad.any():
            hs, rs = bad.T.nonzero()[:MAX_DESCRIBED_ROWS].unbind(1)  # (n,), (n,) in (head, row) order
            found.picks.append((b, rs, hs, torch.stack([o[cq[b] + rs, hs].to(torch.float32) for o in outs])))  # (R, n, d)
    return found


def run_scaled_probe(case: Case, run: RunFn, device: torch.device | str, base: Inputs, batch_passes: bool = True) -> ProbeResult:
    """The scaled mask probe (the module docstring, :mod:`parity.maskscale`): its residue passes, batched;
    where a pair differs, the passes that describe it (:func:`_describe_scaled`)."""
    mods = maskscale.moduli(case.head_dim, max(case.k_lens))
    passes = [_packed(case, [maskscale.residue_values(m, sk) for sk in case.k_lens]) for m in mods]
    per_call = passes_per_call(case, passes=len(mods)) if batch_passes else 1
    found = _residue_check(case, _value_outputs(case, run, device, base, passes, per_call), mods)
    if isinstance(found, ProbeResult):
        return found
    words = f"{len(mods)} signed residue passes (mod {'/'.join(map(str, mods))})"
    if not maskscale.covered(mods, max(case.k_lens)):
        words += f", which tell apart runs of fewer than {2 * math.prod(mods)} keys only"
    if not found.bad:
        result = _mask_verdict(found.total, 0, found.skipped, Counter(), None, None)
        if result.status == "ok":
            note = f" ({found.skipped} unwritten (head, row) pairs not judged)" if found.skipped else ""
            result.detail = f"all {found.total} {'written ' if note else ''}(head, row) pairs read the spec's band in {words}{note}"
    else:
        result = _describe_scaled(case, run, device, base, found, mods, words)
    result.probe = "scaled"
    return result


@dataclasses.dataclass
class _Decoded:
    """A sequence's described pairs, decoded: readouts ``(R, n, d)`` in units of one key, partial weight, one
    key's value (``scale``: ``1 / l``), first / last visible block, the band decoded (``a``, ``x``: keys ``a..x-1``)
    and its status (:data:`parity.maskscale.EXACT` ...); ``located``: the first pair's first and last
    visible keys from the refining passes (None: not located)."""

    b: int
    rows: torch.Tensor
    heads: torch.Tensor
    reads: torch.Tensor
    partial: torch.Tensor
    scale: torch.Tensor
    first_block: torch.Tensor
    last_block: torch.Tensor
    a: torch.Tensor
    x: torch.Tensor
    status: torch.Tensor
    block: int
    located: tuple[int, int] | None = None


def _decode_pick(case: Case, pick, blk: torch.Tensor, block: int, mods: tuple[int, ...], base: Inputs) -> _Decoded:
    """One sequence's differing pairs: their residues in units of one key (:func:`parity.maskscale.readout_unit`),
    the block pass's first and last visible blocks ``blk`` ``(total_q, hq, d)``, and the bands that read as both
    (:func:`parity.maskscale.decode_bands`)."""
    b, rs, hs, raw = pick
    sk, cq = case.k_lens[b], case.cu_seqlens()[0]
    lo, hi = (t.to(rs.device)[rs] for t in case.band(case.q_lens[b], sk))  # (n,) each
    sink = base.sinks.to(rs.device, torch.float32)[hs].exp() if base.sinks is not None else torch.zeros(len(rs), device=rs.device)
    scale, partial = maskscale.readout_unit(raw, (hi - lo + 1).clamp(min=0) + sink)  # (n,) each
    reads = (raw / torch.where(scale > 0, scale, 1.0)[None, :, None]).round()  # (R, n, d)
    nblk = -(-sk // block)
    w = blk[cq[b] + rs, hs].to(torch.float32).abs()[:, :nblk]  # (n, blocks)
    top = w.amax(-1, keepdim=True)  # (n, 1)
    seen = (w > top * VISIBLE_FRACTION) & (top > 0)  # (n, blocks)
    cnt, f0, l0, one_run = maskscale.runs(seen)
    residues = [reads[t, :, :m].to(torch.int8) for t, m in enumerate(mods)]
    a, x, status = maskscale.decode_bands(residues, mods, f0 * block, l0 * block, block, sk)
    fits = one_run & _block_counts_agree(w, a, x, block, sk)
    status = torch.where(fits | (status != maskscale.EXACT), status, maskscale.NO_BAND)
    status = torch.where(one_run, status, maskscale.NO_BAND)
    return _Decoded(b, rs, hs, reads, partial, scale, torch.where(cnt > 0, f0, -1), l0, a, x, status, block)


def _block_counts_agree(w: torch.Tensor, a: torch.Tensor, x: torch.Tensor, block: int, sk: int) -> torch.Tensor:
    """Whether the block pass's values ``w`` ``(n, blocks)`` are those of bands ``a..x-1`` ``(n,)``: each
    block's visible count over the largest, within 2^-5 (bfloat16 outputs hold them to 2^-8)."""
    starts = torch.arange(w.shape[1], device=w.device) * block  # (blocks,)
    ends = (starts + block).clamp(max=sk)
    pred = (torch.minimum(ends, x[:, None]) - torch.maximum(starts, a[:, None])).clamp(min=0).to(torch.float32)  # (n, blocks)
    obs = w / w.amax(-1, keepdim=True).clamp(min=1e-30)
    return ((obs - pred / pred.amax(-1, keepdim=True).clamp(min=1)).abs() <= 2.0**-5).all(-1)


def _refine(case: Case, run: RunFn, device: torch.device | str, base: Inputs, decoded: list[_Decoded]) -> int:
    """Locate the first and last visible key of each sequence's first differing pair (that sees a key)
    exactly: refining passes, one call each (all sequences at once), until both are one key. Sets
    ``located``; returns the calls made."""
    cq, _ = case.cu_seqlens()
    todo: dict[int, list[tuple[int, int]]] = {}
    for dec in decoded:
        f0, l0, sk = int(dec.first_block[0]), int(dec.last_block[0]), case.k_lens[dec.b]
        if f0 >= 0:
            todo[dec.b] = [(f0 * dec.block, min(dec.block, sk - f0 * dec.block)), (l0 * dec.block, min(dec.block, sk - l0 * dec.block))]
    by_b = {dec.b: dec for dec in decoded}
    calls = 0
    while calls < MAX_REFINING_PASSES and any(f[1] > 1 or last[1] > 1 for f, last in todo.values()):
        per_seq, parts = [], {}
        for b, sk in enumerate(case.k_lens):
            if b in todo and (todo[b][0][1] > 1 or todo[b][1][1] > 1):
                ch, sign, pf, pl = maskscale.refine_values(sk, case.head_dim, todo[b][0], todo[b][1])
                parts[b] = (pf, pl)
            else:
                ch, sign = torch.full((sk,), -1, dtype=torch.long), torch.ones(sk, dtype=torch.long)
            per_seq.append((ch, sign))
        out = _value_outputs(case, run, device, base, [_packed(case, per_seq)], 1)[0]  # (total_q, hq, d)
        calls += 1
        for b, (pf, pl) in parts.items():
            o = out[cq[b] + by_b[b].rows[0], by_b[b].heads[0]].to(torch.float32).abs().cpu()  # (d,)
            seen = (o > o.max() * VISIBLE_FRACTION) & (o.max() > 0)  # (d,)
            f, last = maskscale.narrow(todo[b][0], pf, seen, True), maskscale.narrow(todo[b][1], pl, seen, False)
            if f is None or last is None:  # the pair saw nothing where it did before: not located
                del todo[b]
                continue
            todo[b] = [f, last]
    for b, (f, last) in todo.items():
        if f[1] == 1 and last[1] == 1:
            by_b[b].located = (f[0], last[0])
    return calls


def _describe_scaled(
    case: Case, run: RunFn, device: torch.device | str, base: Inputs, found: _Residues, mods: tuple[int, ...], words: str
) -> ProbeResult:
    """A mismatch of the residue passes in :func:`decode_mask`'s words: a block pass (one call) and the
    bands it and the residues decode to, then refining passes for each sequence's first differing pair."""
    blocks = [maskscale.block_values(sk, case.head_dim) for sk in case.k_lens]
    blk = _value_outputs(case, run, device, base, [_packed(case, [(c, s) for c, s, _ in blocks])], 1)[0]  # (total_q, hq, d)
    decoded = [_decode_pick(case, pick, blk, blocks[pick[0]][2], mods, base) for pick in found.picks]
    calls = _refine(case, run, device, base, decoded)
    patterns: Counter[str] = Counter()
    first = None
    for dec in decoded:
        lo, hi = (t.to(dec.rows.device)[dec.rows] for t in case.band(case.q_lens[dec.b], case.k_lens[dec.b]))  # (n,) each
        _settle_first(dec, mods)
        phrases = _scaled_phrases(dec, lo, hi, case.k_lens[dec.b])
        patterns.update(phrases)
        if first is None:
            first = _scaled_first(case, dec, int(lo[0]), int(hi[0]), base)
    result = _mask_verdict(found.total, found.bad, found.skipped, patterns, first, None)
    exact = sum(int((dec.status == maskscale.EXACT).sum()) for dec in decoded)
    described = sum(len(dec.rows) for dec in decoded)
    result.detail += (
        f" [scaled probe: {words}; then a block pass of {decoded[0].block}-key blocks and {calls} refining "
        f"pass{'es' if calls != 1 else ''} "
        f"located the first differing row's first and last keys; {exact} of {described} described pairs decoded to one band]"
    )
    return result


def _settle_first(dec: _Decoded, mods: tuple[int, ...]) -> None:
    """The first pair's band from its located first and last keys: one band where ``first..last`` reads as its
    residues (status :data:`~parity.maskscale.EXACT`), else not one band."""
    if dec.located is None:
        return
    f, last = dec.located
    band = all(
        torch.equal(maskscale.expected(torch.tensor([f]), torch.tensor([last]), m)[0], dec.reads[t, 0, :m].to(torch.int8).cpu())
        for t, m in enumerate(mods)
    )
    dec.a[0], dec.x[0] = f, last + 1
    dec.status[0] = maskscale.EXACT if band else maskscale.NO_BAND


def _scaled_phrases(dec: _Decoded, lo: torch.Tensor, hi: torch.Tensor, sk: int) -> list[str]:
    """One :func:`_pattern` phrase per described pair, in (head, row) order."""
    out = []
    sees = (dec.scale > 0).tolist()
    for status, partial, seen, a, x, lo_i, hi_i in zip(
        dec.status.tolist(), dec.partial.tolist(), sees, dec.a.tolist(), dec.x.tolist(), lo.tolist(), hi.tolist()
    ):
        if partial:
            out.append("keys get partial weight (non-uniform softmax over visible keys)")
        elif not seen:
            out.append(_pattern(0, -1, 0, lo_i, hi_i, sk))
        elif status == maskscale.EXACT:
            out.append(_pattern(a, x - 1, x - a, lo_i, hi_i, sk))
        elif lo_i > hi_i:
            out.append("row should see no key but sees some")
        elif status == maskscale.NO_BAND:
            out.append("visible keys are not one band")
        else:
            out.append("window differs (several bands read as its residues)")
    return out


def _scaled_first(case: Case, dec: _Decoded, lo: int, hi: int, base: Inputs) -> str:
    """The first described pair of a sequence in :func:`decode_mask`'s words: its keys exact where located."""
    h, i = int(dec.heads[0]), int(dec.rows[0])
    spec = f"{lo}..{hi}" if lo <= hi else "none"
    if not bool(dec.scale[0] > 0):
        keys = "none"
    elif dec.located is not None or int(dec.status[0]) == maskscale.EXACT:
        a, x = int(dec.a[0]), int(dec.x[0])
        keys = key_ranges(list(range(a, x))) if x - a <= 2 else f"{a}..{x - 1}"
        if int(dec.status[0]) != maskscale.EXACT and not bool(dec.partial[0]):
            sink = math.exp(float(base.sinks[h])) if base.sinks is not None else 0.0
            keys += f" (not one band: about {max(0, round(1 / float(dec.scale[0]) - sink))} keys)"
    else:
        b0, b1 = int(dec.first_block[0]), int(dec.last_block[0])
        keys = f"in blocks {b0}..{b1} of {dec.block} keys (edges not located)"
    if bool(dec.partial[0]):
        keys += " (non-uniform weights)"
    return f"seq {dec.b} head {h} row {i} sees keys {keys}, spec says {spec}"


def run_gqa_probe(case: Case, run: RunFn, device: torch.device | str, base: Inputs | None = None) -> ProbeResult:
    if case.hkv == 1:
        return ProbeResult("n/a", "one kv head (MQA): nothing to map")
    if case.kv_dtype is not None:  # V = kv head + 1 in the cache's fp8 dtype: every value must be exact there
        heads = torch.arange(1, case.hkv + 1, dtype=torch.float32)  # (hkv,)
        if not torch.equal(heads.to(getattr(torch, case.kv_dtype)).float(), heads):
            return ProbeResult("n/a", f"kv heads 1..{case.hkv} are not all exact in {case.kv_dtype}: no GQA probe values")
    return decode_gqa(case, run(gqa_probe_inputs(case, device, base)))


class MaskStream:
    """The mask probe decoded one pass at a time: per (row, head) only the largest weight, the
    largest weight outside the spec's band and the smallest inside it (``(total_q, hq)`` each), which
    decide exactly as :func:`decode_mask` does whether a pair sees the spec's keys (a key is
    visible above ``VISIBLE_FRACTION`` of the row's largest weight, partial below
    ``UNIFORM_FRACTION``). Describing a mismatch needs the visible keys of the differing pairs:
    :meth:`gather` collects them from a second run of the passes, for at most
    :data:`MAX_DESCRIBED_ROWS` pairs per sequence and the drawn corner of the first."""

    def __init__(self, case: Case, device: torch.device | str):
        self.case, self.dev = case, device
        bands = [case.band(sq, sk) for sq, sk in zip(case.q_lens, case.k_lens)]
        self.lo = torch.cat([b[0] for b in bands]).to(device)  # (total_q,)
        self.hi = torch.cat([b[1] for b in bands]).to(device)  # (total_q,)
        self.sk = torch.cat([torch.full((sq,), sk) for sq, sk in zip(case.q_lens, case.k_lens)]).to(device)  # (total_q,)
        shape = (sum(case.q_lens), case.hq)
        self.top = torch.zeros(shape, device=device)  # (total_q, hq) largest |weight|
        self.out_band = torch.zeros(shape, device=device)  # (total_q, hq) largest |weight| outside the band
        self.in_band = torch.full(shape, math.inf, device=device)  # (total_q, hq) smallest |weight| inside it
        self.nonfinite = torch.zeros(shape, dtype=torch.bool, device=device)
        self.unwritten = torch.zeros(shape, dtype=torch.bool, device=device)
        self.bad = torch.zeros(shape, dtype=torch.bool, device=device)
        #: what :meth:`gather` fills: key -> (sequence, rows, heads, visible (n, Sk), partial (n, Sk));
        #: keys: the sequences, and -1 for the drawn corner
        self.picks: dict[int, tuple[int, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]] = {}

    def _weights(self, p: int, out: torch.Tensor) -> torch.Tensor:
        """Pass ``p``'s ``|weights|`` ``(total_q, hq, d)`` float32, 0 where not finite or past the row's Sk."""
        raw = out.detach().to(self.dev)  # (total_q, hq, d), the output's dtype
        self.unwritten |= (raw == POISON).any(-1)
        j = p * self.case.head_dim + torch.arange(self.case.head_dim, device=self.dev)  # (d,)
        valid = (j[None, :] < self.sk[:, None])[:, None, :]  # (total_q, 1, d)
        w = raw.to(torch.float32).abs()  # (total_q, hq, d)
        self.nonfinite |= (~torch.isfinite(w) & valid).any(-1)
        return torch.where(torch.isfinite(w) & valid, w, 0.0)  # (total_q, hq, d)

    def add(self, p: int, out: torch.Tensor) -> None:
        """Fold pass ``p``'s output ``(total_q, hq, d)`` into the per-pair figures."""
        w = self._weights(p, out)  # (total_q, hq, d)
        j = p * self.case.head_dim + torch.arange(self.case.head_dim, device=self.dev)  # (d,)
        band = ((j[None, :] >= self.lo[:, None]) & (j[None, :] <= self.hi[:, None]) & (j[None, :] < self.sk[:, None]))[:, None, :]
        self.top = torch.maximum(self.top, w.amax(-1))
        self.out_band = torch.maximum(self.out_band, torch.where(band, 0.0, w).amax(-1))
        self.in_band = torch.minimum(self.in_band, torch.where(band, w, math.inf).amin(-1))

    def verdict(self) -> ProbeResult | None:
        """The verdict where no pair differs or an output is not finite; None: a mismatch that
        :meth:`gather` and :meth:`described` put in words (its counts are in :attr:`bad`)."""
        cq, _ = self.case.cu_seqlens()
        u = self.unwritten
        for b in range(self.case.batch):
            bad = int((self.nonfinite[cq[b] : cq[b + 1]] & ~u[cq[b] : cq[b + 1]]).sum())
            if bad:
                words = f"mask probe output has NaN/Inf in {bad} (head, row) pairs of seq {b}"
                return ProbeResult("mismatch", words, bad, self.case.q_lens[b] * self.case.hq)
        m = self.top
        clean = (m > 0) & (self.in_band >= m * UNIFORM_FRACTION) & (self.out_band <= m * VISIBLE_FRACTION)
        clean |= (m == 0) & (self.lo > self.hi)[:, None]
        self.bad = ~clean & ~u  # (total_q, hq)
        if self.bad.any():
            self._pick()
            return None
        return _mask_verdict(int((~u).sum()), 0, int(u.sum()), Counter(), None, None)

    def _pick(self) -> None:
        """The pairs to describe: per sequence its first differing ones in (head, row) order, and the
        drawn corner (128 rows) of the first differing (sequence, head)."""
        cq, _ = self.case.cu_seqlens()
        for b, sk in enumerate(self.case.k_lens):
            hs, rs = self.bad[cq[b] : cq[b + 1]].T.nonzero()[:MAX_DESCRIBED_ROWS].unbind(1)  # (n,), (n,)
            if hs.numel():
                self.picks[b] = (b, rs, hs, self._blank(len(rs), sk), self._blank(len(rs), sk))
        b, _, hs, _, _ = self.picks[min(self.picks)]
        rs = torch.arange(min(128, self.case.q_lens[b]), device=self.dev)  # (rows,)
        sk = self.case.k_lens[b]
        self.picks[-1] = (b, rs, torch.full_like(rs, int(hs[0])), self._blank(len(rs), sk), self._blank(len(rs), sk))

    def _blank(self, n: int, sk: int) -> torch.Tensor:
        return torch.zeros(n, sk, dtype=torch.bool, device=self.dev)  # (n, Sk)

    def gather(self, p: int, out: torch.Tensor) -> None:
        """Pass ``p`` again: the visible and partial keys of the pairs to describe."""
        w = self._weights(p, out)  # (total_q, hq, d)
        cq, _ = self.case.cu_seqlens()
        for b, rs, hs, e, pp in self.picks.values():
            k0 = p * self.case.head_dim
            k1 = min(self.case.k_lens[b], k0 + self.case.head_dim)
            if k1 <= k0:
                continue
            top = self.top[cq[b] + rs, hs][:, None]  # (n, 1)
            wb = w[cq[b] + rs, hs][:, : k1 - k0]  # (n, k1 - k0)
            e[:, k0:k1] = (wb > top * VISIBLE_FRACTION) & (top > 0)
            pp[:, k0:k1] = e[:, k0:k1] & (wb < top * UNIFORM_FRACTION)

    def described(self) -> ProbeResult:
        """The mismatch in :func:`decode_mask`'s words, from the gathered keys."""
        cq, _ = self.case.cu_seqlens()
        patterns: Counter[str] = Counter()
        first = None
        for key in sorted(k for k in self.picks if k >= 0):
            b, rs, hs, e, pp = self.picks[key]
            lo, hi = self.lo[cq[b] + rs], self.hi[cq[b] + rs]  # (n,), (n,)
            patterns.update(_row_patterns(e, pp, lo, hi, self.case.k_lens[b]))
            if first is None:
                keys, pk = e[0].nonzero().flatten().tolist(), pp[0].nonzero().flatten().tolist()
                lo_i, hi_i = int(lo[0]), int(hi[0])
                spec_txt = f"{lo_i}..{hi_i}" if lo_i <= hi_i else "none"
                extra = f" (partial weight on {key_ranges(pk)})" if pk else ""
                first = f"seq {b} head {int(hs[0])} row {int(rs[0])} sees keys {key_ranges(keys)}{extra}, spec says {spec_txt}"
        b, rs, hs, e, pp = self.picks[-1]
        sk = self.case.k_lens[b]
        j = torch.arange(min(sk, 256))  # (<=256,)
        lo, hi = self.lo[cq[b] + rs].cpu(), self.hi[cq[b] + rs].cpu()  # (rows,), (rows,)
        spec = (j[None, :] >= lo[:, None]) & (j[None, :] <= hi[:, None])  # (rows, <=256)
        u = self.unwritten[cq[b] + rs, hs].cpu()[:, None]  # (rows, 1)
        eff = torch.where(u, spec, e[:, :256].cpu())  # (rows, <=256)
        image = {"seq": b, "head": int(hs[0]), **_image(spec, eff, pp[:, :256].cpu() & ~u, (self.case.q_lens[b], sk))}
        u_all = self.unwritten
        return _mask_verdict(int((~u_all).sum()), int(self.bad.sum()), int(u_all.sum()), patterns, first, image)


def poisoned_spans(case: Case, b: int) -> str:
    """Sequence ``b``'s poisoned key positions in words: ``keys 0..31 on pages 0-1; tail 37..39 of page 4``
    (paged), ``slots 37..47 past its used length 37`` (a padded cache)."""
    ps, sk = case.page_size, case.k_lens[b]
    if ps is None:
        return span_words(sk, padded_capacity(case.k_lens), [])
    return span_words(sk, ps, (~pages_seen(case, ps, b)).nonzero().flatten().tolist(), paged=True)


def span_words(sk: int, size: int, unseen: list[int], paged: bool = False) -> str:
    """The words of :func:`poisoned_spans` for a sequence of ``sk`` keys: ``paged``, pages of ``size`` keys of which
    ``unseen`` lie outside every window; else a padded cache of capacity ``size``. Repro scripts embed it."""
    if not paged:
        return f"slots {sk}..{size - 1} past its used length {sk}"
    parts = []
    if unseen:
        keys = [j for p in unseen for j in range(p * size, min(sk, (p + 1) * size))]
        parts.append(f"keys {key_ranges(keys)} on page{'s' if len(unseen) > 1 else ''} {key_ranges(unseen).replace('..', '-')}")
    if sk % size:
        parts.append(f"unused tail {sk}..{-(-sk // size) * size - 1} of page {sk // size}")
    return "; ".join(parts) if parts else "none of its own: NaN from a page its block table does not reference"


def nonfinite_pairs(probe: torch.Tensor, output: torch.Tensor | None = None) -> torch.Tensor:
    """(row, head) pairs of a read probe's output ``probe`` ``(total_q, hq, d)`` that are not finite: bool
    ``(total_q, hq)``; pairs whose ``output`` (the case's own run) is already not finite are the numeric check's."""
    bad = (~torch.isfinite(probe.detach().to("cpu", torch.float32))).any(-1)  # (total_q, hq)
    if output is not None:
        bad &= torch.isfinite(output.detach().to("cpu", torch.float32)).all(-1)
    return bad


def padding_words(case: Case, b: int) -> str:
    """Sequence ``b``'s unused block-table slots in words: ``padding slots 3..7 of its block table point at the null
    page`` (a paged case); a sequence with none of its own reads the null page through another's slots or an index."""
    ps = case.page_size or 1
    own, width = -(-case.k_lens[b] // ps), max(-(-sk // ps) for sk in case.k_lens)
    if own == width:
        return "it has no padding slot of its own: the null page"
    return f"padding slots {key_ranges(list(range(own, width)))} of its block table, pointing at the null page"


def _sequence_words(case: Case, bad: torch.Tensor, spans: Callable[[Case, int], str]) -> list[str]:
    """One phrase per sequence with a bad (head, row) pair in ``bad`` ``(total_q, hq)``: its first head's rows."""
    cq, _ = case.cu_seqlens()
    words = []
    for b in range(case.batch):
        hb = bad[cq[b] : cq[b + 1]].T  # (hq, Sq)
        if hb.any():
            h = int(hb.any(1).nonzero()[0])
            rows = key_ranges(hb[h].nonzero().flatten().tolist())
            words.append(f"seq {b} head {h} rows {rows} ({spans(case, b)})")
    return words


def decode_reads(
    case: Case, probe: torch.Tensor, output: torch.Tensor | None = None, parts: dict[str, torch.Tensor] | None = None
) -> ProbeResult:
    """Which (head, row) pairs of the read probe's output ``probe`` ``(total_q, hq, d)`` are not finite (see
    :func:`nonfinite_pairs`). ``parts`` (paged cases): the outputs of the passes that poison one part alone,
    ``"null"`` (the null page padding slots point at) and ``"window"`` (pages outside the window and last-page
    tails): they say which part reached the output; without them (or where neither pass alone turns a pair
    NaN) the words name every poisoned position."""
    bad = nonfinite_pairs(probe, output)
    total = sum(case.q_lens) * case.hq
    if not bad.any():
        return ProbeResult("ok", f"no NaN from the poisoned KV positions reached any of the {total} (head, row) pairs", 0, total)
    null = nonfinite_pairs(parts["null"], output) & bad if parts else torch.zeros_like(bad)  # (total_q, hq)
    window = nonfinite_pairs(parts["window"], output) & bad if parts else torch.zeros_like(bad)  # (total_q, hq)
    if not (null | window).any():
        window = bad
    said = []
    if null.any():
        said.append(("rows read a padding slot (NaN in the null page)", _sequence_words(case, null, padding_words)))
    if window.any():
        where = "pages outside the window" if case.page_size is not None else "cache slots past the used length"
        said.append((f"rows read NaN-poisoned {where}", _sequence_words(case, window, lambda c, b: f"poisoned {poisoned_spans(c, b)}")))
    detail = "; and ".join(f"{head}: {'; '.join(w[:3])}" + (f"; and {len(w) - 3} more sequences" if len(w) > 3 else "") for head, w in said)
    n = int(bad.sum())
    return ProbeResult("mismatch", f"{detail} [{n} of {total} (head, row) pairs NaN/Inf]", n, total)


def run_read_probe(
    case: Case,
    run: RunFn,
    device: torch.device | str,
    base: Inputs | None = None,
    output: torch.Tensor | None = None,
    paged: bool = True,
    padded: bool = False,
) -> ProbeResult:
    """Run the read probe (see the module docstring); ``paged``: whether the backend has a paged path;
    ``padded``: whether it reads this (contiguous) case through a padded cache with used lengths
    (:meth:`parity.case.Inputs.padded`); ``output``: the case's own output, if run."""
    if case.page_size is None and not padded:
        return ProbeResult("n/a", "contiguous KV: a kernel may read every key of its tensor (no page to poison)")
    if case.page_size is not None and not paged:
        return ProbeResult("not_run", "the backend has no paged-KV path")
    base = base if base is not None else make_inputs(case, device)
    probe = dataclasses.replace(base, poison_kv=True)
    got = run(probe)
    parts = None
    if case.page_size is not None and nonfinite_pairs(got, output).any():  # which part reached the output: one pass each
        parts = {part: run(dataclasses.replace(probe, poison_parts=(part,))) for part in POISON_PARTS}
    result = decode_reads(case, got, output, parts)
    if result.status == "ok":
        if case.page_size is None:
            spare = case.batch * padded_capacity(case.k_lens) - sum(case.k_lens)
            what = f"{spare} cache slots past the sequences' used lengths"
        else:
            unseen = sum(int((~pages_seen(case, case.page_size, b)).sum()) for b in range(case.batch))
            what = f"{unseen} pages outside every window, the tails of last pages and the null page of the padding slots"
        result.detail += f" ({what} poisoned)"
    return result
