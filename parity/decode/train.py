"""Train the decode study's language model (:mod:`parity.decode.lm`): ``python -m parity decode-train``
(also ``python -m parity.decode.train``; the command line: :mod:`parity.cli.decode_train`).

Presets:

* ``cpu-tiny``: 3 layers (local, local, global), GQA 2:1, head dim 64, window 16, context 64;
  a fixed number of AdamW steps on one CPU thread (deterministic for a torch build), cached in
  ``$PARITY_CACHE_DIR/decode/lm`` (or ``~/.cache/attn-parity``): the tests' model.
* ``gpu``: 6 layers (5 local : 1 global, as Gemma 3), d_model 384, GQA 6:2, head dim 64,
  window 128, context 512, 7.4 M parameters (one 15 MB weights file); trained under bf16 autocast for
  ``--time-budget-s`` seconds of wall clock (cosine schedule over the budget).

Both write a model folder (:func:`parity.decode.lm.save`) with the held-out loss (nats per
byte and bits per byte), top-1 accuracy and the distribution of the top-1/top-2 logit margin
over held-out positions (quantiles, shares below thresholds, a histogram).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import platform
import sys
import time
from pathlib import Path

import torch

from ..errors import UserError
from .lm import WEIGHTS_DTYPE, TextLM, config_dict, encode, load, load_corpus, save
from .model import ModelConfig
from .task import cache_dir


@dataclasses.dataclass(frozen=True)
class TrainSpec:
    preset: str
    model: ModelConfig
    context: int
    batch: int
    lr: float
    steps: int | None  # None: as many as --time-budget-s allows
    warmup: int = 50
    max_bytes: int | None = None  # training bytes of the corpus (None: all)
    #: at most this many passes over the training bytes (None: no cap); with a time budget the cosine schedule
    #: runs to whichever ends first. On a fast GPU the time budget alone over-trains the 10 MB corpus: on an H100
    #: (2026-12-05) 5.8 passes held out 1.305 bits/byte, 14 passes 1.601 (train loss 0.52 and 0.34 nats).
    max_passes: float | None = None
    eval_seqs: int = 64
    seed: int = 1234


PRESETS: dict[str, TrainSpec] = {
    "cpu-tiny": TrainSpec(
        "cpu-tiny",
        ModelConfig(arch="mistral", vocab=256, d_model=64, n_layers=3, hq=2, hkv=1, head_dim=64, d_ff=192, window=16, global_every=3),
        context=64,
        batch=16,
        lr=4e-3,
        steps=200,
        warmup=20,
        max_bytes=600_000,
        eval_seqs=32,
    ),
    "gpu": TrainSpec(
        "gpu",
        ModelConfig(arch="mistral", vocab=256, d_model=384, n_layers=6, hq=6, hkv=2, head_dim=64, d_ff=704, window=128, global_every=6),
        context=512,
        batch=64,
        lr=2e-3,
        steps=None,
        warmup=100,
        eval_seqs=128,
        max_passes=4.0,
    ),
}

MARGIN_QUANTILES = (0.01, 0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99)
MARGIN_BELOW = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0)
HIST_EDGES = tuple(x / 4 for x in range(0, 81))  # 0 .. 20 logits in steps of 0.25 (last bin: >= 20)


def batch_of(data: torch.Tensor, starts: torch.Tensor, length: int) -> torch.Tensor:
    """``(len(starts), length)`` windows of ``data`` (int64)."""
    idx = starts[:, None] + torch.arange(length, device=data.device)[None, :]  # (B, length)
    return data[idx].long()


def lr_at(spec: TrainSpec, step: int, frac: float) -> float:
    """Linear warm-up, then cosine decay to a tenth over ``frac`` (the share of steps or time used)."""
    warm = min(1.0, (step + 1) / spec.warmup)
    return spec.lr * warm * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, frac))))


def _heldout_starts(n_bytes: int, spec: TrainSpec) -> torch.Tensor:
    n = spec.eval_seqs
    span = n_bytes - spec.context - 2
    if span < n:
        raise UserError(f"the held-out text ({n_bytes} bytes) is too short for {n} sequences of {spec.context + 1}")
    return torch.linspace(0, span, n).long()  # (n,) evenly spread, deterministic


@torch.no_grad()
def evaluate(model: TextLM, heldout: torch.Tensor, spec: TrainSpec, device) -> dict:
    """Held-out loss, accuracy and the top-1/top-2 margin distribution (float32, no autocast)."""
    model.eval()
    x = batch_of(heldout, _heldout_starts(heldout.shape[0], spec).to(heldout.device), spec.context + 1)  # (n, T+1)
    losses, margins, correct = [], [], 0
    for chunk in x.split(16):
        logits = model(chunk[:, :-1].to(device)).float()  # (b, T, V)
        tgt = chunk[:, 1:].to(device)  # (b, T)
        losses.append(torch.nn.functional.cross_entropy(logits.flatten(0, 1), tgt.flatten(), reduction="sum").cpu())
        top2 = logits.topk(2, -1).values  # (b, T, 2)
        margins.append((top2[..., 0] - top2[..., 1]).flatten().cpu())
        correct += int((logits.argmax(-1) == tgt).sum())
    m = torch.cat(margins).double()
    n = m.numel()
    loss = float(torch.stack(losses).sum()) / n
    hist = torch.histc(m.clamp(max=HIST_EDGES[-1]), bins=len(HIST_EDGES) - 1, min=0.0, max=HIST_EDGES[-1])
    return {
        "heldout_positions": n,
        "heldout_loss_nats_per_byte": round(loss, 5),
        "heldout_bits_per_byte": round(loss / math.log(2), 5),
        "heldout_top1_accuracy": round(correct / n, 5),
        "margin_quantiles": {str(q): round(float(m.quantile(q)), 5) for q in MARGIN_QUANTILES},
        "margin_share_below": {str(t): round(float((m < t).double().mean()), 5) for t in MARGIN_BELOW},
        "margin_histogram": {"edges": list(HIST_EDGES), "counts": [int(c) for c in hist.tolist()]},
    }


def step_cap(spec: TrainSpec, n_bytes: int) -> int | None:
    """The steps ``spec`` may take over ``n_bytes`` of training text: ``spec.steps``, capped by ``spec.max_passes``
    (each step reads ``batch x context`` bytes); ``None``: no cap (the time budget alone)."""
    by_passes = None if spec.max_passes is None else max(1, math.ceil(spec.max_passes * n_bytes / (spec.batch * spec.context)))
    caps = [c for c in (spec.steps, by_passes) if c is not None]
    return min(caps) if caps else None


def _train_loop(model: TextLM, spec: TrainSpec, data: torch.Tensor, device, time_budget: float | None, log) -> tuple[int, float]:
    """AdamW steps until :func:`step_cap` or the time budget; returns ``(steps, last loss)``."""
    opt = torch.optim.AdamW(model.parameters(), lr=spec.lr, betas=(0.9, 0.95), weight_decay=0.1)
    gen = torch.Generator().manual_seed(spec.seed)
    cuda = torch.device(device).type == "cuda"
    t0 = time.perf_counter()
    step, loss_v = 0, float("nan")
    loss = torch.full((), float("nan"))
    cap = step_cap(spec, data.shape[0])
    while True:
        by_time = (time.perf_counter() - t0) / time_budget if time_budget is not None else 0.0
        frac = max(by_time, step / cap if cap else 0.0)
        if frac >= 1.0:
            break
        for group in opt.param_groups:
            group["lr"] = lr_at(spec, step, frac)
        starts = torch.randint(0, data.shape[0] - spec.context - 1, (spec.batch,), generator=gen).to(data.device)
        x = batch_of(data, starts, spec.context + 1)  # (B, T+1)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=cuda):
            logits = model(x[:, :-1])  # (B, T, V)
            loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), x[:, 1:].flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        if step % 10 == 0 or step == 1:
            loss_v = float(loss.detach())  # synchronises: keeps the time budget honest on a GPU
            if log and (step % 200 == 0 or step == 1):
                log(f"decode-train {spec.preset}: step {step} loss {loss_v:.4f} ({time.perf_counter() - t0:.0f} s)")
    return step, float(loss.detach())


def train(spec: TrainSpec, device: str = "cpu", time_budget: float | None = None, log=None) -> tuple[TextLM, dict, dict]:
    """Train ``spec`` from scratch; returns ``(model in float32 on the CPU, config extra, metrics)``.

    On the CPU on one intra-op thread (small tensors: faster, and the result does not depend on
    the core count); the setting is restored after."""
    threads = torch.get_num_threads()
    if torch.device(device).type == "cpu":
        torch.set_num_threads(1)
    try:
        return _train(spec, device, time_budget, log)
    finally:
        torch.set_num_threads(threads)


def _train(spec: TrainSpec, device: str, time_budget: float | None, log) -> tuple[TextLM, dict, dict]:
    t0 = time.perf_counter()
    if spec.steps is None and time_budget is None:
        raise UserError(f"preset {spec.preset} trains for a time budget: pass --time-budget-s")
    corpus = load_corpus(spec.max_bytes)
    torch.manual_seed(spec.seed)
    model = TextLM(spec.model).to(device)
    data = encode(corpus.train).to(torch.uint8).to(device)  # (N,)
    steps, last = _train_loop(model, spec, data, device, time_budget, log)
    train_s = time.perf_counter() - t0
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(WEIGHTS_DTYPE))  # the stored weights (lm.WEIGHTS_DTYPE); metrics are of this model
    tokens = steps * spec.batch * spec.context
    metrics = {"train_steps": steps, "train_tokens": tokens, "train_passes": round(tokens / len(corpus.train), 3)}
    metrics["final_train_loss"] = round(last, 5)
    metrics.update(evaluate(model, encode(corpus.heldout).to(device), spec, device))
    metrics["train_seconds"] = round(train_s, 2)
    extra = {
        "preset": spec.preset,
        "train": {k: v for k, v in dataclasses.asdict(spec).items() if k != "model"},
        "time_budget_s": time_budget,
        "device": torch.cuda.get_device_name(0) if torch.device(device).type == "cuda" else "cpu",
        "corpus": {"source": "python standard library .py files", "digest": corpus.digest, "files": corpus.files},
        "corpus_bytes": {"train": len(corpus.train), "heldout": len(corpus.heldout)},
        "python": platform.python_version(),
        "torch": torch.__version__,
    }
    return model.float().cpu().eval(), extra, metrics


def cached(preset: str = "cpu-tiny", log=None, use_cache: bool = True) -> tuple[TextLM, dict, dict, Path]:
    """A fixed-step preset's model from the cache, trained (one CPU thread) and cached when missing."""
    spec = PRESETS[preset]
    if spec.steps is None:
        raise UserError(f"preset {preset} trains for a time budget; train it with python -m parity decode-train")
    corpus_digest = load_corpus(spec.max_bytes).digest
    key = {"spec": dataclasses.asdict(spec), "corpus": corpus_digest, "torch": torch.__version__, "weights": str(WEIGHTS_DTYPE)}
    blob = json.dumps(key, sort_keys=True)
    folder = cache_dir() / "lm" / f"{preset}-{hashlib.sha1(blob.encode()).hexdigest()[:12]}"
    if use_cache and (folder / "metrics.json").is_file():
        try:
            model, config, metrics = load(folder)
            return model, config, metrics, folder
        except Exception:  # noqa: BLE001 - a stale or broken cache folder is retrained
            pass
    model, extra, metrics = train(spec, "cpu", None, log)
    if use_cache:
        save(model, folder, extra, metrics)
    return model, config_dict(model, extra), metrics, folder


def train_and_save(
    preset: str,
    device: str,
    out: Path,
    time_budget: float | None = None,
    steps: int | None = None,
    log=None,
    max_passes: float | None = None,
) -> dict:
    """Train ``preset`` (``steps`` and ``max_passes`` overriding its own; ``max_passes`` 0: no cap) and write its
    folder to ``out``; returns the metrics."""
    spec = PRESETS[preset]
    if steps is not None:
        spec = dataclasses.replace(spec, steps=steps)
    if max_passes is not None:
        spec = dataclasses.replace(spec, max_passes=max_passes or None)
    if torch.device(device).type == "cuda" and not torch.cuda.is_available():
        raise UserError("--device cuda: no CUDA device here")
    model, extra, metrics = train(spec, device, time_budget, log)
    save(model, out, extra, metrics)
    return metrics


if __name__ == "__main__":  # python -m parity.decode.train ARGS is python -m parity decode-train ARGS (parity.cli.decode_train)
    import runpy

    sys.argv[1:1] = ["decode-train"]
    runpy.run_module("parity", run_name="__main__", alter_sys=True)
