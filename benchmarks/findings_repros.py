"""One standalone repro script per known divergence, and its control, from committed run folders.

    python benchmarks/findings_repros.py --out reports/findings-repros RUN_DIR [RUN_DIR ...]

For every entry of the known-divergences file that explains rows of the runs, the row with the
smallest case (fewest query x key elements) is exported with ``parity export-repro --row N``
(its shrunk case where the run shrank it) and, beside it, the same case called through a control
backend without the divergence that accepts the case (``--control``; :data:`CONTROLS`, then
:data:`FALLBACK_CONTROLS`). Entries already in ``OUT/index.tsv`` keep their case (they may have run
on a GPU already); ``--refresh`` writes their scripts again from the same case, with today's template. ``OUT/index.tsv`` lists
entry, script, control and the worker path each needs; ``run_all.sh`` in the same folder runs
them on a GPU and writes ``OUT/results.tsv`` (the exit status of each: 1 = divergence shown, 0 =
agrees with the float64 reference).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from parity.case import Case
from parity.expect import load
from parity.report.runs import load_run

#: the control backend of each failing backend: the same library's other path where there is
#: one, else a backend that passed every case it ran in the 2026-12-04 run
CONTROLS = {
    "torch-fa2-cuda": "fa4-cuda", "torch-fa2-varlen-cuda": "fa4-cuda", "xformers-flash-cuda": "fa4-cuda",
    "xformers-cutlass-cuda": "fa4-cuda", "sdpa-cudnn-cuda": "sdpa-efficient-cuda",
    "jax-cudnn-cuda": "jax-cudnn-causal-cuda", "jax-xla-cuda": "sdpa-math-cuda", "fa4-cuda": "sdpa-math-cuda",
    "fa4-varlen-cuda": "sdpa-math-cuda", "flashinfer-cuda": "sdpa-math-cuda",
    "flashinfer-paged-cuda": "sdpa-math-cuda", "flashinfer-decode-cuda": "sdpa-math-cuda", "vllm-fa2-cuda": "vllm-fa3-cuda",
}
#: an error raised while the harness made a case's inputs is never the backend's finding (on the
#: H200 such rows followed a sticky CUDA error in the same worker; see parity.execute.context_lost)
HARNESS_SIDE = "at case.py:"
#: controls tried in turn when the preferred one refuses the case (SDPA has no softcap, for one)
FALLBACK_CONTROLS = ("sdpa-math-cuda", "flex-cuda", "reference-cuda")


def control_for(backend: str, case: Case) -> str:
    """The first control without the divergence that accepts ``case``."""
    from parity import backends

    for name in (CONTROLS.get(backend, FALLBACK_CONTROLS[0]), *FALLBACK_CONTROLS):
        if name != backend and backends.get(name).unsupported_reason(case) is None:
            return name
    return "reference-cuda"


def pick(run_dirs: list[Path], keep: dict[str, str] | None = None) -> dict[str, tuple[Path, int, str, Case]]:
    """entry id -> (run folder, row index, backend, case) of the smallest row it explains; for an
    entry in ``keep`` (entry -> script name ``BACKEND_CASEID.py``), the row of that script's case."""
    best: dict[str, tuple[tuple[int, int], Path, int, str, Case]] = {}
    for d in run_dirs:
        run = load_run(d, load(), rejudge=True)
        df = run.df
        smaller = {(e.get("backend"), e.get("from")): Case.from_dict(e["case"]).case_id for e in run.shrunk if e.get("case")}
        rows = df[(df["verdict"] == "expected") & ~df["detail"].str.contains(HARNESS_SIDE, regex=False)]
        for i, r in rows.iterrows():
            c = Case.from_json(r["case_json"])
            kept = (keep or {}).get(r["expected_id"])
            exported = smaller.get((r["backend"], r["case_id"]), r["case_id"])  # export-repro writes the shrunk case
            size = (0 if kept == f"{r['backend']}_{exported}.py" else 1, sum(q * k for q, k in zip(c.q_lens, c.k_lens)) * c.hq)
            if kept and size[0]:
                continue  # a kept entry takes its own row only
            if r["expected_id"] not in best or size < best[r["expected_id"]][0]:
                best[r["expected_id"]] = (size, d, int(i), r["backend"], c)
    return {k: v[1:] for k, v in best.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--refresh", action="store_true", help="write the scripts of entries already in the index again (same cases)")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    index = args.out / "index.tsv"
    # entries already exported keep their scripts (they may have been run on a GPU already)
    lines = index.read_text().splitlines() if index.exists() else ["entry\tbackend\tscript\tcontrol"]
    done = {ln.split("\t")[0]: ln.split("\t")[2] for ln in lines[1:]}
    if args.refresh:
        lines = lines[:1]
    for entry, (d, row, backend, case) in sorted(pick(args.runs, done).items()):
        if entry in done and not args.refresh:
            continue
        control = control_for(backend, case)
        p = subprocess.run([sys.executable, "-m", "parity", "export-repro", str(d), "--row", str(row), "--out", str(args.out),
                            "--control", control], capture_output=True, text=True)
        written = [w.split()[2] for w in p.stdout.splitlines() if w.startswith("export-repro: wrote ")]
        if p.returncode or not written:
            print(f"{entry}: not exported ({p.stderr.strip() or p.stdout.strip()})", file=sys.stderr)
            continue
        script = Path(written[0]).name
        ctrl = Path(written[1]).name if len(written) > 1 else "-"
        lines.append(f"{entry}\t{backend}\t{script}\t{ctrl}")
        print(f"{entry}: {script} (control {ctrl})")
    index.write_text("\n".join([lines[0], *sorted(lines[1:])]) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
