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
  the same-dtype baseline that sets the tolerance, the ``q = 0`` / one-hot ``V`` mask probe,
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
from .case import Case, draw_args, draw_qkv, draw_sinks, paged_layout
from .verdict import BUDGETS


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


def case_constants(case: Case, device: str) -> str:
    """The case as the script's module constants."""
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
        SEED = {case.seed}
        DEVICE = {device!r}
        DRAW_ARGS = {draw_args(case)!r}
        K_MAX, ABS_FLOOR = {budget.k_max!r}, {budget.abs_floor!r}  # the harness's max-error budget for {case.dtype}
        K_MEAN, MEAN_FLOOR = {budget.k_mean!r}, {budget.mean_floor!r}  # and its mean-error budget
        SUMMARY = {case.summary()!r}
        """
    )


def input_code(case: Case) -> str:
    """``draw_qkv`` (and ``paged_layout`` for paged cases), copied from :mod:`parity.case` as they are."""
    lines = inspect.getsource(regimes).splitlines()
    body = "\n".join(x for x in lines if x.strip() != "from __future__ import annotations")
    body = body.split('"""', 2)[2] if body.startswith('"""') else body  # the module docstring stays in parity
    parts = [f"# -- input regimes (as in attn-parity's regimes.py) --{body}\napply_regime = apply", inspect.getsource(draw_qkv)]
    if case.page_size is not None:
        parts.append(inspect.getsource(paged_layout))
    return "\n\n".join(p.rstrip() + "\n" for p in parts)


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
    if meta.get("grad"):
        lines += [
            "",
            "The backward too (a row of `parity run --grad`): exit 1 also when dq, dk or dv differ from the",
            "float64 reference gradients beyond their tolerance, hold NaN/Inf, or dk/dv are nonzero for keys",
            "outside every window.",
        ]
    text = "\n".join(lines).replace("\\", "\\\\").replace('"""', '\\"\\"\\"')
    return f'"""{text}\n"""\n'


def build_script(case: Case, call: str, device: str, meta: dict[str, Any], grad: str = "") -> str:
    """The whole script: docstring, imports, the case, inputs, the backend's call, :data:`COMMON`;
    ``grad``: the backward part (:func:`grad_call` or the backend's ``repro_backward``), then
    :data:`COMMON_GRAD`, whose ``main`` checks the gradients after the forward."""
    parts = [
        docstring(meta),
        "from __future__ import annotations\n\nimport os\nimport sys\n\nimport torch\n",
        case_constants(case, device),
        CANNOT_RUN,
        input_code(case),
        COMMON_HELPERS,
        "# -- the backend's call, as the harness makes it --\n" + call.strip() + "\n",
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
# -- the spec, the float64 reference, the mask probe --


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
    g = HQ // HKV
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
            out[CU_Q[b] : CU_Q[b + 1], h] = p @ vh  # (Sq, d)
    return out


MAX_PROBE_PASSES = 64


def probe_keys(k):
    """Which keys each (head, row) saw, per sequence as (hq, Sq, Sk) bool; None if too many passes.

    q = 0 makes every score 0 (also after a softcap), so softmax is uniform over the keys a row
    sees; V one-hot per key (pass p: key j carries e_(j - p*d) for p*d <= j < (p+1)*d) makes
    output [i, h, c] of pass p non-zero exactly when key p*d + c is visible to row i of head h.
    """
    passes = -(-max(K_LENS) // HEAD_DIM)
    if passes > MAX_PROBE_PASSES:
        return None
    q0 = torch.zeros(CU_Q[-1], HQ, HEAD_DIM, dtype=DTYPE)  # (total_q, hq, d)
    outs = []
    for p in range(passes):
        v = torch.zeros(CU_K[-1], HKV, HEAD_DIM, dtype=DTYPE)  # (total_k, hkv, d)
        for b, sk in enumerate(K_LENS):
            for j in range(p * HEAD_DIM, min(sk, (p + 1) * HEAD_DIM)):
                v[CU_K[b] + j, :, j - p * HEAD_DIM] = 1
        o = attention(q0.to(DEVICE), k.to(DEVICE), v.to(DEVICE))  # (total_q, hq, d)
        outs.append(o.detach().to("cpu", torch.float32).nan_to_num(nan=1.0))  # NaN: counted as seen
    seen = []
    for b, (sq, sk) in enumerate(zip(Q_LENS, K_LENS)):
        w = torch.cat([o[CU_Q[b] : CU_Q[b + 1]] for o in outs], dim=-1)[..., :sk].permute(1, 0, 2).abs()  # (hq, Sq, Sk)
        rowmax = w.amax(dim=-1, keepdim=True)  # (hq, Sq, 1)
        seen.append((w > rowmax * 2.0**-20) & (rowmax > 0))  # (hq, Sq, Sk)
    return seen


def ranges(keys):
    """[0, 1, 2, 5] -> '0..2, 5'; [] -> 'none'."""
    parts, run = [], []
    for j in keys:
        if run and j != run[-1] + 1:
            parts.append(f"{run[0]}..{run[-1]}" if len(run) > 1 else f"{run[0]}")
            run = []
        run.append(j)
    if run:
        parts.append(f"{run[0]}..{run[-1]}" if len(run) > 1 else f"{run[0]}")
    return ", ".join(parts) or "none"


def keys_text(seen, b, h, i):
    """'sees keys 0..16, spec says 1..16' for row i of head h in sequence b."""
    lo, hi = band(Q_LENS[b], K_LENS[b])
    spec = f"{int(lo[i])}..{int(hi[i])}" if lo[i] <= hi[i] else "none"
    if seen is None:
        return f"spec says keys {spec} (mask probe not run: too many passes)"
    got = ranges(seen[b][h, i].nonzero().flatten().tolist())
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


def report_mean(got, ref, q, k, v):
    """The harness's second rule: the mean error against K_MEAN x the same-dtype baseline's + a floor."""
    mean = float((got - ref).abs().nan_to_num(nan=float("inf")).mean())
    base = float((reference(q, k, v, DTYPE).double() - ref).abs().mean())  # same naive math in DTYPE
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
    q, k, v = draw_qkv(**DRAW_ARGS)  # on the CPU, in DTYPE
    got = attention(q.to(DEVICE), k.to(DEVICE), v.to(DEVICE))  # (total_q, hq, d)
    if tuple(got.shape) != tuple(q.shape):
        print(f"DIFFERS: output shape {tuple(got.shape)}, expected {tuple(q.shape)}")
        return 1
    got = got.detach().to("cpu", torch.float64)
    ref = reference(q, k, v, torch.float64)  # (total_q, hq, d)
    baseline = float((reference(q, k, v, DTYPE).double() - ref).abs().max())  # same naive math in DTYPE
    floor = max(ABS_FLOOR, 2 * float((ref.to(DTYPE).double() - ref).abs().max()))  # >= twice the rounding
    tol = K_MAX * baseline + floor
    print(f"tolerance = {K_MAX:g} x same-dtype baseline {baseline:.4g} + floor {floor:.4g} = {tol:.4g}")
    seen = probe_keys(k)
    over = report_errors(got, ref, tol, seen)
    mean_over = report_mean(got, ref, q, k, v)
    bad = report_mask(seen)
    if over or mean_over or bad:
        print("DIFFERS from the float64 reference (exit 1)")
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
    """dq, dk, dv of the spec's attention in ``dtype`` (autograd of ``reference``), on the CPU."""
    leaves = [t.detach().to(dtype).requires_grad_(True) for t in (q, k, v)]
    out = reference(*leaves, dtype)
    return torch.autograd.grad(out, leaves, dout.to(dtype))


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
        err = (g - r).abs().nan_to_num(nan=float("inf"))
        bad = int((~torch.isfinite(g)).sum())
        print(f"{name}: max |backend - reference| = {float(err.max()):.6g}; tolerance {tol:.6g}; {bad} non-finite")
        failed += float(err.max()) > tol or bad > 0
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
