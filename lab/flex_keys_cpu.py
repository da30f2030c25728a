"""Issue 47 on the CPU: does flex-cuda's compile key predict every graph inductor builds? (lab only)

    PYTHONPATH=. TORCH_LOGS=recompiles python lab/flex_keys_cpu.py RUN_DIR OUT.jsonl [--rows N] [--max-bucket B]
        [--cache DIR] [--no-probes]

One process: RUN_DIR's flex-cuda rows that ran (results.csv), in the file's order, each through
:func:`parity.execute.execute` (the probes too, as a lane runs it) on a CPU twin of flex-cuda (``dynamic=True``,
duck shaping off, 256-row buckets, the window and softcap as tensors: FlexCudaBackend with ``device="cpu"``).
Per row a JSON line: its compile key, whether met before, the graphs Dynamo made and inductor built
(:func:`parity.backends.flex.inductor_builds`), the softmax scale, seconds. Each row writes ``### ROW i`` to
stderr before it runs, so the recompile reasons (TORCH_LOGS=recompiles, stderr) can be read against rows.

Two lab-only settings: ``torch._inductor.config.assert_indirect_indexing = False`` (torch 2.13's CPU flex
template with dynamic sizes emits a bounds check on an undeclared ``cur_qSplitSize9`` and fails to compile
otherwise; the check is of the mask_mod's read of its number tensor), and no LSE (CPU inductor's flex
refuses it: the CUDA lanes call ``run_lse``; one variant per key either way).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch._inductor.config as inductor_config

from parity import compile_cache
from parity.backends import flex
from parity.case import Case
from parity.execute import execute
from parity.runfolder import read_rows


class FlexCudaOnCpu(flex.FlexCudaBackend):
    name = "flex-cuda-on-cpu"
    device = "cpu"
    compiled = True
    returns_lse = False


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("run")
    ap.add_argument("out")
    ap.add_argument("--rows", type=int, default=10**9)
    ap.add_argument("--max-bucket", type=int, default=4096, help="skip rows padded past this many rows (CPU time)")
    ap.add_argument("--cache", default=None)
    ap.add_argument("--no-probes", action="store_true")
    a = ap.parse_args(argv)
    inductor_config.assert_indirect_indexing = False
    if a.cache:
        compile_cache.enable(Path(a.cache))
    from torch._dynamo.utils import counters

    be = FlexCudaOnCpu()
    rows = [r for r in read_rows(Path(a.run)) if r["backend"] == "flex-cuda" and r["verdict"] not in ("unsupported", "unavailable")]
    seen: dict[str, int] = {}
    with open(a.out, "w") as out:
        for i, row in enumerate(rows[: a.rows]):
            case = Case.from_json(row["case_json"])
            seqs = be._seqs(case)
            big = max(max(bq, bk) for bq, bk, _ in seqs)
            key = repr(be.compile_key(case))
            rec = {"row": i, "key": key, "seen": key in seen, "scale": case.softmax_scale, "case_scale": case.scale}
            rec.update(
                q=list(case.q_lens[:4]), k=list(case.k_lens[:4]), b=len(case.q_lens), buckets=sorted({(bq, bk) for bq, bk, _ in seqs})
            )
            if big > a.max_bucket:
                out.write(json.dumps({**rec, "skipped": f"bucket {big} > {a.max_bucket}"}) + "\n")
                continue
            print(f"### ROW {i} key={key} scale={case.softmax_scale!r}", file=sys.stderr, flush=True)
            g0, b0, t0 = counters["stats"]["unique_graphs"], flex.inductor_builds() or 0, time.perf_counter()
            res = execute(be, case, probes=not a.no_probes)
            rec.update(status=res.get("status"), detail=str(res.get("detail") or "")[:200])
            rec.update(graphs=counters["stats"]["unique_graphs"] - g0, built=(flex.inductor_builds() or 0) - b0)
            rec["seconds"] = round(time.perf_counter() - t0, 2)
            if rec["seen"] and rec["built"]:
                rec["first_row_of_key"] = seen[key]
            seen.setdefault(key, i)
            out.write(json.dumps(rec) + "\n")
            out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
