"""The standalone repro script of one (backend, case): source text, no parity import in it.

:func:`build_script` assembles it from

* a docstring: the case in words, the harness's verdict and reasons, the library version the
  run saw, the command that runs it;
* the case as constants (``Q_LENS``, ``K_LENS``, ``HQ``, ``HKV``, ``HEAD_DIM``, ``DTYPE``,
  ``WINDOW``, ``SCALE``, ``SOFTCAP``, ``PAGE_SIZE``, ``SEED``, ``DEVICE``) and the budget
  (``K_MAX``, ``ABS_FLOOR``, ``K_MEAN``, ``MEAN_FLOOR`` of :data:`parity.verdict.BUDGETS`: the max and the mean rule);
* the input code, copied from :mod:`parity.regimes` and :mod:`parity.case` (``draw_qkv`` and,
  for paged cases, ``paged_layout``): the same generator, seed, order of draws, input regime
  and cast as ``make_inputs``;
* the backend's call, from the backend's own ``repro_call(case)``: the module-level function(s)
  its ``run`` calls, copied with :func:`inspect.getsource` (:func:`embed`), and a short generated
  ``attention(q, k, v)`` that calls them with the native arguments its own translation function
  computes at export time;
* :data:`COMMON`: a float64 masked reference (dense per head; a row that sees no key is 0),
  the same-dtype baseline that sets the tolerance, the ``q = 0`` / one-hot ``V`` mask probe (past
  ``MAX_PROBE_PASSES`` passes the scaled probe's signed residue passes, ``moduli`` / ``residue_values`` /
  ``state`` copied from :mod:`parity.maskscale`: which pairs read other keys, not which keys),
  and ``main()``, which prints the error, the rows that differ most and the keys they saw
  against the spec's, and exits 1 when the output differs beyond the tolerance, the probe
  finds other keys than the spec or the backend raises, 2 when it cannot run on this machine
  (the backend's package does not import, no CUDA device), else 0.

The contract of ``repro_call(case) -> str``: module-level Python source that defines
``attention(q, k, v)``, taking packed ``q`` ``(total_q, hq, d)`` and ``k`` / ``v``
``(total_k, hkv, d)`` on ``DEVICE`` in ``DTYPE`` and returning ``(total_q, hq, d)``; it may
use the constants above, ``CU_Q`` / ``CU_K`` (prefix sums, lists) and ``paged_layout``. The
copied functions may use ``torch`` and each other only; they import their library in their body.
The backend's package is also imported at the top of the backend's part, so a machine without it
exits 2 before anything runs, as before.

fp8 cases (``case.kv_dtype``): ``KV_DTYPE`` / ``Q_FP8``, ``quantize_fp8`` and ``dequantize_fp8`` copied
from :mod:`parity.case` and ``round_p_fp8`` from :mod:`parity.reference`; ``backend_inputs()`` quantizes
as ``make_inputs`` does, the template defines ``attention(q, k, v, descales)`` (:data:`FP8_SIGNATURE`:
``descales`` = ``(q_descale or None, k_descale, v_descale)``, float32 on ``DEVICE``, laid out as ``FP8_SCALES``
says: ``()``, ``(hkv,)`` or ``(B, hkv)``; ``descale_rows`` copied too), the float64
reference computes on the dequantized values and the same-dtype baseline rounds P to e4m3 (docs/fp8.md).

The read probe (``build_script(..., reads="paged" | "padded")``, rows the harness read-probes):
:func:`reads_code` copies ``window_pages`` / ``poison_pages`` / ``poison_slots`` and wraps the layout
function the template calls (``paged_layout`` / ``padded_layout``); ``read_probe`` calls the backend
once more with NaN where a real engine's cache holds garbage and exits 1 on NaN/Inf, naming the rows
and the poisoned span.

A row of a ``--grad`` run gets the backward too (``build_script(..., grad=True)``): the backend's
``repro_backward(case)`` when it has one (source defining ``attention_grads(q, k, v, dout)``, its
explicit backward call), else :func:`grad_call`: :func:`parity.grad.autograd_grads` through
``attention`` (autograd, as the harness's default ``Backend.backward``); ``draw_dout`` copied from
:mod:`parity.grad`; :data:`COMMON_GRAD`: the float64 reference gradients (autograd of the dense
reference), each tensor against ``K_MAX`` x the same-dtype baseline's error + a floor, ``dk`` / ``dv``
exactly 0 on keys outside every window, every gradient finite; exit 1 when any of these fails.
"""

from __future__ import annotations

import inspect
import textwrap
from collections.abc import Callable, Sequence
from typing import Any

from . import regimes
from .case import (
    UNREFERENCED_PAGES,
    Case,
    dequantize_fp8,
    descale_rows,
    draw_args,
    draw_qkv,
    draw_sinks,
    padded_layout,
    paged_layout,
    poison_pages,
    poison_slots,
    quantize_fp8,
    window_pages,
)
from .maskcheck import key_ranges, span_words
from .maskscale import MIN_RESIDUE_PASSES, moduli, residue_values, state
from .reference import P_FP8_OFFSET, round_p_fp8
from .verdict import BUDGETS

#: The signature of an fp8 case's ``attention``: the backend's template takes the descales too.
FP8_SIGNATURE = "def attention(q, k, v, descales)"


def embed(functions: Sequence[Callable[..., Any]], attention: str, head: str = "") -> str:
    """A backend's part of a script: ``head`` (module-level imports and constants), each of
    ``functions`` copied as it is (:func:`inspect.getsource`: the code ``run`` calls, so the two
    cannot drift), then ``attention``, the short generated ``attention(q, k, v)`` that calls them
    with the case's numbers. ``head`` and ``attention`` are dedented."""
    parts = [textwrap.dedent(head).strip()] if head.strip() else []
    parts += [inspect.getsource(fn).strip() for fn in functions]
    parts.append(textwrap.dedent(attention).strip())
    return "\n\n\n".join(parts) + "\n"


def grad_call() -> str:
    """The default backward part of a script: :func:`parity.grad.autograd_grads` through the
    backend's ``attention`` (what ``Backend.backward`` does)."""
    from .grad import autograd_grads

    return embed(
        [autograd_grads],
        """\
        def attention_grads(q, k, v, dout):
            return autograd_grads(attention, q, k, v, dout)  # autograd through the same call, as the harness did
        """,
    )


def case_constants(case: Case, device: str, reads: str | None = None) -> str:
    """The case as the script's module constants (``reads``: the read probe's cache layout, or None)."""
    w = case.window
    budget = BUDGETS[case.dtype]
    sinks = draw_sinks(case.seed, case.hq).tolist() if case.sinks else None
    return textwrap.dedent(
        f"""\
        # -- the case ({case.summary()}) --
        Q_LENS = {list(case.q_lens)!r}  # queries per sequence (packed along dim 0)
        K_LENS = {list(case.k_lens)!r}  # keys per sequence
        HQ, HKV, HEAD_DIM = {case.hq}, {case.hkv}, {case.head_dim}  # query head h reads kv head h // (HQ // HKV)
        DTYPE = torch.{case.dtype}
        WINDOW = ({w.left!r}, {w.right!r}, {w.align!r})  # (left, right, align) of the spec; None = unbounded
        SCALE = {case.softmax_scale!r}  # softmax scale
        SOFTCAP = {case.softcap!r}  # tanh softcap of the scores (None: none)
        PAGE_SIZE = {case.page_size!r}  # KV page size (None: contiguous)
        CHUNK = {case.chunk!r}  # chunked local attention: key and query position i + Sk - Sq in one chunk of CHUNK keys (None: off)
        SINKS = {sinks!r}  # learned sink logit per query head, natural-log units, unscaled (None: no sinks)
        KV_DTYPE = {case.kv_dtype!r}  # fp8 KV cache: k and v quantized to it, one per-tensor descale each (None: off)
        Q_FP8 = {case.q_fp8!r}  # the query quantized too (with KV_DTYPE)
        FP8_SCALES = {case.fp8_scales!r}  # the descales' layout: 'tensor' (), 'kv_head' (HKV,), 'batch_kv_head' (B, HKV)
        READ_PROBE = {reads!r}  # the read probe's cache: 'paged' / 'padded' (NaN where an engine holds garbage); None: not run
        SEED = {case.seed}
        DEVICE = {device!r}
        DRAW_ARGS = {draw_args(case)!r}
        K_MAX, ABS_FLOOR = {budget.k_max!r}, {budget.abs_floor!r}  # the harness's max-error budget for {case.dtype}
        K_MEAN, MEAN_FLOOR = {budget.k_mean!r}, {budget.mean_floor!r}  # and its mean-error budget
        SUMMARY = {case.summary()!r}
        """
    )


def input_code(case: Case) -> str:
    """``draw_qkv`` (and ``paged_layout`` for paged cases; ``quantize_fp8``, ``dequantize_fp8`` and
    :func:`parity.reference.round_p_fp8` for fp8 cases), copied from :mod:`parity.case` as they are."""
    lines = inspect.getsource(regimes).splitlines()
    body = "\n".join(x for x in lines if x.strip() != "from __future__ import annotations")
    body = body.split('"""', 2)[2] if body.startswith('"""') else body  # the module docstring stays in parity
    parts = [f"# -- input regimes (as in attn-parity's regimes.py) --{body}\napply_regime = apply", inspect.getsource(draw_qkv)]
    if case.page_size is not None:
        parts.append(inspect.getsource(paged_layout))
    if case.kv_dtype is not None:
        parts += [inspect.getsource(quantize_fp8), inspect.getsource(descale_rows), inspect.getsource(dequantize_fp8)]
        parts.append(
            f"P_FP8_OFFSET = {P_FP8_OFFSET!r}  # the baseline's fp8 P: P x 2**8 in fp8, as FA3's fp8 P @ V\n\n\n"
            + inspect.getsource(round_p_fp8)
        )
    return "\n\n".join(p.rstrip() + "\n" for p in parts)


def reads_code(reads: str, call: str) -> str:
    """The read probe's part of a script (``reads``: ``paged`` or ``padded``, the cache the backend's call
    builds): :func:`parity.case.window_pages`, :func:`~parity.case.poison_pages`, :func:`~parity.case.poison_slots`
    and :func:`parity.maskcheck.span_words` copied as they are (``padded_layout`` too where ``call`` lacks it),
    then :data:`READS`: the layout function wrapped so that, while the probe runs, the cache holds NaN where the
    harness's probe puts it."""
    fns: list[Callable[..., Any]] = [window_pages, poison_pages, poison_slots, span_words]
    if reads == "padded" and "def padded_layout" not in call:
        fns.insert(0, padded_layout)
    head = f"# -- the read probe, as attn-parity's (poison_paged / poison_padded) --\nUNREFERENCED_PAGES = {UNREFERENCED_PAGES}\n"
    wrap = READS_PAGED if reads == "paged" else READS_PADDED
    return "\n\n".join([head, *(inspect.getsource(f).rstrip() + "\n" for f in fns), wrap, READS])


def docstring(meta: dict[str, Any]) -> str:
    """The script's docstring: what, the harness's words, the environment, how to run it."""
    lines = [f"{meta['backend']} vs a float64 reference: {meta['summary']}", ""]
    if meta.get("shrunk"):
        lines += [f"This is the smaller case the harness shrank {meta['shrunk']}.", ""]
    if meta.get("control_of"):
        lines += [
            f"A control: the case on which {meta['control_of']} diverges, called through {meta['backend']}, a",
            "backend without that divergence; it should exit 0.",
            "",
        ]
    on = f" on {meta['row_summary']}" if meta.get("row_summary") else ""
    if not meta.get("control_of"):
        lines.append(f"Harness verdict{on}: {meta['verdict']}" + (f" [{meta['reasons']}]" if meta.get("reasons") else ""))
    for key, label in (
        ("errors", "error"),
        ("mask_detail", "mask probe"),
        ("gqa_detail", "GQA probe"),
        ("lse_detail", "log-sum-exp"),
        ("worst_where", "worst element"),
        ("grad_detail", "backward"),
        ("detail", "detail"),
    ):
        if meta.get(key):
            lines.append(f"  {label}: {meta[key]}")
    if meta.get("lse_detail"):
        lines += [
            "  This script checks the output and the mask, not the log-sum-exp: where the row failed on `lse`",
            "  alone it exits 0; `python -m parity run --backend ... --case ...` (its repro line) checks the LSE.",
        ]
    lines += [
        "",
        f"Library seen by the run: {meta.get('version') or 'unknown'}",
        f"torch seen by the run: {meta.get('torch') or 'unknown'}; GPU: {meta.get('gpu') or 'none'}",
        f"From: {meta.get('source', '')}",
        f"Case (attn-parity JSON): {meta['case_json']}",
        "",
        f"Run: {meta['command']}",
        "Exit status: 1 when the output differs from the float64 reference beyond the tolerance printed",
        "(K_MAX x the same naive computation's error in the case's dtype + a floor; and the mean error, K_MEAN x), when the mask",
        "probe finds other keys than the spec, or when the backend raises; 2 when this machine cannot",
        "run it (the backend's package does not import, no CUDA device); 0 otherwise.",
        "",
        "The spec: query i of a sequence with Sq queries and Sk keys sees key j iff",
        "i + d - left <= j <= i + d + right (inclusive; d = Sk - Sq for bottom_right, 0 for top_left;",
        "None = unbounded), and with CHUNK, j in the chunk of i + Sk - Sq; SINKS add exp(sink) to each row's",
        "softmax denominator; a query that sees no key outputs 0. Needs torch and the backend's package",
        "only (written by attn-parity's export-repro; it does not import attn-parity).",
    ]
    lines += feature_lines(meta)
    if meta.get("grad"):
        lines += [
            "",
            "The backward too (a row of `parity run --grad`): exit 1 also when dq, dk or dv differ from the",
            "float64 reference gradients beyond their tolerance, hold NaN/Inf, or dk/dv are nonzero for keys",
            "outside every window.",
        ]
    text = "\n".join(lines).replace("\\", "\\\\").replace('"""', '\\"\\"\\"')
    return f'"""{text}\n"""\n'


#: The docstring's words for each descale layout (``Case.fp8_scales``).
SCALE_WORDS = {
    "tensor": "one per-tensor descale",
    "kv_head": "one descale per kv head (HKV,)",
    "batch_kv_head": "one descale per sequence and kv head (B, HKV)",
}


def feature_lines(meta: dict[str, Any]) -> list[str]:
    """The docstring's words on the fp8 inputs and the read probe, where the script has them."""
    lines: list[str] = []
    if meta.get("kv_dtype"):
        quantized = "q, k and v" if meta.get("q_fp8") else "k and v"
        lines += [
            "",
            f"fp8 inputs: {quantized} quantized to {meta['kv_dtype']} with {SCALE_WORDS[meta.get('fp8_scales', 'tensor')]} each",
            "(amax / the fp8 maximum, as the harness's quantize_fp8), passed to the backend with the descales as the harness",
            "passes them;",
            "the float64 reference computes on the dequantized values (each fp8 value x its descale), and the",
            "same-dtype baseline rounds the probabilities to the fp8 dtype (P x 2**8) before P @ V, as the harness's budget does.",
        ]
    if meta.get("reads"):
        where = (
            "the pages wholly outside every window of their sequence, the unused tail of each last page and a page no "
            "block table references"
            if meta["reads"] == "paged"
            else "the cache slots past each sequence's used length"
        )
        lines += [
            "",
            f"Read probe ({meta['reads']} cache): the call again with NaN in",
            f"{where}: the positions that hold garbage in a real engine; the visible keys unchanged. A kernel that",
            "reads only what it needs stays finite; NaN/Inf in the output means it read them (NaN x 0 = NaN): exit 1,",
            "naming the rows and the poisoned span (the harness's reason reads_outside_window).",
        ]
    return lines


def build_script(case: Case, call: str, device: str, meta: dict[str, Any], grad: str = "", reads: str | None = None) -> str:
    """The whole script: docstring, imports, the case, inputs, the backend's call, :data:`COMMON`;
    ``grad``: the backward part (:func:`grad_call` or the backend's ``repro_backward``), then
    :data:`COMMON_GRAD`, whose ``main`` checks the gradients after the forward; ``reads``: the cache
    the read probe poisons (``paged``, ``padded``: :func:`reads_code`), or None where the harness has
    no read probe for the row. An fp8 case's ``call`` defines ``attention(q, k, v, descales)``
    (:data:`FP8_SIGNATURE`)."""
    if reads not in (None, "paged", "padded"):
        raise ValueError(f"reads must be None, 'paged' or 'padded', got {reads!r}")
    if case.kv_dtype is not None and FP8_SIGNATURE not in call:
        raise ValueError(f"an fp8 case's call must define {FP8_SIGNATURE}: (the descales as the harness passes them)")
    meta = {**meta, "reads": reads, "kv_dtype": case.kv_dtype, "q_fp8": case.q_fp8, "fp8_scales": case.fp8_scales}
    parts = [
        docstring(meta),
        "from __future__ import annotations\n\nimport math\nimport os\nimport sys\n\nimport torch\n",
        case_constants(case, device, reads),
        CANNOT_RUN,
        input_code(case),
        COMMON_HELPERS + "\n\n" + inspect.getsource(key_ranges),
        residue_code(),
        "# -- the backend's call, as the harness makes it --\n" + call.strip() + "\n",
        *([reads_code(reads, call)] if reads else []),
        COMMON,
    ]
    if grad:
        from .grad import draw_dout

        dout_args = dict(seed=case.seed, total_q=sum(case.q_lens), hq=case.hq, head_dim=case.head_dim, dtype=case.dtype)
        parts[-1] = COMMON.split(MAIN_GUARD)[0].rstrip() + "\n"
        parts += [
            "# -- the backward, as the harness calls it (parity run --grad) --\n" + grad.strip() + "\n",
            f"DOUT_ARGS = {dout_args!r}\n\n\n" + inspect.getsource(draw_dout),
            COMMON_GRAD,
        ]
    return "\n".join(parts)


def residue_code() -> str:
    """The scaled mask probe's arithmetic of :mod:`parity.maskscale`, copied as it is (torch and math only)."""
    head = f"# -- the scaled mask probe's passes, as attn-parity's maskscale.py --\nMIN_RESIDUE_PASSES = {MIN_RESIDUE_PASSES}\n"
    return "\n\n".join([head, *(inspect.getsource(f).rstrip() + "\n" for f in (moduli, residue_values, state))])


CANNOT_RUN = '''
def cannot_run(kind, exc, tb):
    """Exit 2, not Python's 1, when this machine lacks what the script needs (1 means: diverges)."""
    if issubclass(kind, ImportError) or (DEVICE == "cuda" and not torch.cuda.is_available()):
        print(f"CANNOT RUN on this machine (exit 2): {kind.__name__}: {exc}", flush=True)
        os._exit(2)
    sys.__excepthook__(kind, exc, tb)


sys.excepthook = cannot_run  # the backend's imports below run when the script starts
'''

COMMON_HELPERS = '''
def cu(lens):
    """Prefix sums: [0, l0, l0 + l1, ...]."""
    out = [0]
    for n in lens:
        out.append(out[-1] + n)
    return out


CU_Q, CU_K = cu(Q_LENS), cu(K_LENS)
'''

COMMON = '''
# -- the inputs as the backend gets them, the spec, the float64 reference, the mask probe --


def backend_inputs():
    """q, k, v as the harness hands them to the backend, on the CPU, and the descales: fp8 cases
    quantized with descales laid out as FP8_SCALES (k and v, q where Q_FP8), (q_descale or None, k_descale,
    v_descale); else None."""
    q, k, v = draw_qkv(**DRAW_ARGS)  # in DTYPE
    if KV_DTYPE is None:
        return q, k, v, None
    k, kd = quantize_fp8(k, KV_DTYPE, FP8_SCALES, K_LENS, HKV)
    v, vd = quantize_fp8(v, KV_DTYPE, FP8_SCALES, K_LENS, HKV)
    q, qd = quantize_fp8(q, KV_DTYPE, FP8_SCALES, Q_LENS, HKV) if Q_FP8 else (q, None)
    return q, k, v, (qd, kd, vd)


def values(q, k, v, descales, dtype):
    """The values the inputs stand for, in ``dtype``: each fp8 tensor x its descale (exact in float64), rounded once."""
    if descales is None:
        return q.to(dtype), k.to(dtype), v.to(dtype)
    return tuple(dequantize_fp8(x, d, dtype, lens) for x, d, lens in zip((q, k, v), descales, (Q_LENS, K_LENS, K_LENS)))


def call(q, k, v, descales=None):
    """The backend's call on DEVICE; an fp8 case's also gets the descales (float32, laid out as FP8_SCALES, on DEVICE)."""
    q, k, v = q.to(DEVICE), k.to(DEVICE), v.to(DEVICE)
    if descales is None:
        return attention(q, k, v)
    return attention(q, k, v, tuple(None if d is None else d.to(DEVICE) for d in descales))


def band(sq, sk):
    """Per query row, the first and last key the spec lets it see (lo > hi: none)."""
    left, right, align = WINDOW
    d = sk - sq if align == "bottom_right" else 0
    i = torch.arange(sq)
    lo = torch.zeros(sq, dtype=torch.long) if left is None else (i + d - left).clamp(min=0)
    hi = torch.full((sq,), sk - 1, dtype=torch.long) if right is None else (i + d + right).clamp(max=sk - 1)
    if CHUNK is not None:  # the chunk of the query's absolute position p = i + Sk - Sq: keys p - p % CHUNK ..
        p = i + sk - sq
        start = p - torch.remainder(p, CHUNK)
        lo, hi = torch.maximum(lo, start), torch.minimum(hi, start + CHUNK - 1)
    return lo, hi


def reference(q, k, v, dtype):
    """Masked attention in ``dtype`` on the CPU, per the spec; a row that sees no key is 0."""
    out = torch.zeros(q.shape, dtype=dtype)  # (total_q, hq, d)
    g = HQ // k.shape[1]  # HQ // HKV; 1 where k and v come with one head per query head (reference_grads)
    for b, (sq, sk) in enumerate(zip(Q_LENS, K_LENS)):
        lo, hi = band(sq, sk)
        j = torch.arange(sk)
        visible = (j[None, :] >= lo[:, None]) & (j[None, :] <= hi[:, None])  # (Sq, Sk)
        for h in range(HQ):
            qh = q[CU_Q[b] : CU_Q[b + 1], h].to(dtype)  # (Sq, d)
            kh = k[CU_K[b] : CU_K[b + 1], h // g].to(dtype)  # (Sk, d)
            vh = v[CU_K[b] : CU_K[b + 1], h // g].to(dtype)  # (Sk, d)
            s = (qh * SCALE) @ kh.T  # (Sq, Sk)
            if SOFTCAP is not None:
                s = torch.tanh(s / SOFTCAP) * SOFTCAP
            s = s.masked_fill(~visible, float("-inf"))  # (Sq, Sk)
            if SINKS is not None:  # the sink as one more column of the softmax, dropped after it
                s = torch.cat([s, torch.full((sq, 1), SINKS[h], dtype=dtype)], dim=-1)  # (Sq, Sk + 1)
            p = torch.softmax(s, dim=-1).nan_to_num(0.0)[:, :sk]  # (Sq, Sk)
            if KV_DTYPE is not None and dtype != torch.float64:  # an fp8 case's baseline: P as an fp8 P @ V GEMM sees it
                p = round_p_fp8(p, KV_DTYPE)  # (Sq, Sk)
            out[CU_Q[b] : CU_Q[b + 1], h] = p @ vh  # (Sq, d)
    return out


MAX_PROBE_PASSES = 64


def probe_keys(q, k, descales=None):
    """Which keys each (head, row) saw, per sequence as (hq, Sq, Sk) bool; None if too many passes.

    q = 0 makes every score 0 (also after a softcap), so softmax is uniform over the keys a row
    sees; V one-hot per key (pass p: key j carries e_(j - p*d) for p*d <= j < (p+1)*d) makes
    output [i, h, c] of pass p non-zero exactly when key p*d + c is visible to row i of head h.
    fp8 cases: q = 0 and the one-hot V in their fp8 dtype (exact), V's descale 1, as the harness's probe.
    """
    passes = -(-max(K_LENS) // HEAD_DIM)
    if passes > MAX_PROBE_PASSES:
        return None
    q0 = torch.zeros_like(q)  # (total_q, hq, d), in q's dtype
    unit = None if descales is None else (descales[0], descales[1], torch.ones_like(descales[2]))
    outs = []
    for p in range(passes):
        v = torch.zeros(CU_K[-1], HKV, HEAD_DIM, dtype=DTYPE)  # (total_k, hkv, d)
        for b, sk in enumerate(K_LENS):
            for j in range(p * HEAD_DIM, min(sk, (p + 1) * HEAD_DIM)):
                v[CU_K[b] + j, :, j - p * HEAD_DIM] = 1
        o = call(q0, k, v.to(k.dtype), unit)  # (total_q, hq, d)
        outs.append(o.detach().to("cpu", torch.float32).nan_to_num(nan=1.0))  # NaN: counted as seen
    seen = []
    for b, (sq, sk) in enumerate(zip(Q_LENS, K_LENS)):
        w = torch.cat([o[CU_Q[b] : CU_Q[b + 1]] for o in outs], dim=-1)[..., :sk].permute(1, 0, 2).abs()  # (hq, Sq, Sk)
        rowmax = w.amax(dim=-1, keepdim=True)  # (hq, Sq, 1)
        seen.append((w > rowmax * 2.0**-20) & (rowmax > 0))  # (hq, Sq, Sk)
    return seen


def probe_residues(q, k, descales=None):
    """The scaled probe, where the one-hot one needs more than MAX_PROBE_PASSES passes: in the pass of modulus m
    key j carries (-1)^(j div m) in channel j mod m, so a band a..x-1 reads state(x) - state(a) (0 or +-1 per
    channel, exact over the row's largest value). Returns the moduli and, per sequence, (hq, Sq) bool: the
    pairs whose readouts are not their spec band's (its keys, an extra or missing run of keys, NaN)."""
    mods = moduli(HEAD_DIM, max(K_LENS))
    q0 = torch.zeros_like(q)  # (total_q, hq, d), in q's dtype
    unit = None if descales is None else (descales[0], descales[1], torch.ones_like(descales[2]))
    outs = []
    for m in mods:
        v = torch.zeros(CU_K[-1], HKV, HEAD_DIM, dtype=DTYPE)  # (total_k, hkv, d)
        for b, sk in enumerate(K_LENS):
            ch, sign = residue_values(m, sk)  # (Sk,) each
            v[CU_K[b] + torch.arange(sk), :, ch] = sign[:, None].to(DTYPE).expand(-1, HKV)
        outs.append(call(q0, k, v.to(k.dtype), unit).detach().to("cpu", torch.float32))  # (total_q, hq, d)
    differ = []
    for b, (sq, sk) in enumerate(zip(Q_LENS, K_LENS)):
        lo, hi = band(sq, sk)
        want = torch.zeros(len(mods), sq, HEAD_DIM)  # (R, Sq, d)
        for t, m in enumerate(mods):
            want[t, :, :m] = (state(hi + 1, m) - state(lo, m)).float() * (lo <= hi)[:, None]
        w = torch.stack([o[CU_Q[b] : CU_Q[b + 1]] for o in outs])  # (R, Sq, hq, d)
        top = w.abs().amax(-1).amax(0)  # (Sq, hq)
        same = ((w / torch.where(top > 0, top, 1.0)[None, :, :, None] - want[:, :, None, :]).abs() <= 0.25).all(-1).all(0)
        ok = torch.where(top > 0, same & (lo <= hi)[:, None], (lo > hi)[:, None])  # (Sq, hq); NaN: not ok
        differ.append(~ok.T)  # (hq, Sq)
    return mods, differ


def report_residues(mods, differ, shown=5):
    """Print the (head, row) pairs whose residues are not their spec band's; their count."""
    bad, total = sum(int(d.sum()) for d in differ), sum(d.numel() for d in differ)
    how = f"{len(mods)} signed residue passes mod {'/'.join(map(str, mods))}"
    print(f"mask probe (scaled, {how}): {bad} of {total} (head, row) pairs read other keys than the spec")
    for b, h, i in [(b, h, i) for b, d in enumerate(differ) for h, i in d.nonzero().tolist()][:shown]:
        lo, hi = band(Q_LENS[b], K_LENS[b])
        spec = f"{int(lo[i])}..{int(hi[i])}" if lo[i] <= hi[i] else "none"
        print(f"  seq {b} head {h} row {i}: spec says keys {spec}; its residues say otherwise")
    return bad


def keys_text(seen, b, h, i):
    """'sees keys 0..16, spec says 1..16' for row i of head h in sequence b."""
    lo, hi = band(Q_LENS[b], K_LENS[b])
    spec = f"{int(lo[i])}..{int(hi[i])}" if lo[i] <= hi[i] else "none"
    if seen is None:
        return f"spec says keys {spec} (keys not listed: the one-hot probe needs more than {MAX_PROBE_PASSES} passes)"
    got = key_ranges(seen[b][h, i].nonzero().flatten().tolist())
    return f"sees keys {got}, spec says {spec}"


def locate(t):
    """Packed query row t -> (sequence, row within it)."""
    b = max(n for n in range(len(Q_LENS)) if CU_Q[n] <= t)
    return b, t - CU_Q[b]


def report_errors(got, ref, tol, seen, shown=5):
    """Print the (row, head) pairs that differ most; the count over the tolerance."""
    err = (got - ref).abs().nan_to_num(nan=float("inf"))  # (total_q, hq, d); NaN: infinitely wrong
    per = err.amax(dim=-1)  # (total_q, hq)
    over = int((per > tol).sum())
    print(f"max |backend - reference| = {float(err.max()):.6g}; mean {float(err.mean()):.6g}; tolerance {tol:.6g}")
    print(f"{over} of {per.numel()} (row, head) pairs differ beyond the tolerance")
    flat = per.flatten().argsort(descending=True)[: shown if over else 0].tolist()
    for n in flat:
        t, h = divmod(n, HQ)
        b, i = locate(t)
        c = int(err[t, h].argmax())
        print(f"  seq {b} row {i} head {h}: |err| {float(per[t, h]):.4g} (dim {c}: got {float(got[t, h, c]):.6g}, "
              f"want {float(ref[t, h, c]):.6g}); {keys_text(seen, b, h, i)}")
    return over


def report_mean(got, ref, same):
    """The harness's second rule: the mean error against K_MEAN x the same-dtype baseline's + a floor."""
    mean = float((got - ref).abs().nan_to_num(nan=float("inf")).mean())
    base = float((same - ref).abs().mean())  # same naive math in DTYPE
    tol = K_MEAN * base + MEAN_FLOOR
    print(f"mean |backend - reference| = {mean:.6g}; mean tolerance {K_MEAN:g} x same-dtype baseline {base:.4g} "
          f"+ floor {MEAN_FLOOR:.4g} = {tol:.4g} ({mean / tol if tol else float('inf'):.3g} of it)")
    return mean > tol


def report_mask(seen, shown=5):
    """Print the (head, row) pairs whose keys differ from the spec's; their count."""
    if seen is None:
        print(f"mask probe not run: it needs more than {MAX_PROBE_PASSES} passes")
        return 0
    bad, total, first = 0, 0, []
    for b, (sq, sk) in enumerate(zip(Q_LENS, K_LENS)):
        lo, hi = band(sq, sk)
        j = torch.arange(sk)
        spec = (j[None, :] >= lo[:, None]) & (j[None, :] <= hi[:, None])  # (Sq, Sk)
        diff = (seen[b] != spec[None]).any(dim=-1)  # (hq, Sq)
        bad += int(diff.sum())
        total += diff.numel()
        first += [(b, h, i) for h, i in diff.nonzero().tolist()][: shown - len(first)]
    print(f"mask probe: {bad} of {total} (head, row) pairs see other keys than the spec")
    for b, h, i in first:
        print(f"  seq {b} head {h} row {i} {keys_text(seen, b, h, i)}")
    return bad


def main():
    if DEVICE == "cuda" and not torch.cuda.is_available():
        print(f"CANNOT RUN on this machine (exit 2): no CUDA device (torch {torch.__version__})")
        return 2
    gpu = f", {torch.cuda.get_device_name()}" if torch.cuda.is_available() else ""
    print(f"torch {torch.__version__}, device {DEVICE}{gpu}")
    print(f"case: {SUMMARY}")
    q, k, v, descales = backend_inputs()  # on the CPU: DTYPE, or fp8 with their descales
    got = call(q, k, v, descales)  # (total_q, hq, d)
    if tuple(got.shape) != tuple(q.shape):
        print(f"DIFFERS: output shape {tuple(got.shape)}, expected {tuple(q.shape)}")
        return 1
    got = got.detach().to("cpu", torch.float64)
    ref = reference(*values(q, k, v, descales, torch.float64), torch.float64)  # (total_q, hq, d)
    same = reference(*values(q, k, v, descales, DTYPE), DTYPE).double()  # same naive math in DTYPE
    baseline = float((same - ref).abs().max())
    floor = max(ABS_FLOOR, 2 * float((ref.to(DTYPE).double() - ref).abs().max()))  # >= twice the rounding
    tol = K_MAX * baseline + floor
    print(f"tolerance = {K_MAX:g} x same-dtype baseline {baseline:.4g} + floor {floor:.4g} = {tol:.4g}")
    seen = probe_keys(q, k, descales)
    residues = probe_residues(q, k, descales) if seen is None else None
    over = report_errors(got, ref, tol, seen)
    mean_over = report_mean(got, ref, same)
    bad = report_mask(seen) if residues is None else report_residues(*residues)
    reads = read_probe(q, k, v, descales, got) if READ_PROBE else 0
    if reads:
        print(f"DIFFERS: READS OUTSIDE THE WINDOW: NaN from the poisoned KV positions reached {reads} (row, head) pairs (exit 1)")
    if over or mean_over or bad:
        print("DIFFERS from the float64 reference (exit 1)")
    if over or mean_over or bad or reads:
        return 1
    print("AGREES with the float64 reference (exit 0)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
'''

MAIN_GUARD = """if __name__ == "__main__":"""

COMMON_GRAD = '''
# -- the backward: float64 reference gradients, the budget per tensor, the exact checks --


def reference_grads(q, k, v, dout, dtype):
    """dq, dk, dv of the spec's attention in ``dtype`` (autograd of ``reference``), on the CPU. k and v enter
    with one head per query head, and a kv head's gradients are the sum over its group in float32, rounded
    once, as the harness's baseline sums them (an autograd through shared heads would add them in ``dtype``
    one head at a time, and so forgive a kernel that does the same)."""
    g = HQ // HKV
    leaves = [t.detach().to(dtype).requires_grad_(True) for t in (q, k.repeat_interleave(g, 1), v.repeat_interleave(g, 1))]
    out = reference(*leaves, dtype)  # (total_q, hq, d)
    dq, dk, dv = torch.autograd.grad(out, leaves, dout.to(dtype))  # dk, dv: (total_k, hq, d)
    acc = torch.float64 if dtype == torch.float64 else torch.float32
    return (dq, *(t.view(t.shape[0], HKV, g, -1).to(acc).sum(2).to(dtype) for t in (dk, dv)))  # (total_k, hkv, d)


def unseen_keys():
    """(total_k,) bool: the keys no query row of their sequence sees."""
    parts = []
    for sq, sk in zip(Q_LENS, K_LENS):
        lo, hi = band(sq, sk)
        j = torch.arange(sk)
        parts.append(~((j[None, :] >= lo[:, None]) & (j[None, :] <= hi[:, None])).any(0))
    return torch.cat(parts)


def check_grads(q, k, v):
    """The gradients against the float64 reference; the count of failed checks."""
    dout = draw_dout(**DOUT_ARGS)  # (total_q, hq, d), the seeded upstream gradient
    got = attention_grads(q.to(DEVICE), k.to(DEVICE), v.to(DEVICE), dout.to(DEVICE))
    ref = reference_grads(q, k, v, dout, torch.float64)
    same = reference_grads(q, k, v, dout, DTYPE)  # the same naive backward in DTYPE: the budget
    unseen, failed = unseen_keys(), 0
    for name, g, r, s in zip(("dq", "dk", "dv"), got, ref, same):
        g = g.detach().to("cpu", torch.float64)
        tol = K_MAX * float((s.double() - r).abs().max()) + max(ABS_FLOOR, 2 * float((r.to(DTYPE).double() - r).abs().max()))
        mean_tol = K_MEAN * float((s.double() - r).abs().mean()) + MEAN_FLOOR  # the harness's mean rule, as for the output
        err = (g - r).abs().nan_to_num(nan=float("inf"))
        bad = int((~torch.isfinite(g)).sum())
        print(f"{name}: max |backend - reference| = {float(err.max()):.6g}; tolerance {tol:.6g}; "
              f"mean {float(err.mean()):.6g}, tolerance {mean_tol:.6g}; {bad} non-finite")
        failed += float(err.max()) > tol or float(err.mean()) > mean_tol or bad > 0
        if name != "dq":
            outside = int(((g != 0).flatten(1).any(-1) & unseen).sum())
            if outside:
                print(f"  {name} nonzero for {outside} keys outside every window (must be exactly 0)")
                failed += 1
    return failed


def main_with_grads():
    code = main()
    if code == 2:
        return code
    if check_grads(*draw_qkv(**DRAW_ARGS)):
        print("the BACKWARD DIFFERS from the float64 reference (exit 1)")
        return 1
    print("the backward AGREES with the float64 reference")
    return code


if __name__ == "__main__":
    sys.exit(main_with_grads())
'''

READS_PAGED = '''
harness_paged_layout = paged_layout  # the harness's layout, wrapped for the read probe below


def paged_layout(k, v, k_lens, page_size, seed):
    """The harness's paged_layout; while the read probe runs, NaN where an engine's cache holds garbage."""
    k_cache, v_cache, table, seqlens = harness_paged_layout(k, v, k_lens, page_size, seed)
    if PROBE["on"]:
        seen = [window_pages(*band(Q_LENS[b], sk), sk, page_size) for b, sk in enumerate(k_lens)]  # (pages_b,) each
        k_cache, v_cache = poison_pages(k_cache, v_cache, table, list(k_lens), page_size, seen, UNREFERENCED_PAGES)
        PROBE["layouts"].append(("paged", page_size))
    return k_cache, v_cache, table, seqlens
'''

READS_PADDED = '''
harness_padded_layout = padded_layout  # the harness's layout, wrapped for the read probe below


def padded_layout(k, v, k_lens, capacity):
    """The harness's padded_layout; while the read probe runs, NaN past each sequence's used length."""
    k_cache, v_cache, seqlens = harness_padded_layout(k, v, k_lens, capacity)
    if PROBE["on"]:
        k_cache, v_cache = poison_slots(k_cache, v_cache, list(k_lens))
        PROBE["layouts"].append(("padded", capacity))
    return k_cache, v_cache, seqlens
'''

READS = '''
PROBE = {"on": False, "layouts": []}  # set by read_probe: the layout function poisons the cache it builds


def poisoned_span(b):
    """Sequence b's poisoned key positions in words, as the harness's read probe words them (span_words)."""
    kind, size = PROBE["layouts"][-1]
    sk = K_LENS[b]
    if kind == "padded":
        return span_words(sk, size, [])
    return span_words(sk, size, (~window_pages(*band(Q_LENS[b], sk), sk, size)).nonzero().flatten().tolist(), paged=True)


def read_probe(q, k, v, descales, got, shown=5):
    """The call again with the cache as an engine holds it (NaN where it holds garbage); the count of
    (row, head) pairs whose output is NaN/Inf there and finite in the case's own run (``got``)."""
    PROBE["on"], PROBE["layouts"] = True, []
    try:
        out = call(q, k, v, descales).detach().to("cpu", torch.float32)  # (total_q, hq, d)
    finally:
        PROBE["on"] = False
    if not PROBE["layouts"]:
        print("read probe not run: the backend's call built no cache through paged_layout / padded_layout")
        return 0
    bad = (~torch.isfinite(out)).any(-1) & torch.isfinite(got).all(-1)  # (total_q, hq); NaN already: the error check's
    if PROBE["layouts"][-1][0] == "paged":
        what = f"pages outside every window, the tails of last pages and {UNREFERENCED_PAGES} null page (padding slots point at it)"
    else:
        what = "cache slots past each sequence's used length"
    print(f"read probe: {int(bad.sum())} of {bad.numel()} (row, head) pairs NaN/Inf with NaN in the {what}")
    words = []
    for b in range(len(Q_LENS)):
        hb = bad[CU_Q[b] : CU_Q[b + 1]].T  # (hq, Sq)
        if hb.any():
            h = int(hb.any(1).nonzero()[0])
            rows = key_ranges(hb[h].nonzero().flatten().tolist())
            words.append(f"  seq {b} head {h} rows {rows} read NaN-poisoned KV (poisoned {poisoned_span(b)})")
    for line in words[:shown]:
        print(line)
    return int(bad.sum())
'''
