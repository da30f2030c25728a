"""``python -m parity decode``: greedy-decode divergence of a small sliding-window model per backend
(the library: :mod:`parity.decode`).

Writes ``OUT/decode.csv`` (one row per backend x model x prompt; columns in
:data:`parity.decode.run.COLUMNS`), ``OUT/decode_steps.csv`` (per step) and the
``OUT/decode.json`` sidecar (models, training, measured noise, configuration).
Exit codes as ``run``: 0 no real divergence and no error, 1 a real divergence, an error,
or a backend named with --backend unavailable, 2 a usage error.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .. import runfolder, runfolder_decode
from ..errors import UserError
from ..results import DTYPES, Outcome
from .common import check_out_folder, latest_run
from .common import split_list as _split

NAME = "decode"
DEFAULT_CPU_BACKENDS = ("reference", "sdpa", "flex")


def _ints(text: str) -> list[int]:
    try:
        vals = [int(x) for x in text.replace(" ", ",").split(",") if x]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not vals or any(v < 1 for v in vals):
        raise argparse.ArgumentTypeError(f"expected integers >= 1, got {text!r}")
    return vals


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(NAME, help="greedy-decode divergence of a small sliding-window model, per backend")
    p.add_argument(
        "--backend",
        "-b",
        action="append",
        metavar="NAME|module:Class",
        help="backend to test (repeatable, or comma-separated; 'all-gpu' etc. select groups); "
        f"default: every CUDA backend on a GPU machine, else {', '.join(DEFAULT_CPU_BACKENDS)}",
    )
    p.add_argument(
        "--model",
        action="append",
        choices=["mistral", "gemma2", "hf-mistral", "hf-qwen2", "hf-gemma2", "hf-checkpoint"],
        help="model architecture (repeatable; default mistral and gemma2: mistral = every layer local, "
        "gemma2 = local/global alternating with softcaps; hf-*: Hugging Face transformers architectures, "
        "random init + the same short training, needs transformers)",
    )
    p.add_argument("--hf-checkpoint", metavar="DIR", help="a local Hugging Face checkpoint directory (implies --model hf-checkpoint)")
    p.add_argument(
        "--dtype",
        choices=DTYPES,
        action="append",
        help="model and attention dtype (default bfloat16 on a GPU, float32 on the CPU); "
        "with --lm repeatable (default bfloat16 and float16)",
    )
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto", help="where the model runs (auto: cuda when available)")
    p.add_argument(
        "--prompt-lens",
        type=_ints,
        default=None,
        metavar="N,N,...",
        help="prompt lengths (default 8,15,16,17,24,40,72 around the window of 16)",
    )
    p.add_argument("--steps", type=int, default=None, help="greedy decode steps per prompt (default 32 on a GPU, 24 on the CPU)")
    p.add_argument("--window", type=int, default=None, help="the model's sliding window in tokens (default 16)")
    p.add_argument(
        "--page-size",
        type=int,
        default=None,
        help="decode steps carry this KV page size (paged path; backends without one are unsupported)",
    )
    p.add_argument(
        "--tie-factor",
        type=float,
        default=4.0,
        help="a divergence is a near-tie flip when the reference margin <= tie_factor x measured noise (default 4)",
    )
    p.add_argument(
        "--time-limit",
        type=float,
        default=None,
        help="seconds per backend and model before its remaining prompts are skipped (default 10 on a GPU, 60 on the CPU)",
    )
    p.add_argument("--seed", type=int, default=0, help="prompt seed (default 0)")
    p.add_argument("--no-cache", action="store_true", help="retrain the model instead of using the cached weights")
    p.add_argument(
        "--lm",
        metavar="DIR|cpu-tiny",
        help="the study on a byte-level language model of the standard library's sources instead: a folder written by "
        "python -m parity.decode.train, or the preset cpu-tiny (trained and cached on the fly); see docs/decode.md",
    )
    p.add_argument(
        "--prompts", type=int, default=None, help="--lm: held-out prompts, decoded as one batch (default 48 on a GPU, 8 on the CPU)"
    )
    p.add_argument(
        "--prompt-bytes", type=int, default=None, help="--lm: prompt length in bytes (default a quarter of the training context)"
    )
    p.add_argument("--swap-from", metavar="NAME", help="--lm: the backend a swap starts from (default the first backend)")
    p.add_argument("--out", type=Path, help="output folder (default: the latest run, reports/latest)")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress lines")
    return p


def run(args: argparse.Namespace) -> int:
    import torch

    from ..decode.run import DEFAULT_PROMPT_LENS, DecodeConfig, run_decode, summary_table

    if args.time_limit is not None and not args.time_limit > 0:  # not > 0: NaN too
        raise UserError(f"--time-limit must be > 0 seconds, got {args.time_limit:g}")
    if not args.tie_factor > 0:
        raise UserError(f"--tie-factor must be > 0, got {args.tie_factor:g}")
    _check_study_flags(args)
    args.out = args.out or latest_run()
    check_out_folder(args.out, "the decode results")
    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise UserError("--device cuda: no CUDA device here")
    on_gpu = device == "cuda"
    backend_names, explicit = _specs(args, on_gpu)
    if args.lm:
        return _run_lm(args, backend_names, explicit, device)
    if args.dtype and len(args.dtype) > 1:
        raise UserError("--dtype once, unless --lm")
    args.dtype = args.dtype[0] if args.dtype else None
    steps = args.steps if args.steps is not None else (32 if on_gpu else 24)
    for name, value, least in (("--steps", steps, 1), ("--window", args.window, 2), ("--page-size", args.page_size, 1)):
        if value is not None and value < least:
            raise UserError(f"{name} must be >= {least}, got {value}")
    models = _models(args)
    cfg = DecodeConfig(
        models=tuple(models),
        hf_checkpoint=args.hf_checkpoint,
        dtype=args.dtype or ("bfloat16" if on_gpu else "float32"),
        prompt_lens=tuple(args.prompt_lens or DEFAULT_PROMPT_LENS),
        steps=steps,
        window=args.window if args.window is not None else DecodeConfig.window,
        page_size=args.page_size,
        device=device,
        tie_factor=args.tie_factor,
        time_limit=args.time_limit if args.time_limit is not None else (10.0 if on_gpu else 60.0),
        seed=args.seed,
        use_cache=not args.no_cache,
    )
    log = None if args.quiet else (lambda s: print(s, file=sys.stderr, flush=True))
    print(
        f"parity decode: {len(backend_names)} backends x {len(cfg.models)} models x {len(cfg.prompt_lens)} prompts, "
        f"{cfg.steps} steps, {cfg.dtype} on {device} -> {args.out / runfolder_decode.DECODE}",
        file=sys.stderr,
    )
    result = run_decode(backend_names, cfg, args.out, log)
    print(summary_table(result.rows))
    print(
        f"parity decode: {result.seconds:.1f} s; wrote {args.out / runfolder_decode.DECODE}, "
        f"{runfolder_decode.DECODE_STEPS}, {runfolder_decode.DECODE_JSON}",
        file=sys.stderr,
    )
    if runfolder.holds_run(args.out):  # a sweep's folder: refresh its HTML report, which shows the decode section
        try:
            from ..report.write import write_all

            written = write_all(args.out)
            print("parity decode: refreshed " + ", ".join(str(p) for p in written), file=sys.stderr)
        except Exception as exc:  # noqa: BLE001 - the report is a convenience; decode.csv is the result
            print(f"parity decode: report not refreshed ({type(exc).__name__}: {exc})", file=sys.stderr)
    unavailable = sorted({r["backend"] for r in result.rows if r["verdict"] == Outcome.UNAVAILABLE and r["backend"] in explicit})
    for s in unavailable:
        print(f"parity decode: requested backend {s} is unavailable", file=sys.stderr)
    return 1 if (result.failed or unavailable) else 0


def _check_study_flags(args: argparse.Namespace) -> None:
    """A flag of the other study is a usage error, never ignored in silence: the --lm study's without --lm, the toy
    models' with it (the language model brings its own window and prompts). Only flags given count (defaults None)."""
    lm_only = (("--prompts", args.prompts), ("--prompt-bytes", args.prompt_bytes), ("--swap-from", args.swap_from))
    if not args.lm and (given := [flag for flag, value in lm_only if value is not None]):
        raise UserError(f"{given[0]} applies to the language-model study only: add --lm DIR|cpu-tiny, or drop {given[0]}")
    toy_only = (
        ("--model", args.model),
        ("--hf-checkpoint", args.hf_checkpoint),
        ("--prompt-lens", args.prompt_lens),
        ("--window", args.window),
        ("--page-size", args.page_size),
    )
    if args.lm and (given := [flag for flag, value in toy_only if value is not None]):
        raise UserError(f"{given[0]} applies to the toy-model study only, not to --lm: drop {given[0]}, or drop --lm")


def _specs(args: argparse.Namespace, on_gpu: bool) -> tuple[list[str], list[str]]:
    """The backends of the run (selectors expanded, each resolved) and those named explicitly."""
    from .. import backends

    requested = _split(args.backend)
    explicit = [s for s in requested if s not in backends.SELECTORS]
    backend_names: list[str] = []
    for s in requested or (["all-gpu"] if on_gpu else list(DEFAULT_CPU_BACKENDS)):
        backend_names.extend(x for x in backends.expand(s) if x not in backend_names)
    for backend in backend_names:
        try:
            backends.get(backend)
        except backends.BackendSpecError as exc:
            raise UserError(str(exc)) from None
    if not backend_names:
        raise UserError("no backend selected")
    return backend_names, explicit


def _models(args: argparse.Namespace) -> list[str]:
    """The models of ``--model`` / ``--hf-checkpoint``, checked (an HF model needs transformers)."""
    models = list(dict.fromkeys(args.model or ([] if args.hf_checkpoint else ["mistral", "gemma2"])))
    if args.hf_checkpoint and "hf-checkpoint" not in models:
        models.append("hf-checkpoint")
    if "hf-checkpoint" in models and not args.hf_checkpoint:
        raise UserError("--model hf-checkpoint needs --hf-checkpoint DIR")
    if args.hf_checkpoint and not Path(args.hf_checkpoint).is_dir():
        raise UserError(f"--hf-checkpoint {args.hf_checkpoint}: no such directory")
    if any(m.startswith("hf") for m in models):
        from ..decode.hf import unavailable_reason

        why = unavailable_reason()
        if why:
            raise UserError(why)
    return models


def _run_lm(args: argparse.Namespace, backend_names: list[str], explicit: list[str], device: str) -> int:
    """``--lm``: the study on a language model (:mod:`parity.decode.study`); the PR summary printed last."""
    from ..decode.study import StudyConfig, run_study

    on_gpu = device == "cuda"
    for name, val in (("--prompts", args.prompts), ("--prompt-bytes", args.prompt_bytes), ("--steps", args.steps)):
        if val is not None and val < 1:
            raise UserError(f"{name} must be >= 1")
    if args.swap_from and args.swap_from not in backend_names:
        raise UserError(f"--swap-from {args.swap_from}: not one of the backends of this run ({', '.join(backend_names)})")
    cfg = StudyConfig(
        model=args.lm,
        dtypes=tuple(dict.fromkeys(args.dtype or ["bfloat16", "float16"])),
        prompts=args.prompts or (48 if on_gpu else 8),
        prompt_len=args.prompt_bytes,
        steps=args.steps,
        device=device,
        tie_factor=args.tie_factor,
        time_limit=args.time_limit if args.time_limit is not None else (10.0 if on_gpu else 60.0),
        swap_from=args.swap_from,
        seed=args.seed,
        use_cache=not args.no_cache,
    )
    log = None if args.quiet else (lambda s: print(s, file=sys.stderr, flush=True))
    print(
        f"parity decode --lm {args.lm}: {len(backend_names)} backends x {len(cfg.dtypes)} dtypes on {device} -> {args.out}", file=sys.stderr
    )
    result = run_study(backend_names, cfg, args.out, log)
    print(
        f"parity decode: {result.seconds:.1f} s; wrote {args.out / runfolder_decode.LM_DECODE}, "
        f"{runfolder_decode.LM_FLIPS}, {runfolder_decode.LM_DECODE_JSON}, {runfolder_decode.DECODE_SUMMARY}",
        file=sys.stderr,
    )
    unavailable = sorted({r["backend"] for r in result.rows if r["verdict"] == Outcome.UNAVAILABLE and r["backend"] in explicit})
    for s in unavailable:
        print(f"parity decode: requested backend {s} is unavailable", file=sys.stderr)
    print(result.summary, flush=True)
    return 1 if (result.failed or unavailable) else 0
