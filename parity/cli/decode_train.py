"""``python -m parity decode-train`` (also ``python -m parity.decode.train``): train the decode
study's byte-level language model of the standard library's sources and write its folder
(the trainer: :mod:`parity.decode.train`; the folder: :func:`parity.decode.lm.save`).

Exit 0 when the folder is written, 2 for a usage error (a time-budget preset without
``--time-budget-s``, ``--device cuda`` without a GPU).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..errors import UserError
from .common import check_out_folder

NAME = "decode-train"
PRESETS = ("cpu-tiny", "gpu")  # parity.decode.train.PRESETS (not imported here: that imports torch)


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(NAME, help="train the decode study's language model (parity decode --lm)")
    p.add_argument("--preset", choices=PRESETS, default="cpu-tiny", help="cpu-tiny (fixed steps, CPU) or gpu (a time budget)")
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default cpu)")
    p.add_argument("--time-budget-s", type=float, default=None, help="wall-clock training budget in seconds (the gpu preset needs one)")
    p.add_argument("--steps", type=int, default=None, help="a fixed number of steps instead of the preset's")
    p.add_argument(
        "--max-passes", type=float, default=None, help="at most this many passes over the training text (0: no cap; default: the preset's)"
    )
    p.add_argument("--out", type=Path, required=True, help="the model folder to write")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress lines")
    return p


def run(args: argparse.Namespace) -> int:
    from ..decode.train import train_and_save

    if args.steps is not None and args.steps < 1:
        raise UserError("--steps must be >= 1")
    if args.time_budget_s is not None and args.time_budget_s <= 0:
        raise UserError("--time-budget-s must be > 0")
    if args.max_passes is not None and args.max_passes < 0:
        raise UserError("--max-passes must be >= 0 (0: no cap)")
    check_out_folder(args.out, "the model")
    _check_device(args.device)
    log = None if args.quiet else (lambda s: print(s, file=sys.stderr, flush=True))
    m = train_and_save(args.preset, args.device, args.out, args.time_budget_s, args.steps, log, args.max_passes)
    q, below = m["margin_quantiles"], m["margin_share_below"]
    print(
        f"decode-train {args.preset}: {m['train_steps']} steps ({m['train_passes']} passes) in {m['train_seconds']} s; "
        f"held-out {m['heldout_bits_per_byte']} "
        f"bits/byte, top-1 accuracy {m['heldout_top1_accuracy']}, margin median {q['0.5']} logits, "
        f"{below['0.1']} of positions below 0.1; wrote {args.out}"
    )
    return 0


def _check_device(device: str) -> None:
    """``--device`` names a torch device (torch's own RuntimeError was a traceback)."""
    import torch

    try:
        torch.device(device)
    except (RuntimeError, ValueError):
        raise UserError(f"--device {device!r}: not a device; expected cpu, cuda or cuda:N") from None
