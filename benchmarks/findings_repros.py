"""One standalone repro script per known divergence, and its control, from committed run folders.

    python benchmarks/findings_repros.py --out reports/findings-repros RUN_DIR [RUN_DIR ...]

For every entry of the known-divergences file that explains rows of the runs, the row with the
smallest case (fewest query x key elements) is exported with ``parity export-repro --row N``
(its shrunk case where the run shrank it) and, beside it, the same case called through a control
backend without the divergence (``--control``; :data:`CONTROLS`). ``OUT/index.tsv`` lists
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
    "fa4-varlen-cuda": "sdpa-math-cuda",
}


def pick(run_dirs: list[Path]) -> dict[str, tuple[Path, int, str]]:
    """entry id -> (run folder, row index, backend) of the smallest row it explains."""
    best: dict[str, tuple[int, Path, int, str]] = {}
    for d in run_dirs:
        df = load_run(d, load(), rejudge=True).df
        for i, r in df[df["verdict"] == "expected"].iterrows():
            c = Case.from_json(r["case_json"])
            size = sum(q * k for q, k in zip(c.q_lens, c.k_lens)) * c.hq
            if r["expected_id"] not in best or size < best[r["expected_id"]][0]:
                best[r["expected_id"]] = (size, d, int(i), r["backend"])
    return {k: v[1:] for k, v in best.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    lines = ["entry\tbackend\tscript\tcontrol"]
    for entry, (d, row, backend) in sorted(pick(args.runs).items()):
        control = CONTROLS.get(backend, "sdpa-math-cuda")
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
    (args.out / "index.tsv").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
