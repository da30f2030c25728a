"""``parity run``'s work, below the command line: a frozen :class:`RunRequest` (what the command
line asked for, parsed by :mod:`parity.cli.run`) goes to :func:`run`, which loads the cases, runs the
sweep, writes the run folder through :mod:`parity.runfolder` (its rows read back once), prints the
failures, shrinks them, writes the reports, and returns the exit code (see :mod:`parity.cli.run`).
No argparse Namespace reaches this module."""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from . import runfolder
from .errors import EXIT_FAIL, EXIT_OK, EXIT_PARTIAL, EXIT_SIGNALLED, UserError
from .files import read_text
from .results import DTYPES, Outcome


def split_list(values: Sequence[str] | None) -> list[str]:
    """Repeatable, comma-separated option values (``-b a,b -b c``) as one list."""
    out: list[str] = []
    for v in values or []:
        out.extend(x.strip() for x in v.split(",") if x.strip())
    return out


@dataclasses.dataclass(frozen=True)
class RunRequest:
    """What ``parity run`` was asked: one field per flag, as given (repeatable flags as tuples; comma
    lists are split and checked by :func:`run`)."""

    backend: tuple[str, ...] = ()  # names and selectors as given (empty: the CPU backends)
    profile: str | None = None
    model: tuple[str, ...] = ()
    length_scale: int | None = None
    seed: int = 0
    out: Path | None = None
    force: bool = False
    case: tuple[str, ...] = ()
    case_file: Path | None = None
    dtype: tuple[str, ...] | None = None  # as given (None: every dtype); checked by run()
    fail_fast: bool = False
    last_failed: Path | None = None
    no_probes: bool = False
    max_mask_passes: int = 64
    timeout: float | None = None
    compile_grace: float = 900.0
    no_isolate: bool = False
    budget: tuple[str, ...] = ()
    reference_device: str = "auto"
    resume: bool = False
    repeats: int = 1
    worker_path: tuple[str, ...] = ()
    jobs: int = 1
    gpus: str | None = None
    shard: str | None = None
    split: tuple[str, ...] = ()
    time_limit: float | None = None
    compile_cache: str | None = None
    precompile: str = "auto"
    quiet: bool = False
    shrink: int = 40
    list_cases: bool = False
    no_report: bool = False
    no_siblings: bool = False
    require_coverage: bool = False
    expect: tuple[str, ...] | None = None
    grad: bool = False  # --grad: the backward too (parity.grad)
    invariance: bool = False  # --invariance: the batch invariance check (parity.invariance)
    graph_replay: bool = False  # --graph-replay: the CUDA graph replay check (parity.graphs)


def load_cases(req: RunRequest, backend_names: Sequence[str] = ()) -> tuple[list, dict, RunRequest]:
    """The run's cases, what the design did (long-case cap, siblings per backend) for environment.json,
    and ``req`` with the profile it ran (``first`` / ``default`` when none was given)."""
    from .case import Case
    from .strategies import CPU_LONG_CAP, generate, profile

    if req.case or req.case_file:
        cases = [Case.from_json(text) for text in req.case or []]
        if req.case_file:
            if not req.case_file.exists():
                raise UserError(f"--case-file {req.case_file}: no such file")
            text = read_text(req.case_file)
            if req.case_file.name.endswith((".csv", ".csv.gz")):
                import csv

                seen = set()
                reader = csv.DictReader(text.splitlines())
                if "case_json" not in (reader.fieldnames or ()):
                    raise UserError(f"--case-file {req.case_file}: a .csv case file is a results.csv (a case_json column); this has none")
                for n, row in enumerate(reader, 1):
                    if row.get("case_json") and row["case_json"] not in seen:
                        seen.add(row["case_json"])
                        try:
                            cases.append(Case.from_json(row["case_json"]))
                        except ValueError as exc:
                            raise UserError(f"{req.case_file}, row {n}: {exc}") from None
            else:
                for n, line in enumerate(text.splitlines(), 1):
                    if line.strip():
                        try:
                            cases.append(Case.from_json(line))
                        except ValueError as exc:
                            raise UserError(f"{req.case_file}:{n}: {exc}") from None
        if req.dtype:
            cases = [c for c in cases if c.dtype in req.dtype]
        return cases, {}, req
    if req.model or req.profile == "models":
        return (*_model_cases(req, backend_names), req)
    from . import backends
    from .design import place

    instances = {s: backends.get(s) for s in backend_names}
    gpu = any(getattr(b, "device", "cpu") == "cuda" for b in instances.values())
    chosen = req.profile
    req = dataclasses.replace(req, profile=first_run_profile(req.profile, instances, _gpu_here() if gpu else False))
    try:
        prof = profile(req.profile or "")
    except ValueError as exc:
        raise UserError(str(exc)) from None
    long_len = prof.long_len if gpu else min(prof.long_len, CPU_LONG_CAP)
    cases = generate(prof, req.seed, tuple(req.dtype) if req.dtype else DTYPES, long_len)
    design = {
        "long_len": long_len,
        "long_capped": long_len < prof.long_len,
        "long_cap_why": "" if gpu else f"no GPU backend in the run: long key ranges capped at Sk={CPU_LONG_CAP}",
    }
    if not req.no_siblings:
        cases, added = place(cases, instances)
        design["siblings"] = {s: n for s, n in added.items() if n}
    if prof.name == "first" and not chosen and not os.environ.get("PARITY_PROFILE") and not req.list_cases:
        print(left_out(prof, len(cases)), file=sys.stderr)
    return cases, design, req


def _model_cases(req: RunRequest, backend_names: Sequence[str]) -> tuple[list, dict]:
    """``--model`` / ``--profile models``: the models' cases; lengths divided on a run without a GPU backend (said on stdout)."""
    from . import backends
    from .models import CPU_SCALE_DOWN, profile_cases, without_shared

    if req.profile not in (None, "models"):
        raise UserError(f"--model runs the models' own cases: drop --profile {req.profile} (or use --profile models)")
    gpu = any(getattr(backends.get(s), "device", "cpu") == "cuda" for s in backend_names)
    if req.length_scale is not None and req.length_scale < 1:
        raise UserError(f"--length-scale must be >= 1, got {req.length_scale}")
    scale = req.length_scale or (1 if gpu else CPU_SCALE_DOWN)
    every, models = profile_cases(list(req.model), tuple(req.dtype) if req.dtype else ("bfloat16",), scale, req.seed, dedupe=False)
    cases, shared = without_shared(every)
    why = (
        ""
        if scale == 1
        else (
            f"lengths and windows divided by {scale} (--length-scale)"
            if req.length_scale
            else f"no GPU backend in the run: lengths and windows divided by {scale}"
        )
    )
    if why:
        print(f"parity: models at REDUCED lengths: {why}")
    for m in models:
        for note in m.notes:
            print(f"parity: model {m.name}: {note}")
    for kind, same in shared.items():
        print(f"parity: model {kind}: the same calls as {same}: run once, as {same}")
    design = {
        "models": {m.name: {"attention": m.describe(), "source": m.source, "notes": list(m.notes)} for m in models},
        "length_scale": scale,
        "reduced_why": why,
        "long_capped": scale > 1,
        "long_cap_why": why,
        "shared_calls": shared,
    }
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
    from .strategies import PROFILES

    full = PROFILES["default"]
    return (
        f"parity: first run on the CPU: profile 'first' ({n_cases} cases: every curated edge case in one dtype, "
        f"the 100-cell window grid, a pairwise design of the coverage model, {prof.examples} drawn cases; "
        f"lengths <= {prof.max_len}, {prof.long_count} long key range of 2048 keys).\n"
        f"parity: left out (the default profile runs them): the edge cases in the other two dtypes, lengths "
        f"{prof.max_len + 1}..{full.max_len} (the 256-key tile), {full.examples - prof.examples} more drawn cases, "
        f"{full.long_count - prof.long_count} more long cases, batches of {full.max_batch}.\n"
        f"parity: the full default profile (about 1300 rows, 8 min or more on 2 idle cores): "
        f"python -m parity run --profile default"
    )


def _splits(items: Sequence[str] | None) -> tuple[dict[str, int], bool]:
    """``--split BACKEND=K`` items as ``{BACKEND: K}`` (checked against the run by :func:`sweep.check_splits`),
    and whether ``--split auto`` was among them."""
    out: dict[str, int] = {}
    auto = False
    for item in items or []:
        name, sep, k = item.partition("=")
        if name.strip() == "auto":
            if sep:
                raise UserError(f"--split {item}: auto takes no K (it picks each backend's K from its cost); give --split auto")
            auto = True
            continue
        if not sep or not name or not k.strip().isdigit():
            raise UserError(f"--split wants BACKEND=K (K a whole number) or auto, got {item!r}")
        out[name] = int(k)
    return out, auto


def _run_specs(req: RunRequest) -> tuple[list[str], list[str]]:
    """The backends of the run (selectors expanded, every name resolved) and those named explicitly."""
    from . import backends

    requested = split_list(req.backend)
    if req.backend and not requested:
        raise UserError(f"--backend {' '.join(map(repr, req.backend))} names no backend")
    explicit = [s for s in requested if s not in backends.SELECTORS]
    backend_names: list[str] = []
    for s in requested or list(backends.DEFAULT_CPU):
        backend_names.extend(backends.expand(s))
    for backend in backend_names:  # resolve now: an unknown name is a usage error, not a row
        try:
            backends.get(backend)
        except backends.BackendSpecError as exc:
            raise UserError(str(exc)) from None
    return backend_names, explicit


def _check_run_args(req: RunRequest, backend_names: list[str]) -> tuple[dict, dict[str, int], bool]:
    """The run's numeric arguments checked; its error budgets, its ``--split`` parts (as given: ``B=1``
    keeps B whole under ``--split auto``) and whether ``--split auto`` was given."""
    from .memory import host_memory
    from .sweep import check_splits
    from .verdict import budgets_with

    try:
        budgets = budgets_with(list(req.budget) or None)
        host_memory()  # a bad PARITY_HOST_MEMORY: before any worker meets it
    except ValueError as exc:
        raise UserError(str(exc)) from None
    for flag, value in (("--repeats", req.repeats), ("--max-mask-passes", req.max_mask_passes), ("--jobs", req.jobs)):
        if value < 1:
            raise UserError(f"{flag} must be >= 1, got {value}")
    if req.shrink < 0:
        raise UserError(f"--shrink must be >= 0 calls (0: off), got {req.shrink}")
    if req.timeout is not None and not req.timeout > 0:  # not > 0: NaN too
        raise UserError(f"--timeout must be > 0 seconds, got {req.timeout:g}")
    if not req.compile_grace >= 0:
        raise UserError(f"--compile-grace must be >= 0 seconds, got {req.compile_grace:g}")
    if req.time_limit is not None and not req.time_limit > 0:
        raise UserError(f"--time-limit must be > 0 seconds, got {req.time_limit:g}")
    if req.precompile == "on" and req.no_isolate:
        raise UserError("--precompile on builds kernels in worker processes: it cannot go with --no-isolate")
    splits, auto = _splits(req.split)
    try:  # before any case is generated: a bad --split costs nothing
        check_splits(splits, backend_names, req.jobs, not req.no_isolate)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    return budgets, splits, auto


def _reference_device(choice: str) -> str:
    import torch

    ref_dev = choice
    if ref_dev == "auto":
        ref_dev = "cuda" if torch.cuda.is_available() else "cpu"
    if ref_dev == "cuda" and not torch.cuda.is_available():
        raise UserError("--reference-device cuda: no CUDA device here")
    return ref_dev


def _compile_cache(choice: str | None) -> tuple[Path | None, dict[str, dict[str, int]]]:
    """``--compile-cache`` enabled; its folder (None: off) and what it held before the run."""
    from . import compile_cache

    cache_root = compile_cache.resolve(choice)
    cache_before: dict[str, dict[str, int]] = {}
    if cache_root is not None:
        try:
            compile_cache.enable(cache_root)
        except ValueError as exc:
            raise UserError(str(exc)) from None
        cache_before = compile_cache.inventory(cache_root)
    return cache_root, cache_before


def _dtypes(values: Sequence[str] | None) -> tuple[str, ...] | None:
    """``--dtype a,b --dtype c`` as a checked tuple (None: every dtype)."""
    names = tuple(split_list(values))
    for d in names:
        if d not in DTYPES:
            raise UserError(f"--dtype: invalid choice: {d!r} (choose from {', '.join(DTYPES)})")
    return names or None


def _last_failed(req: RunRequest) -> RunRequest:
    """``--last-failed DIR``: its failing rows' cases become the run's cases, its failing backends the
    run's backends (when --backend is not given)."""
    from .results import FAIL_VERDICTS

    res = runfolder.read_results(req.last_failed) if req.last_failed else None
    if res is None:
        raise UserError(f"--last-failed {req.last_failed}: no results.csv there (not a run folder)")
    rows: list[runfolder.ResultRow] = [r for r in res.rows if r.get("verdict") in FAIL_VERDICTS]
    if not rows:
        raise UserError(f"--last-failed {req.last_failed}: no failing row in {res.path}; nothing to rerun")
    return dataclasses.replace(
        req,
        case=(*req.case, *dict.fromkeys(r["case_json"] for r in rows)),
        backend=req.backend or tuple(dict.fromkeys(r["backend"] for r in rows)),
    )


def run(req: RunRequest) -> int:
    """Run what ``req`` asks; the exit code (UserError on bad input)."""
    from .compile_cache import COSTS
    from .expect import load_checked
    from .sweep import Sweep
    from .sweep.options import read_gpus, read_worker_paths

    req = dataclasses.replace(req, dtype=_dtypes(req.dtype))
    if req.last_failed:
        req = _last_failed(req)
    backend_names, explicit = _run_specs(req)
    budgets, splits, auto_split = _check_run_args(req, backend_names)
    gpus = read_gpus(req.gpus, not req.no_isolate)  # before any case is generated: a bad --gpus costs nothing
    paths = read_worker_paths(list(req.worker_path), backend_names)  # as early: an unknown BACKEND or missing PATH
    expectations = load_checked(req.expect)
    cases, design, req = load_cases(req, backend_names)
    cases, shard_rec = _shard(req, cases, backend_names)
    if req.list_cases:
        for c in cases:
            print(c.to_json())
        return EXIT_OK
    if not cases:
        raise UserError("no case selected (check --case / --case-file / --dtype)")
    ref_dev = _reference_device(req.reference_device)
    out = _out_dir(req)
    cache_root, cache_before = _compile_cache(req.compile_cache)
    print(f"parity: {len(cases)} cases x {len(backend_names)} backends -> {out / runfolder.RESULTS}", file=sys.stderr)
    costs = "" if cache_root is None else str(cache_root / COSTS)  # measured costs: the lanes' plan
    options = sweep_options(
        req,
        budgets=budgets,
        splits=splits,
        auto_split=auto_split,
        expectations=expectations,
        reference_device=ref_dev,
        shard=shard_rec,
        gpus=tuple(gpus),
        cost_file=costs,
        worker_paths=paths,
    )
    facts = {
        "cases": len(cases),
        "reference_device": ref_dev,
        "splits": splits,
        "budgets": budgets,
        "design": design,
        "expectations": expectations,
        "cache": (cache_root, cache_before),
        "shard": shard_rec,
        "gpus": list(options.gpus),
        "run_id": f"{os.getpid()}-{time.time_ns()}",  # this run's environment.json in progress, told from an earlier run's
    }
    sweep = Sweep(backend_names, cases, options, out, on_started=lambda so_far: _write_environment(req, out, so_far, facts, True))
    return _sweep_and_finish(req, sweep, facts, explicit)


def _sweep_and_finish(req: RunRequest, sweep, facts: dict, explicit: list[str]) -> int:
    """Run ``sweep`` and write its folder under the stop signals (:mod:`parity.sweep.interrupt`): the first
    (SIGTERM, Ctrl-C, SIGHUP) ends the run as a partial one, the way --time-limit does, and it exits 128 + the
    signal's number; a second ends it where it is, after writing environment.json (partial) of what ran."""
    from .sweep.interrupt import StopSignals

    out, written = sweep.out_dir, False
    signals = StopSignals(sweep.interrupt)
    try:
        with signals:
            result = sweep.run()
            _write_environment(req, out, result, facts)
            written = True  # the sweep's end said: a signal from here on changes no record
            code = _finish_run(req, out, result, explicit, sweep.options, sweep.stop.is_set)
            return EXIT_SIGNALLED[sweep.interrupted] if sweep.interrupted else code  # a signal while shrinking too
    except KeyboardInterrupt:  # a second signal (or Ctrl-C where no handler could be set): what ran, said at once
        if not sweep.interrupted:
            sweep.interrupt(signals.first or "SIGINT")
        if not written:
            _write_environment(req, out, sweep.snapshot(), facts)
        print(
            f"parity: interrupted by {sweep.interrupted}: {'a PARTIAL run; ' if not written else ''}its finished rows are in "
            f"{out}/results.csv; parity run --resume --out {out} runs the rest",
            file=sys.stderr,
        )
        return EXIT_SIGNALLED[sweep.interrupted]


def sweep_options(req: RunRequest, **checked):
    """The sweep's options (:class:`parity.sweep.SweepOptions`) from ``req``; ``checked``: what the
    run already checked and resolved (``budgets``, ``splits``, ``expectations``, ``reference_device``,
    ``shard``, ``gpus``); ``worker_paths`` read here (a bad one is a UserError)."""
    from .sweep import SweepOptions
    from .sweep.options import read_worker_paths

    if "worker_paths" not in checked:  # run() reads them first, with its backends (setdefault would read them again)
        checked["worker_paths"] = read_worker_paths(list(req.worker_path))
    return SweepOptions(
        isolate=not req.no_isolate,
        probes=not req.no_probes,
        max_passes=req.max_mask_passes,
        timeout=req.timeout,
        compile_grace=req.compile_grace,
        repeats=req.repeats,
        resume=req.resume,
        progress=not req.quiet,
        jobs=req.jobs,
        time_limit=req.time_limit,
        shrink_calls=req.shrink,
        fail_fast=req.fail_fast,
        grad=req.grad,
        checks=tuple(c for c, on in (("invariance", req.invariance), ("graph", req.graph_replay)) if on),
        precompile=req.precompile,
        **checked,
    )


def _out_dir(req: RunRequest) -> Path:
    """The run's folder: ``--out`` (refused when it holds a run, unless --resume / --force), the latest
    run on a bare --resume, else a new folder under reports/runs/ (reports/latest then names it)."""
    out = runfolder.latest_run() if req.out is None and req.resume else req.out
    if out is None:
        return runfolder.new_run_dir()
    runfolder.check_out_dir(out, req.resume, req.force)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"--out {out}: cannot use it as the output folder ({exc.strerror or exc})") from None
    return out


def _shard(req: RunRequest, cases: list, backend_names: Sequence[str]) -> tuple[list, dict | None]:
    """``--shard K/N``: the shard's cases and its ``environment.json["shard"]`` (:mod:`parity.shard`)."""
    if not req.shard:
        return cases, None
    from . import shard

    filters = shard.run_filters(req.dtype, req.case, req.case_file, req.no_siblings)
    try:
        return shard.for_run(cases, req.shard, backend_names, profile=_profile_name(req), seed=req.seed, filters=filters)
    except ValueError as exc:
        raise UserError(f"--shard {req.shard}: {exc}") from None


def _profile_name(req: RunRequest) -> str:
    """The profile environment.json records: ``models`` for a --model run."""
    return "models" if req.model else req.profile or os.environ.get("PARITY_PROFILE") or "default"


#: ``partial_why`` of environment.json while the run runs: what a run killed (SIGKILL, a crash) leaves.
IN_PROGRESS = "in progress, or killed before it ended (environment.json was written before its first row)"


def _write_environment(req: RunRequest, out: Path, result, run: dict, in_progress: bool = False) -> None:
    """OUT/environment.json: the machine, the backends and what the run was (earlier cut-short runs kept);
    ``in_progress``: written before the first row (partial until the run's end writes it again)."""
    from . import compile_cache, env

    cache_root, cache_before = run["cache"]
    why = IN_PROGRESS if in_progress else result.stopped_by
    environment = env.collect(
        {
            "run_id": run["run_id"],
            "backends": result.infos,
            "profile": _profile_name(req),
            "seed": req.seed,
            "cases": run["cases"],
            "reference_device": run["reference_device"],
            "jobs": req.jobs,
            "gpus": run["gpus"],  # --gpus: the GPUs the lanes were pinned to ([]: none)
            "splits": run["splits"],
            "partial": result.partial or result.already + len(result.rows) < result.total,
            **({"partial_why": why} if why else {}),
            **({"in_progress": True} if in_progress else {}),
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
    runfolder.write_environment(out, environment, keep_earlier=req.resume)
    if req.resume and not in_progress:
        _warn_mixed_versions(out, environment)


def _warn_mixed_versions(out: Path, environment: dict) -> None:
    """Loud where a resumed call ran a backend at another version than the earlier calls into ``out`` did: its rows
    now mix versions (the reports read it as ``mixed: ...``, never as one version; a version diff needs a folder each)."""
    for name, version in {**runfolder.backend_versions(environment), "torch": runfolder.torch_version(environment)}.items():
        if version.startswith(runfolder.MIXED):
            print(
                f"parity: warning: {name} ran at {version[len(runfolder.MIXED) :]} (this call's first) in the calls into "
                f"{out}: its rows mix versions; run each version into its own --out (parity vdiff compares two folders)",
                file=sys.stderr,
            )


def _finish_run(req: RunRequest, out: Path, result, explicit: list[str], options, stop=None) -> int:
    """Print the failures, shrink them, write the reports and the summary; the exit code. The
    folder's rows are read once, after shrinking, for the reports, coverage, results.json and the summary.
    ``stop`` true (a stop signal while shrinking): the shrinking ends after the call in flight, the rest goes on."""
    from .sweep import FAIL_VERDICTS, summary_table

    failures = [r for r in result.rows if r["verdict"] in FAIL_VERDICTS]
    shown = _print_failures(failures, options.expectations)
    to_shrink = [r for r in failures if r["verdict"] != Outcome.UNEXPECTED_PASS]  # a pass has nothing to shrink
    if req.shrink > 0 and to_shrink and not result.interrupted:  # a stop signal wants the run ended, not more calls
        _shrink_failures(to_shrink, options, out, stop)
    folder = runfolder.read_results(out)
    rows = list(folder.rows) if folder else []
    wrote = not req.no_report and _write_reports(out, options.expectations, folder)  # after shrinking: shows the shrunk cases
    coverage_gaps = _coverage_warnings(out, rows, write=not wrote)
    hidden = sum(max(0, n - 3) for n in shown.values())
    if hidden:
        print(f"\n... and {hidden} more failing rows in {out / runfolder.RESULTS}")
    print()
    partial = result.partial or result.already + len(result.rows) < result.total
    stopped = f"{_stopped_by(req, result)}; {len(result.rows)} of {result.planned} rows ran"
    result = dataclasses.replace(result, rows=[dict(r) for r in rows]) if req.resume and rows else result
    runfolder.write_json(out, rows)
    print(summary_table(result))
    if partial:
        code = f"exit {EXIT_SIGNALLED[result.interrupted]}" if result.interrupted else f"exit {EXIT_PARTIAL} unless a row failed"
        print(f"parity: PARTIAL: {stopped}; parity run --resume --out {out} runs the rest ({code})", file=sys.stderr)
    unavailable_explicit = [s for s in explicit if result.infos.get(s, {}).get("unavailable")]
    for s in unavailable_explicit:
        print(f"parity: requested backend {s} is unavailable: {result.infos[s]['unavailable']}", file=sys.stderr)
    if coverage_gaps and req.require_coverage:
        print(f"parity: --require-coverage: {coverage_gaps} backend(s) ran none of a cell their family ran (above)", file=sys.stderr)
        return EXIT_FAIL
    return EXIT_FAIL if (result.failed or unavailable_explicit) else EXIT_PARTIAL if partial else EXIT_OK


def _write_reports(out: Path, expectations, folder: runfolder.Results | None) -> bool:
    """report.html, summary.md, junit.xml and coverage.csv of ``out`` from its rows as read; whether written."""
    try:
        from .report.write import write_all

        written = write_all(out, expectations=expectations, results=folder)
    except ImportError as exc:
        print(f"parity: reports not written ({exc}); pip install 'attn-parity[report]'", file=sys.stderr)
        return False
    print("parity: wrote " + ", ".join(str(p) for p in written), file=sys.stderr)
    return True


def _stopped_by(req: RunRequest, result) -> str:
    if getattr(result, "stopped_by", ""):
        return result.stopped_by
    return f"--time-limit {req.time_limit:g} s reached" if req.time_limit is not None else "stopped early"


def _coverage_warnings(out: Path, rows: list, write: bool) -> int:
    """Write OUT/coverage.csv (unless the reports did); warn, per backend, about cells its family ran
    and it did not. The count warned."""
    from . import backends, coverage

    if write:
        coverage.write_csv(out, rows=rows)
    gaps = coverage.gaps(coverage.tally(rows), backends.marker_for)
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
        if r["verdict"] == Outcome.UNEXPECTED_PASS:
            entry = expectations.get(r["expected_id"])
            print(f"\nUNEXPECTED-PASS {r['backend']} [{r['expected_id']}] {r['case_id']}")
            print(
                f"  passed, but the strict known divergence {entry.describe() if entry else r['expected_id']}"
                f" ({entry.source if entry else '?'}) expects {entry.verdict if entry else 'a failure'}"
            )
            print(f"  repro: {r['repro']}")
            continue
        why = r["reasons"] or r["detail"]
        print(f"\n{r['verdict'].upper()} {r['backend']} [{why}] {r['case_id']}")
        if r.get("mask_check") == "mismatch":
            print(f"  mask: {r['mask_detail']}")
        if r.get("gqa_check") == "mismatch":
            print(f"  gqa: {r['gqa_detail']}")
        if r.get("read_check") == "mismatch":
            print(f"  reads: {r['read_detail']}")
        if r.get("grad_check") in ("mismatch", "error"):
            print(f"  grad: {r['grad_detail']}")
        if r.get("lse_check") == "mismatch":
            print(f"  lse: {r['lse_detail']}")
        for c in ("invariance", "graph"):
            if r.get(f"{c}_check") == "mismatch":
                print(f"  {c}: {r[f'{c}_detail']}")
        if r.get("worst_where"):
            print(f"  {r['worst_where']} (budget {r['threshold_max']}, err ratio {r['err_ratio']})")
        if r["verdict"] != Outcome.FAIL:
            print(f"  {r['detail']}")
        print(f"  repro: {r['repro']}")
    return shown


def _shrink_failures(failures: list[dict], options, out: Path, stop=None) -> None:
    """Shrink the first failure of each backend and kind (:func:`parity.sweep.shrinking.shrink_failures`); print the smaller cases."""
    from .sweep.shrinking import shrink_failures

    for rec in shrink_failures(failures, options, out, stop):
        small_row, backend = rec["row"], rec["backend"]
        if rec["small"].case_id != rec["original"].case_id:
            print(
                f"\nSHRUNK {backend} [{small_row.get('reasons') or small_row.get('detail')}] {rec['original'].summary()}  ->  "
                f"{rec['small'].summary()} ({rec['calls']} calls{'; ' + rec['note'] if rec.get('note') else ''})"
            )
            if small_row.get("mask_check") == "mismatch":
                print(f"  mask: {small_row['mask_detail']}")
            print(f"  repro: {rec['repro']}")
