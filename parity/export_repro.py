"""A standalone script per divergence, for a bug report to the library's maintainers (the library
of ``python -m parity export-repro RUN_DIR [--row N] [--backend B] [--out DIR]``, :mod:`parity.cli.export_repro`).

Which rows:

=========================  ==================================================================
(no option)                every failing row of ``RUN_DIR/results.csv``: ``fail``, and
                           ``expected`` rows whose raw verdict is ``fail`` (known divergences:
                           the rows a maintainer's bug report is about)
``--backend B``            B's failing rows only
``--row N``                row N of results.csv (0-based, whatever its verdict: a passing row
                           gives a script that exits 0)
=========================  ==================================================================

``--control C`` also writes, for each exported case, the same case called through backend
``C`` (``DIR/<C>_<case_id>.control.py``): the check that the script passes on a backend
without the bug, for the report's "expected behaviour".

A row whose backend has a shrunk case in ``RUN_DIR/shrunk.jsonl`` (the smaller failing case
``python -m parity run --shrink`` found from that row) is exported as the shrunk case. Each
script is ``DIR/<backend>_<case_id>.py`` (default ``DIR`` = ``RUN_DIR/repros``), built by
:func:`parity.repro_script.build_script` with the backend's own ``repro_call(case)``; it
imports torch and the backend's package only. A backend without ``repro_call`` (a plain
``module:Class`` plugin, ``reference``) is skipped with a one-line note.

A row the harness read-probes (a paged case on a backend with a paged path; a contiguous case a
backend reads through a padded cache, ``padded_kv``: :func:`read_probe`) gets the read probe in its
script: the same cache with NaN where an engine holds garbage. An fp8 case (``kv_dtype``) gets its
inputs quantized as the harness's, passed with their descales through the template's
``attention(q, k, v, descales)``; a template without that signature is a note with the row's
``parity run --case`` line.

Exit codes: 0 scripts written, or nothing to export (a line says so); 2 bad input (no such
folder, no results.csv, ``--row`` out of range, a backend with no rows in the run), one line.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Any

from .errors import UserError
from .results import Outcome


def select_rows(df, run_dir: Path, row: int | None, backend: str | None) -> list[tuple[int, dict[str, Any]]]:
    """``(index, row)`` pairs to export; raises :class:`UserError` on bad input."""
    present = list(dict.fromkeys(df["backend"]))
    if backend is not None and backend not in present:
        raise UserError(f"--backend {backend}: no rows of it in {run_dir} (it has: {', '.join(present) or 'none'})")
    if row is not None:
        if not 0 <= row < len(df):
            raise UserError(f"--row {row}: {run_dir} has rows 0..{len(df) - 1} (0-based, in results.csv order)")
        picked = df.iloc[row].to_dict()
        if backend is not None and picked["backend"] != backend:
            raise UserError(f"--row {row} is a row of {picked['backend']}, not of --backend {backend}")
        return [(row, picked)]
    mask = (df["verdict"] == Outcome.FAIL) | ((df["verdict"] == Outcome.EXPECTED) & (df.get("raw_verdict", "") == Outcome.FAIL))
    if backend is not None:
        mask &= df["backend"] == backend
    return [(int(i), df.loc[i].to_dict()) for i in df.index[mask]]


def worker_paths(command: str, backend: str, variant_of: str | None = None) -> list[str]:
    """The ``--worker-path BACKEND=PATH`` (or ``--worker-path=BACKEND=PATH``) entries of the run's command line for
    ``backend``; where it has none, its base backend's (a variant's: ``variant_of`` as the run recorded it, else the
    registry's; :func:`parity.backends.worker_path_owner`). A malformed recorded command or item is passed over."""
    from . import backends
    from .process import read_worker_path_items, recorded_worker_path_items

    try:
        words = shlex.split(command or "")
    except ValueError:
        return []
    given, _malformed = read_worker_path_items(recorded_worker_path_items(words))
    owner = backends.worker_path_owner(given, backend, variant_of)
    return [] if owner is None else given[owner]


def _meta(run, index: int, row: dict[str, Any], backend: str, script: Path) -> dict[str, Any]:
    env = run.env
    info = (env.get("backends") or {}).get(backend) or {}
    gpu = env.get("gpu") or {}
    # the folders the run's worker used (PARITY_WORKER_PATH included), else the command line's --worker-path
    paths = list(info.get("worker_path") or []) or worker_paths(env.get("command", ""), backend, info.get("variant_of"))
    prefix = f"PYTHONPATH={shlex.quote(':'.join(paths))} " if paths else ""
    errors = ""
    if row.get("max_abs_err"):
        errors = f"max|err| {row['max_abs_err']}, budget {row.get('threshold_max', '?')} (err ratio {row.get('err_ratio', '?')})"
    return {
        "backend": backend,
        "verdict": (row.get("raw_verdict") or row.get("verdict", ""))
        + (f" (the known divergence {row['expected_id']})" if row.get("expected_id") else ""),
        "reasons": row.get("reasons", ""),
        "errors": errors,
        "mask_detail": row.get("mask_detail", "") if row.get("mask_check") == "mismatch" else "",
        "gqa_detail": row.get("gqa_detail", "") if row.get("gqa_check") == "mismatch" else "",
        "lse_detail": row.get("lse_detail", "") if row.get("lse_check") == "mismatch" else "",
        "worst_where": row.get("worst_where", "") if (row.get("raw_verdict") or row.get("verdict")) == Outcome.FAIL else "",
        "detail": row.get("detail", ""),
        "grad_detail": row.get("grad_detail", "") if row.get("grad_check") in ("mismatch", "error") else "",
        "version": info.get("version", ""),
        "torch": env.get("torch", ""),
        "gpu": gpu.get("name", "") if gpu.get("available") else "",
        "source": f"{run.path}/results.csv row {index} (case {row.get('case_id', '')}, run of {env.get('date_utc', '?')})",
        "command": f"{prefix}python {script.name}",
    }


def export_one(
    run, index: int, row: dict[str, Any], shrunk: dict[tuple[str, str], dict], out_dir: Path, control: str | None = None
) -> Path | None:
    """Write the script of one row (and, with ``control``, the same case through that backend);
    ``None`` (after a one-line note) when it cannot be made."""
    from .case import Case

    backend = row["backend"]
    try:
        case = Case.from_json(row["case_json"])
    except ValueError as exc:
        raise UserError(f"{run.path}/results.csv row {index}: {exc}") from None
    entry = shrunk.get((backend, case.case_id))
    row_summary, extra = case.summary(), ""
    if entry is not None:
        case = Case.from_dict(entry["case"])
        extra = (
            f"the row's case to ({entry.get('calls', '?')} backend calls); the harness's verdict on it: "
            f"{entry.get('verdict', '?')} [{entry.get('reasons', '')}]"
        )
    path = _write(
        run, index, row, backend, case, dict(row_summary=row_summary, shrunk=extra), out_dir / f"{_safe(backend)}_{case.case_id}.py"
    )
    refusal = _control_refusal(control, case) if path is not None and control else None
    if refusal:
        _note(f"no control for row {index}: {control} refuses this case ({refusal}); name another with --control")
    elif path is not None and control:
        meta = dict(row_summary=row_summary, shrunk=extra, control_of=backend)
        ctl = {"verdict": "control", "grad_check": row.get("grad_check", "")}  # a --grad row's control checks its backward too
        _write(run, index, ctl, control, case, meta, out_dir / f"{_safe(control)}_{case.case_id}.control.py")
    return path


def _control_refusal(control: str, case) -> str | None:
    """Why ``control`` cannot run ``case`` (its own refusal), or None: a control that refuses the
    case would only show that it refuses (SDPA has no softcap, for one)."""
    from . import backends
    from .backends.base import refusal_reason

    try:
        return refusal_reason(backends.get(control), case)
    except backends.BackendSpecError as exc:
        return f"cannot be loaded here: {exc}"


def _write(run, index: int, row: dict[str, Any], backend_name: str, case, extra: dict[str, str], path: Path) -> Path | None:
    """One script: ``backend_name``'s own call template on ``case``; ``None`` after a note when it has none."""
    from . import backends
    from .backends.base import refusal_reason
    from .repro_script import FP8_SIGNATURE, build_script

    try:
        backend = backends.get(backend_name)
    except backends.BackendSpecError as exc:
        _note(f"backend {backend_name} cannot be loaded here ({exc}); row {index} skipped")
        return None
    template = getattr(backend, "repro_call", None)
    if not callable(template):
        _note(f"backend {backend_name} has no standalone call template (a repro_call(case) method); row {index} skipped")
        return None
    try:
        why = refusal_reason(backend, case)
        call = None if why else template(case)
        if call is not None and case.kv_dtype is not None and FP8_SIGNATURE not in call:
            why = f"its call template takes no fp8 descales (no {FP8_SIGNATURE}:); rerun the row with: {case.repro(backend.name)}"
    except Exception as exc:  # noqa: BLE001 - a template that cannot express the case: a note, not a traceback
        why = f"{type(exc).__name__}: {exc}"
    if why or call is None:
        _note(f"backend {backend_name} cannot run {case.summary()} ({why}); row {index} skipped")
        return None
    meta = _meta(run, index, row, backend_name, path)
    meta.update(summary=case.summary(), case_json=case.to_json(), **extra)
    grad = _grad_part(backend, case, row)
    meta["grad"] = bool(grad)
    path.write_text(build_script(case, call, backend.device, meta, grad, read_probe(backend, case)))
    print(f"export-repro: wrote {path} ({backend_name}: {case.summary()})")
    return path


def read_probe(backend, case) -> str | None:
    """The cache the harness's read probe poisons for ``backend`` on ``case`` (as
    :func:`parity.execute._run_probes` decides): ``paged`` (a paged case, a backend with a paged path),
    ``padded`` (a contiguous case it reads through a padded cache, ``padded_kv``), else None (no probe)."""
    if case.page_size is not None:
        return "paged" if getattr(backend, "supports_paged", False) else None
    padded = getattr(backend, "padded_kv", None)
    return "padded" if callable(padded) and padded(case) else None


def _grad_part(backend, case, row: dict[str, Any]) -> str:
    """The backward part of a ``--grad`` row's script (``""`` for other rows, and for a backend without a
    backward): the backend's ``repro_backward(case)``, else autograd through its call (:func:`grad_call`)."""
    from .repro_script import grad_call

    if row.get("grad_check") not in ("ok", "mismatch", "error") or backend.grad_unsupported_reason(case):
        return ""
    own = getattr(backend, "repro_backward", None)
    return own(case) if callable(own) else grad_call()


def _note(text: str) -> None:
    print(f"export-repro: {text}", file=sys.stderr)


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


# ---------------------------------------------------------------- --known: one script per known divergence

#: the control backend of each failing backend: the same library's other path where there is one, else a
#: backend that passed every case it ran in the 2026-12-04 H200 run
CONTROLS = {
    "torch-fa2-cuda": "fa4-cuda",
    "torch-fa2-varlen-cuda": "fa4-cuda",
    "xformers-flash-cuda": "fa4-cuda",
    "xformers-cutlass-cuda": "fa4-cuda",
    "sdpa-cudnn-cuda": "sdpa-efficient-cuda",
    "jax-cudnn-cuda": "jax-cudnn-causal-cuda",
    "jax-xla-cuda": "sdpa-math-cuda",
    "fa4-cuda": "sdpa-math-cuda",
    "fa4-varlen-cuda": "sdpa-math-cuda",
    "flashinfer-cuda": "sdpa-math-cuda",
    "flashinfer-paged-cuda": "sdpa-math-cuda",
    "flashinfer-decode-cuda": "sdpa-math-cuda",
    "vllm-fa2-cuda": "vllm-fa3-cuda",
    # the CPU backends: SDPA's MATH kernel, pinned (``sdpa`` runs PyTorch's CPU flash-attention kernel)
    "sdpa": "sdpa-math",
    "sdpa-causal": "sdpa-math",
    "flex": "sdpa-math",
}
#: controls tried in turn when the preferred one refuses the case (SDPA has no softcap, for one)
#: (vLLM's FA3 build before the reference: it takes paged KV, learned sinks and fp8 KV, and passed the read probe)
FALLBACK_CONTROLS = ("sdpa-math-cuda", "flex-cuda", "vllm-fa3-cuda", "reference-cuda")
#: an error raised while the harness made a case's inputs is never the backend's finding (on the H200
#: such rows followed a sticky CUDA error in the same worker; see parity.execute.context_lost)
HARNESS_SIDE = "at case.py:"
INDEX_HEADER = "entry\tbackend\tscript\tcontrol"
#: the record of which case each entry's script uses (package data): an entry named here keeps that case (``--index``)
INDEX = Path(__file__).with_name("known_divergences_repros.tsv")


def shrunk_cases(run) -> dict[tuple[str, str], dict]:
    """(backend, the row's case_id) -> its shrunk case in ``run.shrunk``, where it still fails."""
    return {
        (str(e.get("backend")), str(e.get("from"))): e
        for e in run.shrunk
        if e.get("verdict") in (Outcome.FAIL, Outcome.EXPECTED) and isinstance(e.get("case"), dict)
    }


def control_for(backend: str, case) -> str:
    """The first control without the divergence that accepts ``case``."""
    for name in (CONTROLS.get(backend, FALLBACK_CONTROLS[0]), *FALLBACK_CONTROLS):
        if name != backend and _control_refusal(name, case) is None:
            return name
    return "reference-cuda"


def read_index(path: Path | None) -> dict[str, str]:
    """entry -> script name (``BACKEND_CASEID.py``) of an index.tsv; ``{}`` for None or no file."""
    if path is None or not path.is_file():
        return {}
    rows = [ln.split("\t") for ln in path.read_text().splitlines()[1:] if ln.strip()]
    return {r[0]: r[2] for r in rows if len(r) >= 3}


def pick(runs, keep: dict[str, str] | None = None) -> dict[str, tuple[Any, int, dict[str, Any]]]:
    """entry id -> (run, row index, row) of the smallest row it explains (fewest query x key elements x
    heads of the case written: the shrunk one where the run has it) in ``runs`` (judged with the
    known-divergence file); a row it explains jointly with others (``expected_id`` ``a+b``) only where it
    explains none alone; for an entry in ``keep`` (entry -> script name ``BACKEND_CASEID.py``), the row
    whose exported case is that script's, and no other."""
    from .case import Case
    from .expect import entry_ids

    best: dict[str, tuple[tuple[int, int, int], Any, int, dict[str, Any]]] = {}
    for run in runs:
        df = run.df
        smaller = {k: Case.from_dict(e["case"]) for k, e in shrunk_cases(run).items()}
        rows = df[(df["verdict"] == Outcome.EXPECTED) & ~df["detail"].str.contains(HARNESS_SIDE, regex=False)]
        for i, r in rows.iterrows():
            c = smaller.get((r["backend"], r["case_id"])) or Case.from_json(r["case_json"])  # the case that is written
            ids = entry_ids(r["expected_id"])
            for entry in ids:
                kept = (keep or {}).get(entry)
                mine = 0 if kept == f"{_safe(r['backend'])}_{c.case_id}.py" else 1
                size = (mine, int(len(ids) > 1), sum(q * k for q, k in zip(c.q_lens, c.k_lens)) * c.hq)
                if kept and size[0]:
                    continue  # a kept entry takes its own row only
                if entry not in best or size < best[entry][0]:
                    best[entry] = (size, run, int(i), r.to_dict())
    return {k: v[1:] for k, v in best.items()}


def export_known(runs, entries: list[str], out_dir: Path, keep: dict[str, str] | None = None) -> list[str]:
    """One script and its control per entry of ``entries`` that explains a row of ``runs``, through
    :func:`export_one`; writes ``out_dir/index.tsv`` and returns its lines (entry, backend, script,
    control). An entry with no row (or whose script cannot be made) gets a one-line note."""
    from .case import Case

    picked = pick(runs, keep)
    lines = []
    for entry in entries:
        if entry not in picked:
            kept = f" with the case of {keep[entry]}" if keep and entry in keep else ""
            _note(f"{entry}: no row of the runs is this known divergence{kept}")
            continue
        run, index, row = picked[entry]
        shrunk = shrunk_cases(run)
        found = shrunk.get((row["backend"], row["case_id"]))
        case = Case.from_dict(found["case"]) if found else Case.from_json(row["case_json"])
        control = control_for(row["backend"], case)
        script = export_one(run, index, row, shrunk, out_dir, control)
        if script is None:
            _note(f"{entry}: not exported")
            continue
        ctrl = out_dir / f"{_safe(control)}_{case.case_id}.control.py"
        lines.append(f"{entry}\t{row['backend']}\t{script.name}\t{ctrl.name if ctrl.is_file() else '-'}")
    (out_dir / "index.tsv").write_text("\n".join([INDEX_HEADER, *sorted(lines)]) + "\n")
    return lines
