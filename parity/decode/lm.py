"""A byte-level language model of Python code, trained on the standard library's own sources.

The synthetic models of :mod:`parity.decode.task` are confident by construction (median
top-1/top-2 margin about 7.7 logits), so no honest backend ever flips one of their tokens.
Real LLM text has many near-ties; this module gives the decode study a model that has them too,
with no download:

* **Corpus**: every ``.py`` file of the running interpreter's standard library
  (``sysconfig.get_paths()["stdlib"]``, its ``test`` package included where the distribution
  ships it, without ``site-packages``), sorted by path, as raw bytes. A file is **held out** when the SHA-1 of its
  relative path is 0 mod 20 (about 5 %, the same files on every machine with that Python).
* **Tokenizer**: bytes (vocabulary 256, deterministic, nothing to build).
* **Model**: :class:`TextLM`, the decoder of :mod:`parity.decode.model` (RoPE, RMSNorm, SwiGLU,
  GQA, no softcap, so every backend can run it) with a local/global mix: ``global_every = g``
  makes every ``g``-th layer global (plain causal) and the rest ``Window.tokens(window)``
  (``g = 6``: Gemma-3's 5 local : 1 global). It adds a batched KV-cache step whose attention
  is one packed varlen call per layer (``q_lens``, ``k_lens``), so the study hands a backend
  every prompt of a decode step at once, as an engine does.

A trained model is a folder (:func:`save` / :func:`load`): ``config.json`` (model config,
preset, tokenizer, corpus digest), ``weights-NN.pt`` (bfloat16 shards, each < 16 MiB) and
``metrics.json`` (held-out loss and the top-1/top-2 margin distribution).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import sysconfig
from pathlib import Path

import torch
from torch import nn

from ..errors import UserError
from ..window import Window
from .model import ModelConfig, TinyDecoder, rope

EXCLUDED_DIRS = frozenset({"site-packages", "dist-packages", "__pycache__"})  # third-party code, bytecode
HELDOUT_MOD = 20
VOCAB = 256
SHARD_BYTES = 15 * 2**20  # < 16 MiB per weights file
#: The weights are stored (and the trainer rounds them) in bfloat16: the stored model is exactly the
#: model every dtype runs (float64 and float32 hold bfloat16 values exactly), at half the size.
WEIGHTS_DTYPE = torch.bfloat16

#: ``attn(layer, q, k, v, window, softcap, q_lens, k_lens) -> out``: q ``(total_q, hq, hd)``,
#: k / v ``(total_k, hkv, hd)`` packed over the batch (sequence ``b`` is rows
#: ``sum(lens[:b])...``), out ``(total_q, hq, hd)``; windows bottom-right aligned.
BATCH_ATTN_DOC = "attn(layer, q, k, v, window, softcap, q_lens, k_lens)"


# -- corpus and tokenizer ------------------------------------------------------------------------


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def corpus_files(root: Path | None = None) -> list[Path]:
    """The standard library's ``.py`` files, sorted by relative path."""
    root = root or stdlib_root()
    files = [p for p in root.rglob("*.py") if not EXCLUDED_DIRS.intersection(p.relative_to(root).parts[:-1])]
    return sorted(files, key=lambda p: p.relative_to(root).as_posix())


def is_heldout(rel: str) -> bool:
    return int(hashlib.sha1(rel.encode()).hexdigest(), 16) % HELDOUT_MOD == 0


@dataclasses.dataclass(frozen=True)
class Corpus:
    train: bytes
    heldout: bytes
    digest: str  # SHA-1 of the file list and contents, first 12 hex digits
    files: int


def load_corpus(max_bytes: int | None = None, root: Path | None = None) -> Corpus:
    """Train / held-out bytes of the standard library (files joined with a blank line).

    ``max_bytes``: stop adding files to the training split past this many bytes (the held-out
    split keeps at most a tenth of it); ``None``: everything.
    """
    root = root or stdlib_root()
    train: list[bytes] = []
    held: list[bytes] = []
    h = hashlib.sha1()
    n_train = n_held = files = 0
    for p in corpus_files(root):
        rel = p.relative_to(root).as_posix()
        to_held = is_heldout(rel)
        if max_bytes is not None and (n_held >= max_bytes // 10 if to_held else n_train >= max_bytes):
            continue
        try:
            data = p.read_bytes() + b"\n\n"
        except OSError:
            continue
        (held if to_held else train).append(data)
        h.update(rel.encode() + b"\0" + data)
        files += 1
        if to_held:
            n_held += len(data)
        else:
            n_train += len(data)
    if not train or not held:
        raise UserError(f"no Python sources found under {root} to train the decode language model on")
    return Corpus(b"".join(train), b"".join(held), h.hexdigest()[:12], files)


def encode(text: bytes | str) -> torch.Tensor:
    """Bytes -> token ids ``(N,)`` int64 (the tokenizer is the identity on bytes)."""
    raw = text.encode() if isinstance(text, str) else text
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8).long()


def decode_tokens(tokens) -> str:
    return bytes(int(t) for t in tokens).decode("utf-8", errors="replace")


def prompts_from(heldout: bytes, n: int, length: int, seed: int = 0) -> torch.Tensor:
    """``n`` held-out snippets of ``length`` bytes, each starting at a line start: ``(n, length)``."""
    data = encode(heldout)
    starts = (data[:-1] == 10).nonzero().flatten() + 1  # (lines,) the byte after each newline
    starts = starts[starts + length < data.shape[0]]
    if starts.numel() < n:
        raise UserError(f"the held-out text has {starts.numel()} line starts, fewer than the {n} prompts asked for")
    gen = torch.Generator().manual_seed(10_000 + seed)
    pick = starts[torch.randperm(starts.numel(), generator=gen)[:n]].sort().values  # (n,)
    return torch.stack([data[s : s + length] for s in pick.tolist()])  # (n, length)


# -- the model -----------------------------------------------------------------------------------


class TextLM(TinyDecoder):
    """:class:`TinyDecoder` with SDPA training and a batched, packed KV-cache step."""

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """``tokens`` ``(B, T)`` -> logits ``(B, T, vocab)`` (training; masked SDPA per layer)."""
        cfg = self.cfg
        b, t = tokens.shape
        pos = torch.arange(t, device=tokens.device).repeat(b)  # (B*T,)
        g = cfg.hq // cfg.hkv
        masks = {w: w.mask(t, t, tokens.device) for w in set(self.windows)}  # (T, T) each
        x = self._embed(tokens)  # (B, T, d)
        for i, layer in enumerate(self.blocks()):
            h = layer.norm1(x)
            q = rope(layer.wq(h).view(b * t, cfg.hq, cfg.head_dim), pos, cfg.rope_theta)
            k = rope(layer.wk(h).view(b * t, cfg.hkv, cfg.head_dim), pos, cfg.rope_theta)
            v = layer.wv(h).view(b, t, cfg.hkv, cfg.head_dim)
            q = q.view(b, t, cfg.hq, cfg.head_dim).transpose(1, 2)  # (B, hq, T, hd)
            k = k.view(b, t, cfg.hkv, cfg.head_dim).transpose(1, 2).repeat_interleave(g, 1)  # (B, hq, T, hd)
            v = v.transpose(1, 2).repeat_interleave(g, 1)  # (B, hq, T, hd)
            o = nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=masks[cfg.layer_window(i)])  # (B, hq, T, hd)
            x = x + layer.wo(o.transpose(1, 2).reshape(b, t, -1))
            x = x + layer.mlp(layer.norm2(x))
        return self._logits(x)

    def new_batch_cache(self, batch: int, max_len: int, dtype: torch.dtype, device) -> list[tuple[torch.Tensor, torch.Tensor]]:
        cfg = self.cfg
        shape = (batch, max_len, cfg.hkv, cfg.head_dim)
        return [(torch.zeros(shape, dtype=dtype, device=device), torch.zeros(shape, dtype=dtype, device=device)) for _ in self.layers]

    @torch.no_grad()
    def step(self, tokens: torch.Tensor, start: int, cache, attn) -> torch.Tensor:
        """Run ``tokens`` ``(B, S)`` at positions ``start..start+S-1`` of every sequence.

        Writes their keys / values into ``cache`` and returns the logits of each sequence's
        last token ``(B, vocab)``. Each layer makes one packed call (see :data:`BATCH_ATTN_DOC`):
        ``q_lens = (S,) * B``, ``k_lens = (start + S,) * B``.
        """
        cfg = self.cfg
        b, s = tokens.shape
        end = start + s
        pos = torch.arange(start, end, device=tokens.device).repeat(b)  # (B*S,)
        x = self._embed(tokens)  # (B, S, d)
        q_lens, k_lens = (s,) * b, (end,) * b
        for i, layer in enumerate(self.blocks()):
            h = layer.norm1(x)
            q = rope(layer.wq(h).view(b * s, cfg.hq, cfg.head_dim), pos, cfg.rope_theta)  # (B*S, hq, hd)
            k = rope(layer.wk(h).view(b * s, cfg.hkv, cfg.head_dim), pos, cfg.rope_theta)  # (B*S, hkv, hd)
            kc, vc = cache[i]
            kc[:, start:end] = k.view(b, s, cfg.hkv, cfg.head_dim)
            vc[:, start:end] = layer.wv(h).view(b, s, cfg.hkv, cfg.head_dim)
            kp = kc[:, :end].reshape(b * end, cfg.hkv, cfg.head_dim)  # (B*Sk, hkv, hd)
            vp = vc[:, :end].reshape(b * end, cfg.hkv, cfg.head_dim)  # (B*Sk, hkv, hd)
            o = attn(i, q.contiguous(), kp, vp, cfg.layer_window(i), cfg.attn_softcap, q_lens, k_lens)  # (B*S, hq, hd)
            x = x + layer.wo(o.reshape(b, s, cfg.hq * cfg.head_dim).to(x.dtype))
            x = x + layer.mlp(layer.norm2(x))
        return self._logits(x[:, -1])


def dense_attention(compute_dtype: torch.dtype):
    """The naive masked attention of a uniform packed batch, computed in ``compute_dtype``.

    float64: the study's reference; the run's dtype: the noise calibration (as
    :func:`parity.attention_reference` with ``compute_dtype``, batched instead of per sequence).
    """

    def attn(layer, q, k, v, window: Window, softcap, q_lens, k_lens):
        b, sq, sk = len(q_lens), q_lens[0], k_lens[0]
        hq, hkv, hd = q.shape[1], k.shape[1], q.shape[2]
        qf = q.to(compute_dtype).view(b, sq, hq, hd).transpose(1, 2)  # (B, hq, Sq, hd)
        kf = k.to(compute_dtype).view(b, sk, hkv, hd).transpose(1, 2).repeat_interleave(hq // hkv, 1)  # (B, hq, Sk, hd)
        vf = v.to(compute_dtype).view(b, sk, hkv, hd).transpose(1, 2).repeat_interleave(hq // hkv, 1)  # (B, hq, Sk, hd)
        s = qf @ kf.transpose(-1, -2) / math.sqrt(hd)  # (B, hq, Sq, Sk)
        if softcap is not None:
            s = softcap * torch.tanh(s / softcap)
        s = s.masked_fill(~window.mask(sq, sk, q.device), float("-inf"))
        o = torch.softmax(s, -1) @ vf  # (B, hq, Sq, hd)
        return o.transpose(1, 2).reshape(b * sq, hq, hd).to(q.dtype)

    return attn


# -- the folder ----------------------------------------------------------------------------------


def model_config(d: dict) -> ModelConfig:
    return ModelConfig(**{f.name: d[f.name] for f in dataclasses.fields(ModelConfig) if f.name in d})


def config_dict(model: TextLM, extra: dict) -> dict:
    """The content of ``config.json``: the model config, the tokenizer, and ``extra`` (training)."""
    return {"model": model.cfg.to_dict(), "tokenizer": {"type": "bytes", "vocab": VOCAB}, **extra}


def save(model: TextLM, folder: Path, config_extra: dict, metrics: dict) -> list[Path]:
    """Write the model folder; returns the files written (every weights file < 16 MiB)."""
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("weights-*.pt"):
        old.unlink()
    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for name, t in model.state_dict().items():
        n = t.numel() * WEIGHTS_DTYPE.itemsize
        if shards[-1] and size + n > SHARD_BYTES:
            shards.append({})
            size = 0
        shards[-1][name] = t.detach().to(WEIGHTS_DTYPE).cpu().contiguous()
        size += n
    written = []
    for i, shard in enumerate(shards):
        path = folder / f"weights-{i:02d}.pt"
        torch.save(shard, path)
        written.append(path)
    (folder / "config.json").write_text(json.dumps(config_dict(model, config_extra), indent=2) + "\n")
    (folder / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    return [*written, folder / "config.json", folder / "metrics.json"]


def load(folder: Path) -> tuple[TextLM, dict, dict]:
    """``(model (float32, eval), config.json, metrics.json)`` of a folder written by :func:`save`."""
    folder = Path(folder)
    if not (folder / "config.json").is_file():
        raise UserError(f"{folder}: not a decode language model folder (no config.json; train one with python -m parity decode-train)")
    config = json.loads((folder / "config.json").read_text())
    metrics = json.loads((folder / "metrics.json").read_text()) if (folder / "metrics.json").is_file() else {}
    model = TextLM(model_config(config["model"]))
    state: dict[str, torch.Tensor] = {}
    for path in sorted(folder.glob("weights-*.pt")):
        state.update({k: v.float() for k, v in torch.load(path, map_location="cpu", weights_only=True).items()})
    model.load_state_dict(state)
    model.eval()
    return model, config, metrics
