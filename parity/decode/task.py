"""The synthetic task that makes the model's predictions confident, and its cached training.

Task ("window-period copy"): a sequence is a random block of ``W`` tokens (``W`` = the
model's window) repeated, so ``x[t + 1] = x[t + 1 - W]``: the next token is the **oldest
token still inside the window**. Its previous occurrence, one period back, is one token
*outside* the window, so induction-style copying cannot solve it; the model has to read
exactly the window's left edge. A correctly trained model predicts it with a large
top-1/top-2 margin, and a backend whose window is one token too wide (or unbounded in
decode) hands it a key it never saw in training, at exactly the position it relies on.

Training is short (a few hundred Adam steps on the CPU, seconds), deterministic for a
given torch build (fixed seeds, CPU only), and cached on disk by a hash of the model
config, the task and the torch version: ``$PARITY_CACHE_DIR`` or ``~/.cache/attn-parity``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time
from pathlib import Path

import torch

from .model import ModelConfig, TinyDecoder

TASK_NAME = "window-period-copy"


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    steps: int = 150
    batch: int = 32
    periods: int = 3  # training sequences are periods * W tokens long
    lr: float = 3e-3
    seed: int = 1234


def periodic_batch(gen: torch.Generator, batch: int, window: int, length: int, vocab: int) -> torch.Tensor:
    """``(batch, length)`` sequences: a random ``window``-token block repeated."""
    block = torch.randint(0, vocab, (batch, window), generator=gen)
    reps = -(-length // window)
    return block.repeat(1, reps)[:, :length]


def prompt(seed: int, length: int, window: int, vocab: int) -> torch.Tensor:
    """One deterministic prompt of the task, ``(length,)``."""
    gen = torch.Generator().manual_seed(10_000 + seed)
    return periodic_batch(gen, 1, window, length, vocab)[0]


def cache_dir() -> Path:
    return Path(os.environ.get("PARITY_CACHE_DIR") or Path.home() / ".cache" / "attn-parity") / "decode"


def _key(cfg: ModelConfig, tc: TrainConfig, extra: str = "") -> str:
    blob = json.dumps(
        {"model": cfg.to_dict(), "train": dataclasses.asdict(tc), "task": TASK_NAME, "torch": torch.__version__, "extra": extra},
        sort_keys=True,
    )
    return hashlib.sha1(blob.encode()).hexdigest()[:12]


def train(cfg: ModelConfig, tc: TrainConfig = TrainConfig(), log=None, build=None) -> tuple[TinyDecoder, dict]:
    """Train from scratch (CPU, float32). Returns the model and a summary dict.

    ``build``: a zero-argument factory of the model (default ``TinyDecoder(cfg)``); the
    model maps ``(B, T)`` tokens to ``(B, T, vocab)`` logits.
    """
    t0 = time.perf_counter()
    torch.manual_seed(tc.seed)
    model = build() if build is not None else TinyDecoder(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=tc.lr, weight_decay=0.0)
    gen = torch.Generator().manual_seed(tc.seed)
    w = cfg.window
    length = tc.periods * w
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=tc.lr, total_steps=tc.steps, pct_start=0.1)
    loss_v = float("nan")
    for step in range(tc.steps):
        x = periodic_batch(gen, tc.batch, w, length + 1, cfg.vocab)
        logits = model(x[:, :-1])  # (B, T, V)
        # positions t >= W-1 are determined by the window; earlier ones are random
        lg = logits[:, w - 1 :].reshape(-1, cfg.vocab)
        tgt = x[:, w:].reshape(-1)
        loss = torch.nn.functional.cross_entropy(lg, tgt)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        loss_v = float(loss.detach())
        if log and (step % 100 == 0 or step == tc.steps - 1):
            log(f"train {cfg.arch}: step {step} loss {loss_v:.4f}")
    model.eval()
    acc, margin = evaluate(model, torch.Generator().manual_seed(tc.seed + 1))
    info = {
        "task": TASK_NAME,
        "train": dataclasses.asdict(tc),
        "final_loss": round(loss_v, 5),
        "heldout_accuracy": round(acc, 4),
        "heldout_median_margin": round(margin, 3),
        "train_seconds": round(time.perf_counter() - t0, 2),
    }
    return model, info


@torch.no_grad()
def evaluate(model: TinyDecoder, gen: torch.Generator, batch: int = 64) -> tuple[float, float]:
    """Held-out accuracy and median top-1/top-2 logit margin on the determined positions."""
    cfg = model.cfg
    w = cfg.window
    x = periodic_batch(gen, batch, w, 3 * w + 1, cfg.vocab)
    logits = model(x[:, :-1])[:, w - 1 :]  # (B, T', V)
    tgt = x[:, w:]
    acc = float((logits.argmax(-1) == tgt).float().mean())
    top2 = logits.topk(2, -1).values
    return acc, float((top2[..., 0] - top2[..., 1]).median())


def load_or_train(
    cfg: ModelConfig, tc: TrainConfig = TrainConfig(), log=None, use_cache: bool = True, build=None, key_extra: str = ""
) -> tuple[TinyDecoder, dict]:
    """The trained model for ``cfg``, from the cache when present (``build``: see :func:`train`)."""
    path = cache_dir() / f"{cfg.arch}-{_key(cfg, tc, key_extra)}.pt"
    if use_cache and path.exists():
        try:
            blob = torch.load(path, map_location="cpu", weights_only=False)
            model = build() if build is not None else TinyDecoder(cfg)
            model.load_state_dict(blob["state"])
            model.eval()
            return model, {**blob["info"], "cached": str(path)}
        except Exception:  # noqa: BLE001 - a stale or broken cache file is retrained
            pass
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: one intra-op thread is faster, and the result does not depend on the core count
    try:
        model, info = train(cfg, tc, log, build)
    finally:
        torch.set_num_threads(threads)
    if use_cache:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".tmp{os.getpid()}")
            torch.save({"state": model.state_dict(), "info": info}, tmp)
            os.replace(tmp, path)
        except OSError:
            pass
    return model, {**info, "cached": ""}
