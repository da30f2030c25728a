"""``python -m parity run``: the parity sweep (cases x backends -> results.csv, the reports).

Exit codes: :data:`parity.errors.EXIT_CODES` (``run --help`` prints them).

This module parses: the flags become a frozen :class:`parity.runner.RunRequest`, and
:func:`parity.runner.run` does the work (no argparse Namespace goes below ``parity.cli``).
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

from ..errors import exit_codes_text
from ..results import DTYPES
from ..runner import RunRequest
from ..runner import run as run_request
from .common import add_expect_argument, resumed


def add_parser(subparsers) -> argparse.ArgumentParser:
    r = subparsers.add_parser(
        "run", help="run the parity sweep", epilog=exit_codes_text(), formatter_class=argparse.RawDescriptionHelpFormatter
    )
    _what_runs(r)
    _how_it_runs(r)
    _lanes_and_output(r)
    add_expect_argument(r)
    return r


def _what_runs(r: argparse.ArgumentParser) -> None:
    """The backends and the cases."""
    r.add_argument(
        "--backend",
        "-b",
        action="append",
        metavar="NAME|module:Class",
        help="backend to test (repeatable, or comma-separated); 'all', 'all-cpu', 'all-gpu' select groups; default: the CPU backends",
    )
    r.add_argument(
        "--profile",
        choices=["first", "quick", "default", "thorough", "models"],
        help="how many and how large the cases are (default: $PARITY_PROFILE, else 'default' when a GPU backend "
        "runs on a GPU here, else 'first': every trap at CPU sizes, about two minutes on 2 cores); "
        "'models': the attention calls of every model of the models table (parity.models)",
    )
    r.add_argument(
        "--model",
        action="append",
        metavar="NAME|PATH/config.json",
        help="run the attention calls of this model (repeatable): a name of the models table, or a Hugging Face "
        "config.json; at reduced lengths when no backend of the run is on a GPU",
    )
    r.add_argument(
        "--length-scale",
        type=int,
        metavar="DIV",
        help="--model / --profile models: divide every length and window by DIV (default 1 with a GPU backend, else 128)",
    )
    r.add_argument("--seed", type=int, default=0, help="seed of the hypothesis-drawn cases (default 0)")
    r.add_argument(
        "--out",
        type=Path,
        help="output folder (default: a new folder reports/runs/DATE-TIME, "
        "reports/latest pointing at it); one holding a run needs --resume or --force",
    )
    r.add_argument("--force", action="store_true", help="replace the run already in --out")
    r.add_argument("--case", action="append", metavar="JSON", help="run only this case (repeatable); what repro commands use")
    r.add_argument("--case-file", type=Path, help="run the cases in this file (one JSON case per line, or a results.csv)")
    r.add_argument(
        "--dtype",
        action="append",
        metavar="DTYPE[,DTYPE...]",
        help=f"only these dtypes (repeatable, or comma-separated): {', '.join(DTYPES)}",
    )


def _how_it_runs(r: argparse.ArgumentParser) -> None:
    """Which rows run again, how each is checked and timed."""
    r.add_argument(
        "--fail-fast",
        "-x",
        action="store_true",
        help="start no new row after the first failing one (the run is then partial; --resume runs the rest)",
    )
    r.add_argument(
        "--last-failed",
        type=Path,
        metavar="DIR",
        help="rerun the failing rows (fail, error, crash, timeout, unexpected-pass) of the run in DIR: "
        "its failing cases x its failing backends (unless --backend is given)",
    )
    r.add_argument("--no-probes", action="store_true", help="skip the exact mask and GQA probes")
    r.add_argument(
        "--grad",
        action="store_true",
        help="check the backward too: dq, dk, dv against the float64 reference gradients (a seeded upstream "
        "gradient), a budget per tensor, dk/dv exactly 0 for keys outside every window; forward-only backends: "
        "grad_check unsupported (docs/grad.md)",
    )
    inv = "batch invariance: rows of 2+ sequences run again on sub-batches (3 sequences alone at most, the batch rotated) "
    r.add_argument("--invariance", action="store_true", help=inv + "and must be equal bit for bit (docs/engine-checks.md)")
    graph = "CUDA graph replay: a CUDA row's call captured once, replayed on new inputs (and a padded batch) against eager"
    r.add_argument("--graph-replay", action="store_true", help=graph + " (docs/engine-checks.md)")
    r.add_argument(
        "--max-mask-passes",
        type=int,
        default=64,
        help="the full mask probe (one-hot, ceil(Sk / d) passes) where it needs at most this many passes, else the scaled "
        "probe (3-5 signed residue passes at any Sk; parity.maskscale) (default 64)",
    )
    r.add_argument(
        "--timeout",
        type=float,
        metavar="SECONDS",
        help="a fixed limit per row before its worker is killed (default: scaled per row, 120 s + 10 x the "
        "reference's time on the case x the backend's calls per row); a row that times out is retried once, alone",
    )
    r.add_argument(
        "--compile-grace",
        type=float,
        default=900.0,
        metavar="SECONDS",
        help="added to the limit of the first row of a configuration in a worker of a backend that builds kernels "
        "on first use (FlashInfer, FA4, flex, JAX, vLLM FA2), until one answers (default 900; 0: none)",
    )
    r.add_argument(
        "--no-isolate",
        action="store_true",
        help="run backends in this process (faster; a crash ends the run, a sticky CUDA error ends it partial)",
    )
    r.add_argument("--budget", action="append", metavar="DTYPE.FIELD=VALUE", help="override the error budget, e.g. bfloat16.k_max=3")
    r.add_argument(
        "--reference-device",
        choices=["auto", "cpu", "cuda"],
        default="auto",
        help="where the float64 reference runs (auto: cuda when available)",
    )
    r.add_argument(
        "--resume", action="store_true", help="keep rows already in OUT/results.csv and run only the rest (default OUT: reports/latest)"
    )
    r.add_argument("--repeats", type=int, default=1, help="time each call this many times, report the median (default 1)")
    r.add_argument(
        "--worker-path",
        action="append",
        metavar="BACKEND=PATH[:PATH]",
        help="prepend PATH to sys.path of BACKEND's worker (packages that cannot share one sys.path); a variant of "
        "BACKEND (vllm-fa3-split2-cuda of vllm-fa3-cuda: the same library) takes BACKEND's unless it has its own entry; "
        "python -m parity backends shows each one's. BACKEND must name a backend (one not in the run: a note), PATH "
        "exist; $PARITY_WORKER_PATH (same items, spaces or ';' between) comes first, lenient (docs/gpu.md)",
    )


def _lanes_and_output(r: argparse.ArgumentParser) -> None:
    """Lanes, GPUs, shards, caches and what the run writes."""
    r.add_argument(
        "--jobs",
        "-j",
        type=int,
        default=1,
        metavar="N",
        help="run the backends in N lanes at once (compile-bound backends then do not hold up the rest; "
        "per-case times are measured under that load); default 1",
    )
    r.add_argument(
        "--gpus",
        metavar="ID[,ID...]",
        help="pin each lane's workers to one of these GPUs (CUDA_VISIBLE_DEVICES ids), lanes placed by cost; "
        "default: every visible GPU (none on a machine without one); use with --jobs >= the GPUs",
    )
    r.add_argument(
        "--shard",
        metavar="K/N",
        help="run only shard K of N of the cases (deterministic, configurations kept whole, balanced on the "
        "backends' cost hints; `parity merge` joins the N folders and refuses an incomplete set)",
    )
    r.add_argument(
        "--split",
        action="append",
        metavar="BACKEND=K|auto",
        help="run BACKEND in K worker processes at once, each taking the cases of its own configurations "
        "(for backends that compile per configuration on the host: flex, JAX, cuDNN); needs --jobs >= K. "
        "'auto': split every backend whose cases x cost per row (measured by earlier runs with --compile-cache, "
        "else its cost hint) exceed an even share of the N lanes into ceil(its load / share) parts, at most "
        "its configurations; BACKEND=K wins for BACKEND; splits nothing with --jobs 1 or --no-isolate",
    )
    r.add_argument(
        "--time-limit",
        type=float,
        metavar="SECONDS",
        help="start no new row after this many seconds; what ran is written and reported as partial, "
        "and --resume on the same --out runs the rest",
    )
    r.add_argument(
        "--compile-cache",
        metavar="DIR",
        help="keep every compiler's disk cache (inductor, Triton, JAX/XLA, flash-attn-4, CUDA JIT) under DIR, "
        "so a rerun reuses the kernels (default: $PARITY_COMPILE_CACHE, else each compiler's own default)",
    )
    r.add_argument(
        "--precompile",
        choices=("auto", "on", "off"),
        default="auto",
        help="build each kernel key of the compiling backends (flex, FA4, JAX, FlashInfer, vLLM FA2) once, many at a "
        "time within the CPUs, each lane starting once its backends' keys are built, so the lanes run warm from the "
        "compile cache; with --time-limit it has a third of it, then its keys not built are the lanes' "
        "(auto, the default: when a compile cache is in use; rows and verdicts are the same either way)",
    )
    r.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    r.add_argument(
        "--shrink",
        type=int,
        default=40,
        metavar="CALLS",
        help="shrink each failing backend's first failure with at most CALLS backend calls (0: off; default 40)",
    )
    r.add_argument("--list-cases", action="store_true", help="print the cases as JSON lines and exit")
    r.add_argument("--no-report", action="store_true", help="write results.csv only, no HTML/Markdown")
    r.add_argument(
        "--no-siblings",
        action="store_true",
        help="do not add, for each backend, siblings of the generated cases it refuses for a reason that does not "
        "change the window logic (dtype, softcap, top-left, head dim, paged)",
    )
    r.add_argument(
        "--require-coverage",
        action="store_true",
        help="exit 1 when a backend ran none of a coverage cell that another backend of its family ran",
    )


def request(args: argparse.Namespace) -> RunRequest:
    """The run's request from its parsed flags (repeatable flags as tuples)."""
    values: dict[str, Any] = {}
    for f in dataclasses.fields(RunRequest):
        v = getattr(args, f.name, f.default)
        values[f.name] = tuple(v) if isinstance(v, list) else v
    for name in ("backend", "model", "case", "budget", "worker_path", "split"):
        values[name] = values[name] or ()
    return RunRequest(**values)


def run(args: argparse.Namespace) -> int:
    if args.resume:  # continue the folder's run as it was started (flags left at their defaults as recorded)
        args = resumed(args, add_parser)
    return run_request(request(args))
