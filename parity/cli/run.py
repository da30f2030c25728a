"""``python -m parity run``: the parity sweep (cases x backends -> results.csv, the reports).

Exit codes: 0 every case that ran passed or failed as a known divergence (``expected``,
see :mod:`parity.expect`); 1 a case failed, errored, crashed or timed out with no known
divergence explaining it, a strict known divergence passed (``unexpected-pass``), or a
backend named with --backend is unavailable; 2 a usage error (bad argument, invalid case,
unknown backend, a bad expectations file), reported in one line, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from ..errors import UserError as UsageError
from ..files import read_text
from ..results import DTYPES
from .common import EXIT_FAIL, EXIT_OK, EXIT_PARTIAL, add_expect_argument, check_out_dir, latest_run, load_expectations, new_run_dir
from .common import split_list as _split


def add_parser(subparsers) -> argparse.ArgumentParser:
    r = subparsers.add_parser("run", help="run the parity sweep")
    r.add_argument("--backend", "-b", action="append", metavar="NAME|module:Class",
                   help="backend to test (repeatable, or comma-separated); 'all', 'all-cpu', 'all-gpu' select groups; "
                        "default: the CPU backends")
    r.add_argument("--profile", choices=["first", "quick", "default", "thorough", "models"],
                   help="how many and how large the cases are (default: $PARITY_PROFILE, else 'default' when a GPU backend "
                        "runs on a GPU here, else 'first': every trap at CPU sizes, about two minutes on 2 cores); "
                        "'models': the attention calls of every model of the models table (parity.models)")
    r.add_argument("--model", action="append", metavar="NAME|PATH/config.json",
                   help="run the attention calls of this model (repeatable): a name of the models table, or a Hugging Face "
                        "config.json; at reduced lengths when no backend of the run is on a GPU")
    r.add_argument("--length-scale", type=int, metavar="DIV",
                   help="--model / --profile models: divide every length and window by DIV (default 1 with a GPU backend, "
                        "else 128)")
    r.add_argument("--seed", type=int, default=0, help="seed of the hypothesis-drawn cases (default 0)")
    r.add_argument("--out", type=Path, help="output folder (default: a new folder reports/runs/DATE-TIME, "
                                             "reports/latest pointing at it); one holding a run needs --resume or --force")
    r.add_argument("--force", action="store_true", help="replace the run already in --out")
    r.add_argument("--case", action="append", metavar="JSON", help="run only this case (repeatable); what repro commands use")
    r.add_argument("--case-file", type=Path, help="run the cases in this file (one JSON case per line, or a results.csv)")
    r.add_argument("--dtype", action="append", metavar="DTYPE[,DTYPE...]",
                   help=f"only these dtypes (repeatable, or comma-separated): {', '.join(DTYPES)}")
    r.add_argument("--fail-fast", "-x", action="store_true",
                   help="start no new row after the first failing one (the run is then partial; --resume runs the rest)")
    r.add_argument("--last-failed", type=Path, metavar="DIR",
                   help="rerun the failing rows (fail, error, crash, timeout, unexpected-pass) of the run in DIR: "
                        "its failing cases x its failing backends (unless --backend is given)")
    r.add_argument("--no-probes", action="store_true", help="skip the exact mask and GQA probes")
    r.add_argument("--max-mask-passes", type=int, default=64, help="mask probe limit: ceil(Sk / d) passes at most (default 64)")
    r.add_argument("--timeout", type=float, metavar="SECONDS",
                   help="a fixed limit per row before its worker is killed (default: scaled per row, 120 s + 10 x the "
                        "reference's time on the case x the backend's calls per row); a row that times out is retried once, alone")
    r.add_argument("--no-isolate", action="store_true",
                   help="run backends in this process (faster; a crash ends the run, a sticky CUDA error ends it partial)")
    r.add_argument("--budget", action="append", metavar="DTYPE.FIELD=VALUE", help="override the error budget, e.g. bfloat16.k_max=3")
    r.add_argument("--reference-device", choices=["auto", "cpu", "cuda"], default="auto",
                   help="where the float64 reference runs (auto: cuda when available)")
    r.add_argument("--resume", action="store_true",
                   help="keep rows already in OUT/results.csv and run only the rest (default OUT: reports/latest)")
    r.add_argument("--repeats", type=int, default=1, help="time each call this many times, report the median (default 1)")
    r.add_argument("--worker-path", action="append", metavar="BACKEND=PATH[:PATH]",
                   help="prepend PATH to sys.path of BACKEND's worker (packages that cannot share one sys.path)")
    r.add_argument("--jobs", "-j", type=int, default=1, metavar="N",
                   help="run the backends in N lanes at once (compile-bound backends then do not hold up the rest; "
                        "per-case times are measured under that load); default 1")
    r.add_argument("--gpus", metavar="ID[,ID...]",
                   help="pin each lane's workers to one of these GPUs (CUDA_VISIBLE_DEVICES ids), lanes placed by cost; "
                        "default: every visible GPU (none on a machine without one); use with --jobs >= the GPUs")
    r.add_argument("--shard", metavar="K/N",
                   help="run only shard K of N of the cases (deterministic, configurations kept whole, balanced on the "
                        "backends' cost hints; `parity merge` joins the N folders and refuses an incomplete set)")
    r.add_argument("--split", action="append", metavar="BACKEND=K",
                   help="run BACKEND in K worker processes at once, each taking the cases of its own configurations "
                        "(for backends that compile per configuration on the host: flex, JAX, cuDNN); needs --jobs >= K")
    r.add_argument("--time-limit", type=float, metavar="SECONDS",
                   help="start no new row after this many seconds; what ran is written and reported as partial, "
                        "and --resume on the same --out runs the rest")
    r.add_argument("--compile-cache", metavar="DIR",
                   help="keep every compiler's disk cache (inductor, Triton, JAX/XLA, flash-attn-4, CUDA JIT) under DIR, "
                        "so a rerun reuses the kernels (default: $PARITY_COMPILE_CACHE, else each compiler's own default)")
    r.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    r.add_argument("--shrink", type=int, default=40, metavar="CALLS",
                   help="shrink each failing backend's first failure with at most CALLS backend calls (0: off; default 40)")
    r.add_argument("--list-cases", action="store_true", help="print the cases as JSON lines and exit")
    r.add_argument("--no-report", action="store_true", help="write results.csv only, no HTML/Markdown")
    r.add_argument("--no-siblings", action="store_true",
                   help="do not add, for each backend, siblings of the generated cases it refuses for a reason that does not "
                        "change the window logic (dtype, softcap, top-left, head dim, paged)")
    r.add_argument("--require-coverage", action="store_true",
                   help="exit 1 when a backend ran none of a coverage cell that another backend of its family ran")
    add_expect_argument(r)
    return r


def _load_cases(args: argparse.Namespace, specs: Sequence[str] = ()) -> tuple[list, dict]:
    """The run's cases, and what the design did (long-case cap, siblings per backend) for environment.json."""
    from ..case import Case
    from ..strategies import CPU_LONG_CAP, generate, profile

    if args.case or args.case_file:
        cases = [Case.from_json(text) for text in args.case or []]
        if args.case_file:
            if not args.case_file.exists():
                raise UsageError(f"--case-file {args.case_file}: no such file")
            text = read_text(args.case_file)
            if args.case_file.name.endswith((".csv", ".csv.gz")):
                import csv

                seen = set()
                for row in csv.DictReader(text.splitlines()):
                    if row.get("case_json") and row["case_json"] not in seen:
                        seen.add(row["case_json"])
                        cases.append(Case.from_json(row["case_json"]))
            else:
                for n, line in enumerate(text.splitlines(), 1):
                    if line.strip():
                        try:
                            cases.append(Case.from_json(line))
                        except ValueError as exc:
                            raise UsageError(f"{args.case_file}:{n}: {exc}") from None
        if args.dtype:
            cases = [c for c in cases if c.dtype in args.dtype]
        return cases, {}
    if args.model or args.profile == "models":
        return _model_cases(args, specs)
    from .. import backends
    from ..design import place

    instances = {s: backends.get(s) for s in specs}
    gpu = any(getattr(b, "device", "cpu") == "cuda" for b in instances.values())
    chosen = args.profile
    args.profile = first_run_profile(args.profile, instances, _gpu_here() if gpu else False)
    try:
        prof = profile(args.profile)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    long_len = prof.long_len if gpu else min(prof.long_len, CPU_LONG_CAP)
    cases = generate(prof, args.seed, tuple(args.dtype) if args.dtype else DTYPES, long_len)
    design = {"long_len": long_len, "long_capped": long_len < prof.long_len,
              "long_cap_why": "" if gpu else f"no GPU backend in the run: long key ranges capped at Sk={CPU_LONG_CAP}"}
    if not args.no_siblings:
        cases, added = place(cases, instances)
        design["siblings"] = {s: n for s, n in added.items() if n}
    if prof.name == "first" and not chosen and not os.environ.get("PARITY_PROFILE") and not args.list_cases:
        print(left_out(prof, len(cases)), file=sys.stderr)
    return cases, design


def _model_cases(args: argparse.Namespace, specs: Sequence[str]) -> tuple[list, dict]:
    """``--model`` / ``--profile models``: the models' cases; lengths divided on a run without a GPU backend (said on stdout)."""
    from .. import backends
    from ..models import CPU_SCALE_DOWN, profile_cases

    if args.profile not in (None, "models"):
        raise UsageError(f"--model runs the models' own cases: drop --profile {args.profile} (or use --profile models)")
    gpu = any(getattr(backends.get(s), "device", "cpu") == "cuda" for s in specs)
    if args.length_scale is not None and args.length_scale < 1:
        raise UsageError(f"--length-scale must be >= 1, got {args.length_scale}")
    scale = args.length_scale or (1 if gpu else CPU_SCALE_DOWN)
    cases, models = profile_cases(args.model or [], tuple(args.dtype) if args.dtype else ("bfloat16",), scale, args.seed)
    why = "" if scale == 1 else (f"lengths and windows divided by {scale} (--length-scale)" if args.length_scale
                                 else f"no GPU backend in the run: lengths and windows divided by {scale}")
    if why:
        print(f"parity: models at REDUCED lengths: {why}")
    for m in models:
        for note in m.notes:
            print(f"parity: model {m.name}: {note}")
    design = {"models": {m.name: {"attention": m.describe(), "source": m.source, "notes": list(m.notes)} for m in models},
              "length_scale": scale, "reduced_why": why, "long_capped": scale > 1, "long_cap_why": why}
    return cases, design


def first_run_profile(chosen: str | None, instances: dict, gpu_here: bool) -> str:
    """The run's profile: ``--profile``, else ``$PARITY_PROFILE``, else ``default`` where a backend of the
    run is a CUDA one and a GPU is here (a GPU runner), else ``first`` (CPU sizes, about two minutes)."""
    if chosen or os.environ.get("PARITY_PROFILE"):
        return chosen or os.environ["PARITY_PROFILE"]
    gpu = gpu_here and any(getattr(b, "device", "cpu") == "cuda" for b in instances.values())
    return "default" if gpu else "first"


def _gpu_here() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def left_out(prof, n_cases: int) -> str:
    """What the ``first`` profile leaves out of the ``default`` one, and how to run that."""
    from ..strategies import PROFILES

    full = PROFILES["default"]
    return (f"parity: first run on the CPU: profile 'first' ({n_cases} cases: every curated edge case in one dtype, "
            f"the 100-cell window grid, a pairwise design of the coverage model, {prof.examples} drawn cases; "
            f"lengths <= {prof.max_len}, {prof.long_count} long key range of 2048 keys).\n"
            f"parity: left out (the default profile runs them): the edge cases in the other two dtypes, lengths "
            f"{prof.max_len + 1}..{full.max_len} (the 256-key tile), {full.examples - prof.examples} more drawn cases, "
            f"{full.long_count - prof.long_count} more long cases, batches of {full.max_batch}.\n"
            f"parity: the full default profile (about 1300 rows, 8 min or more on 2 idle cores): "
            f"python -m parity run --profile default")


def _splits(items: Sequence[str] | None) -> dict[str, int]:
    """``--split BACKEND=K`` items as ``{BACKEND: K}`` (checked against the run by :func:`sweep.check_splits`)."""
    out: dict[str, int] = {}
    for item in items or []:
        name, sep, k = item.partition("=")
        if not sep or not name or not k.strip().isdigit():
            raise UsageError(f"--split wants BACKEND=K (K a whole number), got {item!r}")
        out[name] = int(k)
    return out


def _run_specs(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """The backends of the run (selectors expanded, every name resolved) and those named explicitly."""
    from .. import backends

    requested = _split(args.backend)
    if args.backend and not requested:
        raise UsageError(f"--backend {' '.join(map(repr, args.backend))} names no backend")
    explicit = [s for s in requested if s not in backends.SELECTORS]
    specs: list[str] = []
    for s in requested or list(backends.DEFAULT_CPU):
        specs.extend(backends.expand(s))
    for spec in specs:  # resolve now: an unknown name is a usage error, not a row
        try:
            backends.get(spec)
        except backends.BackendSpecError as exc:
            raise UsageError(str(exc)) from None
    return specs, explicit


def _check_run_args(args: argparse.Namespace, specs: list[str]) -> tuple[dict, dict[str, int]]:
    """The run's numeric arguments checked; its error budgets and its ``--split`` parts."""
    from ..sweep import check_splits
    from ..verdict import budgets_with

    try:
        budgets = budgets_with(args.budget)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    for flag, value in (("--repeats", args.repeats), ("--max-mask-passes", args.max_mask_passes), ("--jobs", args.jobs)):
        if value < 1:
            raise UsageError(f"{flag} must be >= 1, got {value}")
    if args.timeout is not None and args.timeout <= 0:
        raise UsageError(f"--timeout must be > 0 seconds, got {args.timeout:g}")
    if args.time_limit is not None and args.time_limit <= 0:
        raise UsageError(f"--time-limit must be > 0 seconds, got {args.time_limit:g}")
    try:  # before any case is generated: a bad --split costs nothing
        splits = check_splits(_splits(args.split), specs, args.jobs, not args.no_isolate)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return budgets, splits


def _reference_device(choice: str) -> str:
    import torch

    ref_dev = choice
    if ref_dev == "auto":
        ref_dev = "cuda" if torch.cuda.is_available() else "cpu"
    if ref_dev == "cuda" and not torch.cuda.is_available():
        raise UsageError("--reference-device cuda: no CUDA device here")
    return ref_dev


def _compile_cache(choice: str | None) -> tuple[Path | None, dict[str, dict[str, int]]]:
    """``--compile-cache`` enabled; its folder (None: off) and what it held before the run."""
    from .. import compile_cache

    cache_root = compile_cache.resolve(choice)
    cache_before: dict[str, dict[str, int]] = {}
    if cache_root is not None:
        try:
            compile_cache.enable(cache_root)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        cache_before = compile_cache.inventory(cache_root)
    return cache_root, cache_before


def _dtypes(values: Sequence[str] | None) -> list[str] | None:
    """``--dtype a,b --dtype c`` as a checked list (None: every dtype)."""
    names = _split(values)
    for d in names:
        if d not in DTYPES:
            raise UsageError(f"--dtype: invalid choice: {d!r} (choose from {', '.join(DTYPES)})")
    return names or None


def _last_failed(args: argparse.Namespace) -> None:
    """``--last-failed DIR``: its failing rows' cases become the run's cases, its failing backends the
    run's backends (when --backend is not given)."""
    import csv
    import io

    from ..results import FAIL_VERDICTS

    path = args.last_failed / "results.csv"
    if not path.exists() and (args.last_failed / "results.csv.gz").exists():
        path = args.last_failed / "results.csv.gz"
    if not path.exists():
        raise UsageError(f"--last-failed {args.last_failed}: no results.csv there (not a run folder)")
    rows = [r for r in csv.DictReader(io.StringIO(read_text(path), newline="")) if r.get("verdict") in FAIL_VERDICTS]
    if not rows:
        raise UsageError(f"--last-failed {args.last_failed}: no failing row in {path}; nothing to rerun")
    args.case = [*(args.case or []), *dict.fromkeys(r["case_json"] for r in rows)]
    if not args.backend:
        args.backend = list(dict.fromkeys(r["backend"] for r in rows))


def run(args: argparse.Namespace) -> int:
    from ..sweep import SweepOptions, run_sweep
    from ..sweep.options import read_gpus

    args.dtype = _dtypes(args.dtype)
    if args.last_failed:
        _last_failed(args)
    specs, explicit = _run_specs(args)
    budgets, splits = _check_run_args(args, specs)
    gpus = read_gpus(args.gpus, not args.no_isolate)  # before any case is generated: a bad --gpus costs nothing
    expectations = load_expectations(args.expect)
    cases, design = _load_cases(args, specs)
    cases, shard_rec = _shard(args, cases, specs)
    if args.list_cases:
        for c in cases:
            print(c.to_json())
        return EXIT_OK
    if not cases:
        raise UsageError("no case selected (check --case / --case-file / --dtype)")
    ref_dev = _reference_device(args.reference_device)
    out = _out_dir(args)
    cache_root, cache_before = _compile_cache(args.compile_cache)
    print(f"parity: {len(cases)} cases x {len(specs)} backends -> {out}/results.csv", file=sys.stderr)
    options = SweepOptions.from_args(args, budgets=budgets, splits=splits, expectations=expectations,
                                     reference_device=ref_dev, shard=shard_rec, gpus=tuple(gpus))
    try:
        result = run_sweep(specs, cases, out, options)
    except KeyboardInterrupt:
        print(f"parity: interrupted: a PARTIAL run; its finished rows are in {out}/results.csv; "
              f"parity run --resume --out {out} runs the rest", file=sys.stderr)
        return 130
    _write_environment(args, out, result, {"cases": len(cases), "reference_device": ref_dev, "splits": splits,
                                           "budgets": budgets, "design": design, "expectations": expectations,
                                           "cache": (cache_root, cache_before), "shard": shard_rec, "gpus": list(options.gpus)})
    return _finish_run(args, out, result, explicit, options)


def _out_dir(args: argparse.Namespace) -> Path:
    """The run's folder: ``--out`` (refused when it holds a run, unless --resume / --force), the latest
    run on a bare --resume, else a new folder under reports/runs/ (reports/latest then names it)."""
    if args.out is None and args.resume:
        args.out = latest_run()
    if args.out is None:
        args.out = new_run_dir()
        return args.out
    check_out_dir(args.out, args.resume, args.force)
    try:
        args.out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--out {args.out}: cannot use it as the output folder ({exc.strerror or exc})") from None
    return args.out


def _shard(args: argparse.Namespace, cases: list, specs: Sequence[str]) -> tuple[list, dict | None]:
    """``--shard K/N``: the shard's cases and its ``environment.json["shard"]`` (:mod:`parity.shard`)."""
    if not args.shard:
        return cases, None
    from .. import shard

    profile = _profile_name(args)
    try:
        return shard.for_run(cases, args.shard, specs, profile=profile, seed=args.seed, filters=shard.run_filters(args))
    except ValueError as exc:
        raise UsageError(f"--shard {args.shard}: {exc}") from None


def _profile_name(args: argparse.Namespace) -> str:
    """The profile environment.json records: ``models`` for a --model run."""
    return "models" if args.model else args.profile or os.environ.get("PARITY_PROFILE") or "default"


def _write_environment(args: argparse.Namespace, out: Path, result, run: dict) -> None:
    """OUT/environment.json: the machine, the backends and what the run was (earlier cut-short runs kept)."""
    from .. import compile_cache, env

    cache_root, cache_before = run["cache"]
    environment = env.collect(
        {
            "backends": result.infos,
            "profile": _profile_name(args),
            "seed": args.seed,
            "cases": run["cases"],
            "reference_device": run["reference_device"],
            "jobs": args.jobs,
            "gpus": run["gpus"],  # --gpus: the GPUs the lanes were pinned to ([]: none)
            "splits": run["splits"],
            "partial": result.partial or result.already + len(result.rows) < result.total,
            "rows_planned": result.planned,
            "rows_run": len(result.rows),
            "rows_in_folder": result.already + len(result.rows),
            "rows_total": result.total,
            "budgets": {k: vars(v) for k, v in run["budgets"].items()},
            "wall_seconds": round(result.seconds, 2),
            "reference_seconds": round(result.reference_seconds, 2),
            "compile_cache": None if cache_root is None else compile_cache.record(cache_root, cache_before),
            "design": run["design"],
            "expectations": run["expectations"].summary(),
            "shard": run["shard"],
        }
    )
    env_path = out / "environment.json"
    if args.resume and env_path.exists():  # keep what the earlier, cut-short runs into this folder were
        try:
            prev = json.loads(env_path.read_text())
            keep = ("date_utc", "command", "wall_seconds", "partial", "rows_run", "rows_planned", "jobs", "backends")
            environment["earlier_runs"] = [*prev.get("earlier_runs", []), {k: prev.get(k) for k in keep}]
        except (OSError, ValueError):
            pass
    env_path.write_text(json.dumps(environment, indent=2, default=str) + "\n")


def _finish_run(args: argparse.Namespace, out: Path, result, explicit: list[str], options) -> int:
    """Print the failures, shrink them, write the reports and the summary; the exit code."""
    from ..sweep import FAIL_VERDICTS, summary_table

    expectations = options.expectations

    failures = [r for r in result.rows if r["verdict"] in FAIL_VERDICTS]
    shown = _print_failures(failures, expectations)
    to_shrink = [r for r in failures if r["verdict"] != "unexpected-pass"]  # a pass has nothing to shrink
    if args.shrink > 0 and to_shrink:
        _shrink_failures(to_shrink, options, out)
    if not args.no_report:  # after shrinking, so the report shows the shrunk cases
        try:
            from ..report.write import write_all

            written = write_all(out, expectations=expectations)
            print("parity: wrote " + ", ".join(str(p) for p in written), file=sys.stderr)
        except ImportError as exc:
            print(f"parity: reports not written ({exc}); pip install 'attn-parity[report]'", file=sys.stderr)
    coverage_gaps = _coverage_warnings(out)
    hidden = sum(max(0, n - 3) for n in shown.values())
    if hidden:
        print(f"\n... and {hidden} more failing rows in {out}/results.csv")
    print()
    partial = result.partial or result.already + len(result.rows) < result.total
    stopped = f"{_stopped_by(args, result)}; {len(result.rows)} of {result.planned} rows ran"
    result = _whole_folder(result, out) if args.resume else result
    _write_json(out)
    print(summary_table(result))
    if partial:
        print(f"parity: PARTIAL: {stopped}; parity run --resume --out {out} runs the rest "
              f"(exit {EXIT_PARTIAL} unless a row failed)", file=sys.stderr)
    unavailable_explicit = [s for s in explicit if result.infos.get(s, {}).get("unavailable")]
    for s in unavailable_explicit:
        print(f"parity: requested backend {s} is unavailable: {result.infos[s]['unavailable']}", file=sys.stderr)
    if coverage_gaps and args.require_coverage:
        print(f"parity: --require-coverage: {coverage_gaps} backend(s) ran none of a cell their family ran (above)", file=sys.stderr)
        return EXIT_FAIL
    return EXIT_FAIL if (result.failed or unavailable_explicit) else EXIT_PARTIAL if partial else EXIT_OK


def _stopped_by(args: argparse.Namespace, result) -> str:
    if getattr(result, "stopped_by", ""):
        return result.stopped_by
    return f"--time-limit {args.time_limit:g} s reached" if args.time_limit is not None else "stopped early"


def _write_json(out: Path) -> None:
    """OUT/results.json: every row of OUT/results.csv (the same columns, as strings) as one JSON list."""
    import csv

    try:
        with (out / "results.csv").open(newline="") as fh:
            rows = [r for r in csv.DictReader(fh) if r.get("verdict")]
        (out / "results.json").write_text(json.dumps(rows, indent=1) + "\n")
    except OSError as exc:
        print(f"parity: results.json not written ({exc})", file=sys.stderr)


def _whole_folder(result, out: Path):
    """After --resume: ``result`` with every row of ``out/results.csv`` (earlier segments too), so the
    summary table and the exit code count the whole folder."""
    import csv
    import dataclasses

    try:
        with (out / "results.csv").open(newline="") as fh:
            rows = [r for r in csv.DictReader(fh) if r.get("verdict")]
    except OSError:
        return result
    return dataclasses.replace(result, rows=rows) if rows else result


def _coverage_warnings(out: Path) -> int:
    """Write OUT/coverage.csv; warn, per backend, about cells its family ran and it did not. The count warned."""
    from .. import backends, coverage

    coverage.write_csv(out)
    gaps = coverage.gaps(coverage.tally(coverage.read_rows(out)), backends.marker_for)
    for b, others in gaps.items():
        print(f"parity: coverage: {coverage.describe_gap(b, others)}", file=sys.stderr)
    return len(gaps)
def _print_failures(failures: list[dict], expectations) -> dict[str, int]:
    """The first three failing rows of each backend, with their mask words and repro; rows shown per backend."""
    shown: dict[str, int] = {}
    for r in failures:
        shown[r["backend"]] = shown.get(r["backend"], 0) + 1
        if shown[r["backend"]] > 3:
            continue
        if r["verdict"] == "unexpected-pass":
            entry = expectations.get(r["expected_id"])
            print(f"\nUNEXPECTED-PASS {r['backend']} [{r['expected_id']}] {r['case_id']}")
            print(f"  passed, but the strict known divergence {entry.describe() if entry else r['expected_id']}"
                  f" ({entry.source if entry else '?'}) expects {entry.verdict if entry else 'a failure'}")
            print(f"  repro: {r['repro']}")
            continue
        why = r["reasons"] or r["detail"]
        print(f"\n{r['verdict'].upper()} {r['backend']} [{why}] {r['case_id']}")
        if r.get("mask_check") == "mismatch":
            print(f"  mask: {r['mask_detail']}")
        if r.get("gqa_check") == "mismatch":
            print(f"  gqa: {r['gqa_detail']}")
        if r.get("worst_where"):
            print(f"  {r['worst_where']} (budget {r['threshold_max']}, err ratio {r['err_ratio']})")
        if r["verdict"] != "fail":
            print(f"  {r['detail']}")
        print(f"  repro: {r['repro']}")
    return shown


def _shrink_failures(failures: list[dict], options, out: Path) -> None:
    """Shrink the first failure of each backend (:func:`parity.sweep.shrinking.shrink_failures`); print the smaller reproductions."""
    from ..sweep.shrinking import shrink_failures

    for rec in shrink_failures(failures, options, out):
        small_row, spec = rec["row"], rec["backend"]
        if rec["small"].case_id != rec["original"].case_id:
            print(f"\nSHRUNK {spec} [{small_row.get('reasons') or small_row.get('detail')}] {rec['original'].summary()}  ->  "
                  f"{rec['small'].summary()} ({rec['calls']} calls{'; ' + rec['note'] if rec.get('note') else ''})")
            if small_row.get("mask_check") == "mismatch":
                print(f"  mask: {small_row['mask_detail']}")
            print(f"  repro: {rec['repro']}")
