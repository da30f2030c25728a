"""The decode study on a language model: how often does an honest backend swap flip a greedy token?

``parity decode --lm MODEL`` (:func:`run_study`). ``MODEL`` is a folder written by
``python -m parity decode-train`` or the preset ``cpu-tiny`` (trained and cached on the fly).
For ``prompts`` held-out snippets of the standard library (``prompt_len`` bytes each):

1. **Reference**: the model in float64 with float64 attention decodes ``steps`` greedy tokens
   (batched: one packed call per layer and step).
2. Per dtype, **noise**: the model in that dtype with the naive same-dtype attention,
   teacher-forced along the reference tokens; its largest logit error against the reference
   (over every prompt and step) is the dtype's measured noise, and ``tie_factor x noise`` the
   near-tie threshold.
3. Per dtype and **backend**: the model in that dtype with every attention call a packed
   varlen :class:`parity.Case` handed to ``backend.run`` (``q_lens = (1,) * B`` in decode),
   teacher-forced along the same reference tokens, so every backend and the reference are
   compared at the same prefix. Until its first flip a free-running greedy decode is this
   same computation, so the first flip is where its greedy output would first diverge.

A **flip** is a step whose argmax differs from the reference's token (or, for the swap
comparison, from the ``swap_from`` backend's argmax at the same prefix). It is a **near-tie**
when the float64 reference's top-1/top-2 margin there is at most the threshold, and **real**
above it: an honest kernel moves logits by about the noise, so it can only flip positions
whose margin is within a few times the noise; a window bug flips confident tokens.
Outputs: ``lm_decode.csv`` (one row per backend and dtype, :data:`COLUMNS`),
``lm_flips.csv`` (every flip), ``lm_decode.json`` and ``decode_summary.md`` (the text for a PR).
"""

from __future__ import annotations

import copy
import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from .. import runfolder_decode
from ..backends import Backend, Unsupported
from ..case import DTYPES, Case, Inputs
from ..errors import UserError
from ..results import Outcome
from ..window import Window
from . import lm
from .run import _error_detail, _f, checked_run, load_backends, margins, step_errors

COLUMNS = [
    "backend",
    "backend_name",
    "dtype",
    "device",
    "verdict",
    "prompts",
    "steps_done",
    "tokens",
    "noise",
    "tie_threshold",
    "flips",
    "flips_per_1000",
    "near_tie_flips",
    "real_flips",
    "near_tie_share",
    "max_flip_margin_over_noise",
    "prompts_diverged",
    "first_div_median",
    "first_div_min",
    "kl_mean",
    "kl_max",
    "err_median",
    "err_max",
    "err_over_noise",
    "swap_from",
    "swap_flips",
    "swap_real_flips",
    "swap_tokens_per_flip",
    "swap_first_div_median",
    "time_s",
    "detail",
]
FLIP_COLUMNS = [
    "backend",
    "dtype",
    "vs",
    "prompt",
    "step",
    "ref_token",
    "backend_token",
    "ref_margin",
    "margin_over_noise",
    "err",
    "class",
    "context",
]
BASELINE = "baseline"


@dataclasses.dataclass(frozen=True)
class StudyConfig:
    model: str = "cpu-tiny"  # a model folder, or a fixed-step preset of parity.decode.train.PRESETS
    dtypes: tuple[str, ...] = ("bfloat16", "float16")
    prompts: int = 48
    prompt_len: int | None = None  # None: a quarter of the training context, at least twice the window
    steps: int | None = None  # None: half the training context, at most what is left of it after the prompt
    device: str = "cpu"
    tie_factor: float = 4.0
    time_limit: float = 10.0  # seconds per backend and dtype, after its warm-up (prefill + first step)
    swap_from: str | None = None  # None: the first backend
    seed: int = 0
    use_cache: bool = True


@dataclasses.dataclass
class StudyResult:
    rows: list[dict]
    flips: list[dict]
    meta: dict
    summary: str
    seconds: float

    @property
    def failed(self) -> bool:
        return any(r["verdict"] in (Outcome.FAIL, Outcome.ERROR) for r in self.rows)


# -- the model and its prompts ---------------------------------------------------------------------


def load_model(cfg: StudyConfig, log) -> tuple[lm.TextLM, dict, dict, bytes]:
    """``(model, config, metrics, held-out bytes)`` of ``cfg.model`` (a folder or a preset)."""
    from .train import PRESETS, cached

    if cfg.model in PRESETS:
        model, config, metrics, _ = cached(cfg.model, log, cfg.use_cache)
        max_bytes = PRESETS[cfg.model].max_bytes
    else:
        if not Path(cfg.model).is_dir():
            raise UserError(f"--lm {cfg.model}: neither a model folder nor a preset ({', '.join(sorted(PRESETS))})")
        model, config, metrics = lm.load(Path(cfg.model))
        max_bytes = config.get("train", {}).get("max_bytes")
    corpus = lm.load_corpus(max_bytes)
    config = {**config, "study_corpus_digest": corpus.digest}
    if config.get("corpus", {}).get("digest") not in (None, corpus.digest):
        log(f"decode: note: this Python's standard library differs from the training corpus ({corpus.digest})")
    return model, config, metrics, corpus.heldout


# -- attention routing -----------------------------------------------------------------------------


def backend_attn(backend: Backend, dtype: str, hq: int, hkv: int, head_dim: int):
    """Every packed call becomes one :class:`Case` (``q_lens``, ``k_lens``) for ``backend.run``."""
    dev = torch.device(getattr(backend, "device", "cpu"))
    tdt = DTYPES[dtype]

    def attn(layer, q, k, v, window: Window, softcap, q_lens, k_lens):
        case = Case(tuple(q_lens), tuple(k_lens), hq, hkv, head_dim, dtype, window, None, softcap)
        reason = backend.unsupported_reason(case)
        if reason:
            raise Unsupported(reason)
        cu_q = torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()], dtype=torch.int32, device=dev)
        cu_k = torch.tensor([0, *torch.tensor(k_lens).cumsum(0).tolist()], dtype=torch.int32, device=dev)
        inputs = Inputs(case, q.to(dev, tdt), k.to(dev, tdt), v.to(dev, tdt), cu_q, cu_k)
        return checked_run(backend, case, inputs).to(q.device)

    return attn


# -- trajectories ----------------------------------------------------------------------------------


@torch.no_grad()
def greedy(model: lm.TextLM, prompts: torch.Tensor, steps: int, attn, dtype, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy decode of every prompt: tokens ``(B, steps)`` and logits ``(steps, B, V)`` float64."""
    b, p = prompts.shape
    cache = model.new_batch_cache(b, p + steps, dtype, device)
    logits = [model.step(prompts.to(device), 0, cache, attn)]  # (B, V) each
    toks = [logits[0].argmax(-1)]
    for s in range(1, steps):
        logits.append(model.step(toks[-1][:, None], p + s - 1, cache, attn))
        toks.append(logits[-1].argmax(-1))
    return torch.stack(toks, 1).cpu(), torch.stack(logits).double().cpu()


@torch.no_grad()
def teacher_forced(model, prompts, ref_tokens: torch.Tensor, attn, dtype, device, time_limit: float | None = None) -> torch.Tensor:
    """Logits ``(n, B, V)`` float64 along ``ref_tokens`` ``(B, N)``; ``n < N`` when ``time_limit``
    (seconds after the prefill and first decode step, the warm-up) ran out."""
    b, p = prompts.shape
    n = ref_tokens.shape[1]
    cache = model.new_batch_cache(b, p + n, dtype, device)
    logits = [model.step(prompts.to(device), 0, cache, attn)]
    deadline = None
    for s in range(1, n):
        logits.append(model.step(ref_tokens[:, s - 1 : s].to(device), p + s - 1, cache, attn))
        if s == 1 and time_limit is not None:
            deadline = time.perf_counter() + time_limit
        if deadline is not None and time.perf_counter() > deadline:
            break
    return torch.stack(logits).double().cpu()


# -- measures --------------------------------------------------------------------------------------


def first_flips(flip: torch.Tensor) -> torch.Tensor:
    """Per prompt, the first step with a flip (``flip`` ``(n, B)`` bool), ``n`` where none."""
    n = flip.shape[0]
    idx = torch.arange(n)[:, None].expand_as(flip)  # (n, B)
    return torch.where(flip, idx, torch.full_like(idx, n)).amin(0)  # (B,)


def classify(flip: torch.Tensor, ref_margin: torch.Tensor, threshold: float) -> tuple[int, int, int]:
    """``(flips, near-tie flips, real flips)`` of a ``(n, B)`` flip mask by the reference margin."""
    real = flip & (ref_margin > threshold)
    return int(flip.sum()), int((flip & ~real).sum()), int(real.sum())


@dataclasses.dataclass
class Measured:
    """One backend in one dtype, teacher-forced: its argmax and the per-step measures."""

    argmax: torch.Tensor  # (n, B)
    err: torch.Tensor  # (n, B) max-abs logit error against the reference
    kl: torch.Tensor  # (n, B) KL(reference || backend)


def measure(tf: torch.Tensor, ref_logits: torch.Tensor) -> Measured:
    n = tf.shape[0]
    err, kl = step_errors(tf, ref_logits[:n])
    return Measured(tf.argmax(-1), err, kl)


def ref_row(m: Measured, ref_tokens: torch.Tensor, ref_margin: torch.Tensor, noise: float, threshold: float) -> dict:
    """The columns of a backend against the float64 reference."""
    n, b = m.argmax.shape
    flip = m.argmax != ref_tokens[:, :n].T  # (n, B)
    flips, near, real = classify(flip, ref_margin[:n], threshold)
    first = first_flips(flip)
    over = (ref_margin[:n][flip] / noise).max().item() if flips and noise > 0 else None
    return {
        "prompts": b,
        "steps_done": n,
        "tokens": n * b,
        "flips": flips,
        "flips_per_1000": _f(1000.0 * flips / (n * b), 4),
        "near_tie_flips": near,
        "real_flips": real,
        "near_tie_share": _f(near / flips, 4) if flips else "",
        "max_flip_margin_over_noise": _f(over, 4),
        "prompts_diverged": int((first < n).sum()),
        "first_div_median": int(first.median()),
        "first_div_min": int(first.min()),
        "kl_mean": _f(float(m.kl.mean())),
        "kl_max": _f(float(m.kl.max())),
        "err_median": _f(float(m.err.median())),
        "err_max": _f(float(m.err.max())),
        "err_over_noise": _f(float(m.err.max()) / noise, 4) if noise > 0 else "",
    }


def swap_row(a: Measured, m: Measured, ref_margin: torch.Tensor, threshold: float) -> dict:
    """The columns of a backend against the ``swap_from`` backend, over the steps both ran."""
    n = min(a.argmax.shape[0], m.argmax.shape[0])
    flip = a.argmax[:n] != m.argmax[:n]  # (n, B)
    flips, _, real = classify(flip, ref_margin[:n], threshold)
    tokens = n * flip.shape[1]
    return {
        "swap_flips": flips,
        "swap_real_flips": real,
        "swap_tokens_per_flip": _f(tokens / flips, 4) if flips else f">{tokens}",
        "swap_first_div_median": int(first_flips(flip).median()),
        "_swap_tokens": tokens,
    }


def flip_records(name: str, dtype: str, vs: str, want, got, ref_tokens, ref_margin, err, noise, threshold, prompts) -> list[dict]:
    """One record per flip: a step where ``got`` ``(n, B)`` differs from ``want`` ``(n, B)`` (the
    reference's tokens or the swap-from backend's argmax); ``ref_token`` is ``want``'s token."""
    out = []
    for s, b in (want != got).nonzero().tolist():
        ctx = torch.cat([prompts[b], ref_tokens[b, :s]])[-24:]
        marg = float(ref_margin[s, b])
        out.append(
            {
                "backend": name,
                "dtype": dtype,
                "vs": vs,
                "prompt": b,
                "step": s,
                "ref_token": repr(chr(int(want[s, b]))),
                "backend_token": repr(chr(int(got[s, b]))),
                "ref_margin": _f(marg),
                "margin_over_noise": _f(marg / noise, 4) if noise > 0 else "",
                "err": _f(float(err[s, b])),
                "class": "real" if marg > threshold else "near_tie",
                "context": repr(lm.decode_tokens(ctx.tolist())),
            }
        )
    return out


# -- the run ---------------------------------------------------------------------------------------


@dataclasses.dataclass
class _Ref:
    """The float64 reference: prompts ``(B, P)``, greedy tokens ``(B, N)``, logits ``(N, B, V)``, margins ``(N, B)``."""

    prompts: torch.Tensor
    tokens: torch.Tensor
    logits: torch.Tensor
    margin: torch.Tensor


def _run_backend(
    model_d, ref: _Ref, backend: str, be: Backend | Exception, dtype: str, device, cfg: StudyConfig
) -> tuple[dict, Measured | None]:
    """One backend in one dtype: its row (identity, time, detail) and its measurement (None: no result)."""
    row = {"backend": backend, "backend_name": getattr(be, "name", backend), "dtype": dtype, "device": getattr(be, "device", "cpu")}
    if isinstance(be, Exception):
        return {**row, "verdict": "error", "detail": f"cannot load: {type(be).__name__}: {be}"}, None
    try:
        why = be.unavailable_reason()
    except Exception as exc:  # noqa: BLE001
        why = f"unavailable_reason raised {_error_detail(exc)}"
    if why:
        return {**row, "verdict": "unavailable", "detail": why}, None
    mc = model_d.cfg
    attn = backend_attn(be, dtype, mc.hq, mc.hkv, mc.head_dim)
    t0 = time.perf_counter()
    try:
        tf = teacher_forced(model_d, ref.prompts, ref.tokens, attn, DTYPES[dtype], device, cfg.time_limit)
        if device.type == "cuda":
            torch.cuda.synchronize()
    except Unsupported as exc:
        return {**row, "verdict": "unsupported", "detail": str(exc)}, None
    except Exception as exc:  # noqa: BLE001 - a raising backend costs its own row, not the run
        return {**row, "verdict": "error", "detail": _error_detail(exc)}, None
    n = tf.shape[0]
    detail = "" if n == cfg.steps else f"time limit {cfg.time_limit:g} s: {n} of {cfg.steps} steps measured"
    return {**row, "time_s": f"{time.perf_counter() - t0:.2f}", "detail": detail}, measure(tf, ref.logits)


def _flips_vs_ref(name, dtype, m: Measured, ref: _Ref, noise, threshold) -> list[dict]:
    want = ref.tokens[:, : m.argmax.shape[0]].T  # (n, B)
    return flip_records(name, dtype, "reference", want, m.argmax, ref.tokens, ref.margin, m.err, noise, threshold, ref.prompts)


def _dtype_pass(base, ref: _Ref, backend_names, backends, dtype: str, device, cfg: StudyConfig, out: _Out) -> dict:
    """Every backend in one dtype: rows and flips appended to ``out``; returns the dtype's meta."""
    tdt = DTYPES[dtype]
    model_d = copy.deepcopy(base).to(device=device, dtype=tdt)
    mb = measure(teacher_forced(model_d, ref.prompts, ref.tokens, lm.dense_attention(tdt), tdt, device), ref.logits)
    noise = max(float(mb.err.max()), 1e-7)
    if not math.isfinite(noise):  # the model itself overflows in this dtype: no threshold to judge flips by
        detail = f"the model in {dtype} with exact attention gives non-finite logits: no noise to measure flips against"
        out.rows.extend(
            {"backend": backend, "dtype": dtype, "verdict": "error", "detail": detail} for backend in [BASELINE, *backend_names]
        )
        out.log(f"decode: {dtype}: {detail}")
        out.flush()
        return {"noise": noise, "tie_threshold": None, "reference_steps_within_threshold": None}
    threshold = cfg.tie_factor * noise
    common = {"noise": _f(noise), "tie_threshold": _f(threshold)}
    out.meta["dtypes"][dtype] = {"noise": noise, "tie_threshold": threshold}  # a study stopped in this dtype still says it
    out.rows.append(
        {
            "backend": BASELINE,
            "backend_name": f"naive {dtype} attention (noise calibration)",
            "dtype": dtype,
            "device": str(device),
            "verdict": "pass",
            **common,
            **ref_row(mb, ref.tokens, ref.margin, noise, threshold),
        }
    )
    out.flips.extend(_flips_vs_ref(BASELINE, dtype, mb, ref, noise, threshold))
    measured: dict[str, tuple[dict, Measured]] = {}
    a_name = cfg.swap_from or (backend_names[0] if backend_names else None)
    swapped: set[str] = set()

    def swap_all() -> None:  # every measured backend against the swap-from one, as soon as both are measured
        if a_name not in measured:
            return
        a = measured[a_name][1]
        for backend, (row, m) in measured.items():
            if backend in swapped or backend == a_name:
                continue
            swapped.add(backend)
            row.update({"swap_from": a_name, **swap_row(a, m, ref.margin, threshold)})
            k = min(a.argmax.shape[0], m.argmax.shape[0])
            out.flips.extend(
                flip_records(
                    backend, dtype, a_name, a.argmax[:k], m.argmax[:k], ref.tokens, ref.margin, m.err, noise, threshold, ref.prompts
                )
            )

    for backend in backend_names:
        row, m = _run_backend(model_d, ref, backend, backends[backend], dtype, device, cfg)
        row.update(common)
        if m is not None:
            row.update(ref_row(m, ref.tokens, ref.margin, noise, threshold))
            row["verdict"] = "fail" if row["real_flips"] else "pass"
            out.flips.extend(_flips_vs_ref(backend, dtype, m, ref, noise, threshold))
            measured[backend] = (row, m)
            swap_all()
        out.rows.append(row)
        out.log(
            f"decode: {dtype} {backend}: {row['verdict']} "
            + (f"{row['flips']} flips in {row['tokens']} tokens" if m else row["detail"][:100])
        )
        out.flush()
    return {"noise": noise, "tie_threshold": threshold, "reference_steps_within_threshold": int((ref.margin <= threshold).sum())}


@dataclasses.dataclass
class _Out:
    rows: list[dict]
    flips: list[dict]
    meta: dict
    out_dir: Path | None
    log: Callable[[str], None]

    def flush(self) -> None:
        if self.out_dir is None:
            return
        tables = ((runfolder_decode.LM_DECODE, COLUMNS, self.rows), (runfolder_decode.LM_FLIPS, FLIP_COLUMNS, self.flips))
        runfolder_decode.write_lm_study(self.out_dir, tables, self.meta, summary_markdown(self.rows, self.meta))


def _reference(base, cfg: StudyConfig, heldout: bytes, device, prompt_len: int, steps: int) -> _Ref:
    prompts = lm.prompts_from(heldout, cfg.prompts, prompt_len, cfg.seed)  # (B, P)
    ref_model = copy.deepcopy(base).to(device=device, dtype=torch.float64)
    tokens, logits = greedy(ref_model, prompts, steps, lm.dense_attention(torch.float64), torch.float64, device)
    return _Ref(prompts, tokens, logits, margins(logits.flatten(0, 1)).view(logits.shape[:2]))


def run_study(
    backend_names: Sequence[str], cfg: StudyConfig, out_dir: Path | None = None, log: Callable[[str], None] | None = None
) -> StudyResult:
    """Every backend of ``backend_names`` in every dtype of ``cfg`` on the language model ``cfg.model``.

    On the CPU the work runs on one intra-op thread (small tensors; restored after)."""
    threads = torch.get_num_threads()
    if torch.device(cfg.device).type == "cpu":
        torch.set_num_threads(1)
    try:
        return _run_study(backend_names, cfg, out_dir, log)
    finally:
        torch.set_num_threads(threads)


def _run_study(backend_names: Sequence[str], cfg: StudyConfig, out_dir: Path | None, log: Callable[[str], None] | None) -> StudyResult:
    t_start = time.perf_counter()
    log = log or (lambda s: None)
    device = torch.device(cfg.device)
    base, config, metrics, heldout = load_model(cfg, log)
    context = int(config.get("train", {}).get("context") or 256)
    prompt_len = cfg.prompt_len or max(context // 4, 2 * int(config["model"]["window"]))
    steps = cfg.steps or max(1, min(context // 2, context - prompt_len))
    cfg = dataclasses.replace(cfg, prompt_len=prompt_len, steps=steps)
    if prompt_len + steps > context:
        log(f"decode: note: prompt + steps ({prompt_len + steps}) exceed the training context ({context})")
    ref = _reference(base, cfg, heldout, device, prompt_len, steps)
    meta: dict = {
        "study": "lm-decode",
        "config": dataclasses.asdict(cfg),
        "backends": list(backend_names),
        "model": {"config": config, "metrics": metrics, "layer_kinds": base.cfg.layer_kinds()},
        "reference": {
            "margin_median": float(ref.margin.median()),
            "margin_share_below_0.1": float((ref.margin < 0.1).double().mean()),
            "tokens": int(ref.margin.numel()),
            "sample": lm.decode_tokens(torch.cat([ref.prompts[0], ref.tokens[0]]).tolist())[:400],
        },
        "dtypes": {},
        "torch": torch.__version__,
        "cuda_device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    log(
        f"decode: reference decoded {ref.tokens.shape[0]} prompts x {ref.tokens.shape[1]} tokens; "
        f"margin median {meta['reference']['margin_median']:.3g}"
    )
    backends = load_backends(backend_names)
    out = _Out([], [], meta, out_dir, log)
    for dtype in cfg.dtypes:
        meta["dtypes"][dtype] = _dtype_pass(base, ref, list(backend_names), backends, dtype, device, cfg, out)
        d = meta["dtypes"][dtype]
        log(f"decode: {dtype} noise {d['noise']:.3g}, tie threshold {d['tie_threshold'] or float('nan'):.3g}")
    meta["wall_seconds"] = round(time.perf_counter() - t_start, 2)
    out.flush()
    return StudyResult(out.rows, out.flips, meta, summary_markdown(out.rows, meta), time.perf_counter() - t_start)


# -- the summary -----------------------------------------------------------------------------------


#: An honest kernel's logit error stays within this many times the dtype's noise (the parity budget's factor).
ERR_FACTOR = 2.0


def _over(r: dict) -> float:
    return float(r.get("err_over_noise") or 0.0)


def pr_lines(rows: list[dict]) -> list[str]:
    """One sentence per backend and dtype, for a PR: the swap's near-tie rate, and any real divergence."""
    lines = []
    for r in rows:
        if r["backend"] == BASELINE:
            continue
        dt = r["dtype"]
        if r["verdict"] not in (Outcome.PASS, Outcome.FAIL):
            lines.append(f"{dt}: {r['backend']}: {r['verdict']} ({str(r.get('detail', ''))[:100]})")
            continue
        real = int(r.get("real_flips") or 0)
        a = r.get("swap_from")
        tokens = int(r.get("_swap_tokens") or 0) if a else int(r["tokens"])
        flips = int(r.get("swap_flips") or 0) if a else int(r["flips"])
        what = f"swapping {a} for {r['backend']}" if a else f"{r['backend']} against the float64 reference"
        if real or (a and int(r.get("swap_real_flips") or 0)):
            n_real = max(real, int(r.get("swap_real_flips") or 0))
            lines.append(
                f"{dt}: {what}: **{n_real} real divergences** (reference margin up to {r['max_flip_margin_over_noise']} x the noise; "
                f"the first at token {r['first_div_min']}): a bug, not numerics"
            )
        elif _over(r) > ERR_FACTOR:
            lines.append(
                f"{dt}: {what}: no real divergence, but its logits move {_over(r):.3g} x the dtype's noise "
                f"(honest kernels stay within {ERR_FACTOR:g} x): look at it"
            )
        elif flips:
            lines.append(
                f"{dt}: {what} flips a near-tie every {tokens / flips:.0f} tokens on this model ({flips} in {tokens}); no real divergence"
            )
        else:
            lines.append(f"{dt}: {what} flipped no greedy token in {tokens} tokens; no real divergence")
    return lines


def _model_line(meta: dict) -> str:
    mc = meta["model"]["config"]["model"]
    mt = meta["model"]["metrics"]
    kinds = meta["model"]["layer_kinds"]
    return (
        f"Model: byte-level LM of the Python standard library's sources ({meta['model']['config'].get('preset', '?')}): "
        f"{mc['n_layers']} layers ({kinds.count('local')} local : {kinds.count('global')} global), window {mc['window']}, "
        f"GQA {mc['hq']}:{mc['hkv']}, head dim {mc['head_dim']}; held-out {mt.get('heldout_bits_per_byte', '?')} bits/byte, "
        f"top-1 accuracy {mt.get('heldout_top1_accuracy', '?')}, top-1/top-2 margin median "
        f"{mt.get('margin_quantiles', {}).get('0.5', '?')} logits, "
        f"{mt.get('margin_share_below', {}).get('0.1', '?')} of positions below 0.1."
    )


def summary_markdown(rows: list[dict], meta: dict) -> str:
    cfg = meta["config"]
    head = [
        "# Greedy decode on a language model: what a backend swap flips",
        "",
        _model_line(meta),
        f"Study: {cfg['prompts']} held-out prompts of {cfg['prompt_len']} bytes, {cfg['steps']} greedy tokens each, every backend "
        "teacher-forced along the float64 reference's greedy output (same prefix); a flip is **near-tie** when the reference's "
        f"top-1/top-2 margin there is <= {cfg['tie_factor']:g} x the dtype's noise (max logit error of exact attention "
        "in that dtype), **real** above.",
        "",
        "| dtype | backend | tokens | flips /1000 vs fp64 | near-tie share | real | median tokens to 1st flip | KL/token "
        "| max err / noise | vs swap-from: tokens per flip | real |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if r["verdict"] not in (Outcome.PASS, Outcome.FAIL):
            head.append(f"| {r['dtype']} | {r['backend']} | {r['verdict']} | | | | | | | | |")
            continue
        head.append(
            f"| {r['dtype']} | {r['backend']} | {r['tokens']} | {r['flips_per_1000']} | {r['near_tie_share']} | {r['real_flips']} | "
            f"{r['first_div_median']} | {r['kl_mean']} | {r['err_over_noise']} | {r.get('swap_tokens_per_flip', '')} "
            f"| {r.get('swap_real_flips', '')} |"
        )
    noise = ", ".join(
        f"{dt} {d['noise']:.3g} (threshold {d['tie_threshold'] or float('nan'):.3g})" for dt, d in meta.get("dtypes", {}).items()
    )
    return "\n".join([*head, "", f"Noise: {noise}.", "", "## For the PR", "", *(f"- {s}" for s in pr_lines(rows)), ""])
