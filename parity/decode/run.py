"""Greedy-decode divergence: how far a backend change moves a small model's output.

For each model (``mistral``: every layer local; ``gemma2``: local / global with softcaps),
each prompt and each backend:

1. **Reference**: the model in float64 with the banded float64 reference attention,
   prefill plus greedy KV-cache decode of ``steps`` tokens.
2. **Noise**: the same model in the run's dtype with the naive same-dtype attention
   (:func:`parity.attention_reference` with ``compute_dtype`` = the dtype), teacher-forced
   along the reference tokens. Its largest logit error is the dtype's measured numerical
   noise (per model); ``tie_threshold = tie_factor * noise``.
3. **Backend**: the model in the run's dtype, every attention call a
   :class:`parity.Case` (the layer's canonical window, softcap, GQA heads) handed to
   ``backend.run``: one prefill call per layer, then one ``Sq = 1`` call per layer and
   step against the cached keys (``page_size`` set on the decode calls with ``--page-size``).
   Teacher-forced along the reference tokens (per-step max-abs logit error and KL), and,
   from the first step where its greedy token differs, free-running on its own tokens
   (token agreement).

A divergence is a **near-tie flip** when the reference's top-1/top-2 margin there is at
most ``tie_threshold``, and **real** when it is above. A backend that raises costs only its
own rows (``error``); one that refuses a case is ``unsupported`` (never a fallback).
"""

from __future__ import annotations

import copy
import dataclasses
import math
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from .. import runfolder_decode
from ..backends import Backend, BackendError, Unsupported
from ..backends import get as get_backend
from ..case import DTYPES, Case, Inputs
from ..reference import attention_reference
from ..results import Outcome
from ..verdict import POISON
from ..window import Window
from .model import AttnFn, ModelConfig, TinyDecoder, config_for
from .task import TASK_NAME, load_or_train, prompt

#: decode.csv columns, in order (documented in the README, "Greedy-decode divergence").
COLUMNS = [
    "backend",
    "backend_name",
    "model",
    "layers",
    "dtype",
    "device",
    "window",
    "page_size",
    "prompt_id",
    "prompt_len",
    "steps",
    "window_exceeded_step",
    "verdict",
    "div_class",
    "first_div_step",
    "first_div_pos",
    "ref_token",
    "backend_token",
    "ref_margin",
    "noise",
    "tie_threshold",
    "margin_over_noise",
    "token_agreement",
    "tf_flips",
    "tf_real_flips",
    "tf_max_abs_err",
    "tf_mean_max_abs_err",
    "tf_max_kl",
    "tf_mean_kl",
    "err_at_div",
    "err_over_noise",
    "time_s",
    "detail",
]
STEP_COLUMNS = ["backend", "model", "prompt_id", "step", "pos", "ref_token", "tf_token", "free_token", "ref_margin", "max_abs_err", "kl"]

DEFAULT_PROMPT_LENS = (8, 15, 16, 17, 24, 40, 72)
DEFAULT_MODELS = ("mistral", "gemma2")
BASELINE = "baseline"


@dataclasses.dataclass
class DecodeConfig:
    models: Sequence[str] = DEFAULT_MODELS
    dtype: str = "float32"
    prompt_lens: Sequence[int] = DEFAULT_PROMPT_LENS
    steps: int = 32
    window: int = 16
    page_size: int | None = None
    device: str = "cpu"
    tie_factor: float = 4.0
    time_limit: float = 60.0  # seconds per backend (all models); later prompts are 'skipped'
    seed: int = 0
    use_cache: bool = True
    hf_checkpoint: str | None = None  # a local Hugging Face checkpoint directory, for the model 'hf-checkpoint'


# -- attention routing ----------------------------------------------------------------------


def reference_attn(compute_dtype: torch.dtype, hq: int, hkv: int, head_dim: int) -> AttnFn:
    """The naive banded attention, computed in ``compute_dtype`` (float64: the reference)."""

    def attn(layer, q, k, v, window: Window, softcap, scale=None):
        sq, sk = q.shape[0], k.shape[0]
        case = Case((sq,), (sk,), hq, hkv, head_dim, "float32", window, scale, softcap)
        cu_q = torch.tensor([0, sq], dtype=torch.int32)
        cu_k = torch.tensor([0, sk], dtype=torch.int32)
        out = attention_reference(Inputs(case, q, k, v, cu_q, cu_k), compute_dtype=compute_dtype)
        return out.to(q.dtype)

    return attn


class TimeLimit(Exception):
    """The backend's time allowance ran out in the middle of a prompt."""


def backend_attn(
    backend: Backend, dtype: str, hq: int, hkv: int, head_dim: int, page_size: int | None, deadline: list[float] | None = None
) -> AttnFn:
    """Every call becomes a :class:`Case` handed to ``backend.run`` on the backend's device.

    ``deadline``: a one-element list holding a ``time.perf_counter()`` value; a call made
    after it raises :class:`TimeLimit` (so a slow backend cannot stall the run mid-prompt).
    """
    dev = torch.device(getattr(backend, "device", "cpu"))
    tdt = DTYPES[dtype]

    def attn(layer, q, k, v, window: Window, softcap, scale=None):
        if deadline is not None and time.perf_counter() > deadline[0]:
            raise TimeLimit()
        sq, sk = q.shape[0], k.shape[0]
        ps = page_size if sq == 1 else None
        case = Case((sq,), (sk,), hq, hkv, head_dim, dtype, window, scale, softcap, ps)
        if ps is not None and not getattr(backend, "supports_paged", False):
            raise Unsupported("backend has no paged path (supports_paged is False)")
        reason = backend.unsupported_reason(case)
        if reason:
            raise Unsupported(reason)
        inputs = Inputs(
            case,
            q.to(dev, tdt),
            k.to(dev, tdt),
            v.to(dev, tdt),
            torch.tensor([0, sq], dtype=torch.int32, device=dev),
            torch.tensor([0, sk], dtype=torch.int32, device=dev),
        )
        return checked_run(backend, case, inputs).to(q.device)

    return attn


def load_backends(backend_names: Sequence[str]) -> dict[str, Backend | Exception]:
    """Each backend of ``backend_names`` loaded once, or the exception loading it raised (recorded as that backend's rows)."""
    backends: dict[str, Backend | Exception] = {}
    for backend in backend_names:
        try:
            backends[backend] = get_backend(backend)
        except Exception as exc:  # noqa: BLE001 - recorded as the backend's rows
            backends[backend] = exc
    return backends


def checked_run(backend: Backend, case: Case, inputs: Inputs) -> torch.Tensor:
    """``backend.run`` into a poisoned buffer, its answer checked: :class:`BackendError` for a wrong shape or
    dtype, an unwritten element or a non-finite value (the decode studies' one call of a backend)."""
    out = torch.full_like(inputs.q, POISON)  # (total_q, hq, d)
    res = backend.run(case, inputs, out)
    if not isinstance(res, torch.Tensor) or tuple(res.shape) != tuple(inputs.q.shape):
        raise BackendError(f"run returned {getattr(res, 'shape', type(res).__name__)}, expected {tuple(inputs.q.shape)}")
    if res.dtype != inputs.q.dtype:
        raise BackendError(f"run returned {res.dtype}, expected {inputs.q.dtype}")
    if res is out and bool((out == POISON).any()):
        raise BackendError(f"output left unwritten ({int((out == POISON).sum())} elements) in {case.summary()}")
    if not bool(torch.isfinite(res).all()):
        raise BackendError(f"non-finite attention output in {case.summary()}")
    return res


# -- trajectories ---------------------------------------------------------------------------


@torch.no_grad()
def greedy(model: TinyDecoder, prompt_tokens: torch.Tensor, steps: int, attn: AttnFn, dtype: torch.dtype, device):
    """Plain greedy decode: tokens ``[steps]`` and the logits ``(steps, V)`` behind each."""
    p = prompt_tokens.shape[0]
    cache = model.new_cache(p + steps, dtype, device)
    logits = [model.extend(prompt_tokens.to(device), 0, cache, attn)]
    toks = [int(logits[0].argmax())]
    for s in range(1, steps):
        logits.append(model.extend(torch.tensor([toks[-1]], device=device), p + s - 1, cache, attn))
        toks.append(int(logits[-1].argmax()))
    return toks, torch.stack(logits).double().cpu()


@torch.no_grad()
def forced_and_free(model, prompt_tokens, ref_tokens: list[int], attn: AttnFn, dtype, device):
    """Teacher-forced logits along ``ref_tokens``, plus the backend's own free-running tokens.

    Until the first step whose greedy token differs from the reference, free running and
    teacher forcing are the same computation; there the cache is copied and the free run
    continues on the backend's own tokens. Returns ``(tf_logits (N, V), free_tokens)``.
    """
    p, n = prompt_tokens.shape[0], len(ref_tokens)
    cache = model.new_cache(p + n, dtype, device)
    logits = [model.extend(prompt_tokens.to(device), 0, cache, attn)]
    free: list[int] | None = None
    fork = None
    for s in range(n):
        if s > 0:
            logits.append(model.extend(torch.tensor([ref_tokens[s - 1]], device=device), p + s - 1, cache, attn))
        if fork is None and int(logits[s].argmax()) != ref_tokens[s]:
            fork = (s, model.fork_cache(cache))
    tf = torch.stack(logits).double().cpu()
    if fork is None:
        return tf, list(ref_tokens)
    s0, fcache = fork
    free = list(ref_tokens[:s0]) + [int(tf[s0].argmax())]
    for s in range(s0 + 1, n):
        lg = model.extend(torch.tensor([free[-1]], device=device), p + s - 1, fcache, attn)
        free.append(int(lg.argmax()))
    return tf, free


def margins(logits: torch.Tensor) -> torch.Tensor:
    top2 = logits.topk(2, -1).values  # (N, 2)
    return top2[:, 0] - top2[:, 1]


def step_errors(tf: torch.Tensor, ref: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per step: max-abs logit error, and KL(reference || backend) in nats."""
    err = (tf - ref).abs().amax(-1)  # (N,)
    lp_r = torch.log_softmax(ref, -1)
    lp_b = torch.log_softmax(tf, -1)
    kl = (lp_r.exp() * (lp_r - lp_b)).sum(-1).clamp(min=0.0)  # (N,)
    return err, kl


def _f(x: float | None, nd: int = 6) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return ""
    return f"{x:.{nd}g}"


def score(tf, free, ref_logits, ref_tokens, threshold: float, noise: float) -> tuple[dict, list[dict]]:
    """The row's measured columns, and its per-step records."""
    n = len(ref_tokens)
    err, kl = step_errors(tf, ref_logits)
    marg = margins(ref_logits)
    tf_tok = tf.argmax(-1).tolist()
    flips = [s for s in range(n) if tf_tok[s] != ref_tokens[s]]
    real = [s for s in flips if float(marg[s]) > threshold]
    first = flips[0] if flips else None
    row: dict = {
        "first_div_step": first,
        "div_class": "none" if first is None else ("real" if float(marg[first]) > threshold else "near_tie"),
        "ref_token": ref_tokens[first] if first is not None else "",
        "backend_token": tf_tok[first] if first is not None else "",
        "ref_margin": _f(float(marg[first])) if first is not None else "",
        "margin_over_noise": _f(float(marg[first]) / noise, 4) if first is not None and noise > 0 else "",
        "err_at_div": _f(float(err[first])) if first is not None else "",
        "token_agreement": _f(sum(a == b for a, b in zip(free, ref_tokens)) / n, 4),
        "tf_flips": len(flips),
        "tf_real_flips": len(real),
        "tf_max_abs_err": _f(float(err.max())),
        "tf_mean_max_abs_err": _f(float(err.mean())),
        "tf_max_kl": _f(float(kl.max())),
        "tf_mean_kl": _f(float(kl.mean())),
        "err_over_noise": _f(float(err.max()) / noise, 4) if noise > 0 else "",
        "verdict": "fail" if real else "pass",
    }
    steps = [
        {
            "step": s,
            "ref_token": ref_tokens[s],
            "tf_token": tf_tok[s],
            "free_token": free[s],
            "ref_margin": _f(float(marg[s])),
            "max_abs_err": _f(float(err[s])),
            "kl": _f(float(kl[s])),
        }
        for s in range(n)
    ]
    return row, steps


# -- the run --------------------------------------------------------------------------------


@dataclasses.dataclass
class DecodeResult:
    rows: list[dict]
    steps: list[dict]
    meta: dict
    seconds: float

    @property
    def failed(self) -> bool:
        return any(r["verdict"] in (Outcome.FAIL, Outcome.ERROR) for r in self.rows)


def _write(out_dir: Path, rows: list[dict], steps: list[dict], meta: dict) -> None:
    runfolder_decode.write_decode(out_dir, COLUMNS, rows, STEP_COLUMNS, steps, meta)


def run_decode(
    backend_names: Sequence[str],
    cfg: DecodeConfig,
    out_dir: Path | None = None,
    log: Callable[[str], None] | None = None,
) -> DecodeResult:
    """Run every backend in ``backend_names`` (names or ``module:Class``) on every model and prompt.

    The model's tensors are tiny, so the CPU work runs on one intra-op thread (several
    times faster than the default on a shared machine); the setting is restored after.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _run_decode(backend_names, cfg, out_dir, log)
    finally:
        torch.set_num_threads(threads)


def _error_detail(exc: BaseException) -> str:
    tb = traceback.extract_tb(exc.__traceback__)
    where = f" at {Path(tb[-1].filename).name}:{tb[-1].lineno}" if tb else ""
    first = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {first}{where}"


@dataclasses.dataclass
class _ModelRun:
    """One model's reference trajectories, measured noise, and the rows it produced."""

    arch: str
    cfg: DecodeConfig
    mcfg: ModelConfig  # or parity.decode.hf.HFModelConfig (same fields)
    test_model: TinyDecoder
    prompts: dict
    refs: dict
    noise: float
    threshold: float
    baseline: dict  # prompt id -> (teacher-forced logits, free tokens) of the same-dtype naive attention

    def common(self, backend: str, name: str, pid: str) -> dict:
        n = int(self.prompts[pid].shape[0])
        w = self.mcfg.window
        return {
            "backend": backend,
            "backend_name": name,
            "model": self.arch,
            "layers": " ".join(self.mcfg.layer_kinds()),
            "dtype": self.cfg.dtype,
            "device": "",
            "window": w,
            "page_size": self.cfg.page_size or "",
            "prompt_id": pid,
            "prompt_len": n,
            "steps": self.cfg.steps,
            "window_exceeded_step": max(0, w - n + 1),
            "noise": _f(self.noise),
            "tie_threshold": _f(self.threshold),
        }

    def scored(self, backend: str, pid: str, tf, free) -> tuple[dict, list[dict]]:
        ref_toks, ref_logits = self.refs[pid]
        row, steps = score(tf, free, ref_logits, ref_toks, self.threshold, self.noise)
        p = int(self.prompts[pid].shape[0])
        if row["first_div_step"] is not None:
            row["first_div_pos"] = p + row["first_div_step"] - 1  # the query position whose logits diverged
        recs = [{"backend": backend, "model": self.arch, "prompt_id": pid, "pos": p + st["step"] - 1, **st} for st in steps]
        return row, recs


def _prepare_model(arch: str, cfg: DecodeConfig, device, tdt, log, meta: dict) -> _ModelRun:
    if arch.startswith("hf"):
        from . import hf

        mcfg, base, info = hf.load(arch, window=cfg.window, checkpoint=cfg.hf_checkpoint, log=log, use_cache=cfg.use_cache)
    else:
        mcfg = config_for(arch, window=cfg.window)
        base, info = load_or_train(mcfg, log=log, use_cache=cfg.use_cache)
    log(
        f"decode: model {arch} ({' '.join(mcfg.layer_kinds())}), held-out accuracy {info['heldout_accuracy']}, "
        f"median margin {info['heldout_median_margin']}"
    )
    ref_model = copy.deepcopy(base).to(device=device, dtype=torch.float64)
    test_model = copy.deepcopy(base).to(device=device, dtype=tdt)
    hq, hkv, hd = mcfg.hq, mcfg.hkv, mcfg.head_dim
    prompts = {f"p{n}": prompt(cfg.seed + i, n, mcfg.window, mcfg.vocab) for i, n in enumerate(cfg.prompt_lens)}
    ref_attn = reference_attn(torch.float64, hq, hkv, hd)
    refs = {pid: greedy(ref_model, t, cfg.steps, ref_attn, torch.float64, device) for pid, t in prompts.items()}
    # the dtype's noise: the same model with the naive same-dtype attention, teacher-forced
    base_attn = reference_attn(tdt, hq, hkv, hd)
    noise_tf = {pid: forced_and_free(test_model, t, refs[pid][0], base_attn, tdt, device) for pid, t in prompts.items()}
    noise = max([float(step_errors(noise_tf[pid][0], refs[pid][1])[0].max()) for pid in prompts] + [1e-7])
    threshold = cfg.tie_factor * noise
    ref_margins = torch.cat([margins(refs[p][1]) for p in prompts])
    meta["models"][arch] = {
        "config": mcfg.to_dict(),
        "layer_kinds": mcfg.layer_kinds(),
        "training": info,
        "noise": noise,
        "tie_threshold": threshold,
        "reference_margin_median": float(ref_margins.median()),
        "reference_margin_min": float(ref_margins.min()),
        "reference_steps": int(ref_margins.numel()),
        "reference_steps_within_threshold": int((ref_margins <= threshold).sum()),
        "prompts": {pid: {"len": int(t.shape[0]), "tokens": t.tolist(), "reference_tokens": refs[pid][0]} for pid, t in prompts.items()},
    }
    log(
        f"decode: {arch} {cfg.dtype} noise (max logit error of the same-dtype naive attention) {noise:.3g}, "
        f"tie threshold {threshold:.3g}, reference margins median {float(ref_margins.median()):.3g} min {float(ref_margins.min()):.3g}"
    )
    return _ModelRun(arch, cfg, mcfg, test_model, prompts, refs, noise, threshold, noise_tf)


def _run_backend(mr: _ModelRun, backend: str, be: Backend | Exception, device, tdt) -> tuple[list[dict], list[dict]]:
    cfg = mr.cfg
    rows: list[dict] = []
    recs: list[dict] = []
    if isinstance(be, Exception):
        return [
            {**mr.common(backend, backend, pid), "verdict": "error", "detail": f"cannot load: {type(be).__name__}: {be}"}
            for pid in mr.prompts
        ], []
    name = getattr(be, "name", backend)
    try:
        why = be.unavailable_reason()
    except Exception as exc:  # noqa: BLE001
        why = f"unavailable_reason raised {_error_detail(exc)}"
    if why:
        return [{**mr.common(backend, name, pid), "verdict": "unavailable", "detail": why} for pid in mr.prompts], []
    deadline = [0.0]
    attn = backend_attn(be, cfg.dtype, mr.mcfg.hq, mr.mcfg.hkv, mr.mcfg.head_dim, cfg.page_size, deadline)
    spent = 0.0
    limit_msg = f"time limit {cfg.time_limit:g} s per backend and model reached"
    for pid, ptoks in mr.prompts.items():
        base_row = {**mr.common(backend, name, pid), "device": getattr(be, "device", "cpu")}
        if spent > cfg.time_limit:
            rows.append({**base_row, "verdict": "skipped", "detail": limit_msg})
            continue
        t0 = time.perf_counter()
        deadline[0] = t0 + cfg.time_limit - spent
        try:
            tf, free = forced_and_free(mr.test_model, ptoks, mr.refs[pid][0], attn, tdt, device)
            if device.type == "cuda":
                torch.cuda.synchronize()
        except Unsupported as exc:
            rows.append({**base_row, "verdict": "unsupported", "detail": str(exc)})
            continue
        except TimeLimit:
            rows.append({**base_row, "verdict": "skipped", "detail": limit_msg + " mid-prompt"})
            continue
        except Exception as exc:  # noqa: BLE001 - a raising backend costs its own rows, not the run
            rows.append({**base_row, "verdict": "error", "detail": _error_detail(exc)})
            continue
        finally:
            spent += time.perf_counter() - t0
        row, steps = mr.scored(backend, pid, tf, free)
        rows.append({**base_row, **row, "time_s": f"{time.perf_counter() - t0:.3f}", "detail": ""})
        recs.extend(steps)
    return rows, recs


def _run_decode(backend_names, cfg: DecodeConfig, out_dir: Path | None, log) -> DecodeResult:
    t_start = time.perf_counter()
    log = log or (lambda s: None)
    device = torch.device(cfg.device)
    tdt = DTYPES[cfg.dtype]
    rows: list[dict] = []
    all_steps: list[dict] = []
    meta: dict = {
        "task": TASK_NAME,
        "config": {k: (list(v) if isinstance(v, tuple) else v) for k, v in dataclasses.asdict(cfg).items()},
        "backends": list(backend_names),
        "models": {},
        "torch": torch.__version__,
        "cuda_device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    backends = load_backends(backend_names)

    def flush() -> None:
        if out_dir is not None:
            _write(out_dir, rows, all_steps, {**meta, "rows": len(rows)})

    for arch in cfg.models:
        mr = _prepare_model(arch, cfg, device, tdt, log, meta)
        for pid, (tf, free) in mr.baseline.items():
            row, steps = mr.scored(BASELINE, pid, tf, free)
            rows.append(
                {
                    **mr.common(BASELINE, f"naive {cfg.dtype} attention", pid),
                    **row,
                    "device": str(device),
                    "page_size": "",
                    "detail": "noise calibration: the model in the dtype with the naive same-dtype attention",
                }
            )
            all_steps.extend(steps)
        for backend in backend_names:
            new_rows, steps = _run_backend(mr, backend, backends[backend], device, tdt)
            rows.extend(new_rows)
            all_steps.extend(steps)
            log(f"decode: {arch} {backend}: " + summarize(new_rows))
            flush()
    meta["wall_seconds"] = round(time.perf_counter() - t_start, 2)
    flush()
    return DecodeResult(rows, all_steps, meta, time.perf_counter() - t_start)


def summarize(rows: list[dict]) -> str:
    if not rows:
        return "no rows"
    by: dict[str, int] = {}
    for r in rows:
        key = r["verdict"] if r["verdict"] not in (Outcome.PASS, Outcome.FAIL) else f"{r['verdict']}/{r.get('div_class')}"
        by[key] = by.get(key, 0) + 1
    return ", ".join(f"{k} {v}" for k, v in sorted(by.items()))


def summary_table(rows: list[dict]) -> str:
    """Per backend and model: verdict counts, real / near-tie divergences, worst logit error."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        groups.setdefault((r["backend"], r["model"]), []).append(r)
    head = f"{'backend':<38}{'model':<9}{'ok':>4}{'real':>6}{'tie':>5}{'other':>7}  {'min agree':>9}  {'max |dlogit|':>12}  {'/noise':>7}"
    lines = [head + "  first real divergence"]
    for (be, model), rs in groups.items():
        ok = [r for r in rs if r["verdict"] in (Outcome.PASS, Outcome.FAIL)]
        real = [r for r in ok if r["div_class"] == "real" or int(r.get("tf_real_flips") or 0) > 0]
        tie = [r for r in ok if r["div_class"] == "near_tie" and r not in real]
        other = len(rs) - len(ok)
        agree = min((float(r["token_agreement"]) for r in ok), default=float("nan"))
        err = max((float(r["tf_max_abs_err"]) for r in ok), default=float("nan"))
        ratio = max((float(r["err_over_noise"]) for r in ok if r.get("err_over_noise") not in (None, "")), default=float("nan"))
        first = next((r for r in real if r["div_class"] == "real"), real[0] if real else None)
        where = ""
        if first is not None:
            where = f"prompt {first['prompt_len']} step {first['first_div_step']} (margin {first['ref_margin']}, noise {first['noise']})"
        if other:
            kinds = sorted({r["verdict"] for r in rs if r not in ok})
            where = (where + "; " if where else "") + "/".join(kinds) + ": " + next(r["detail"] for r in rs if r not in ok)[:80]
        counts = f"{len(ok):>4}{len(real):>6}{len(tie):>5}{other:>7}"
        lines.append(f"{be:<38}{model:<9}{counts}  {agree:>9.3f}  {err:>12.3g}  {ratio:>7.3g}  {where}")
    return "\n".join(lines)
