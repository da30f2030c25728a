"""A small but real run folder for the report and diff tests: a real sweep (inline, a few tiny
cases) over a passing backend, the failing example plugin, one that raises and one unavailable."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch

from parity import Backend, Case, Inputs, Window

CASES = [
    Case(q_lens=(24,), k_lens=(24,), hq=2, hkv=1, head_dim=16, window=Window(4, 0), seed=3),  # dense
    Case(q_lens=(1, 1), k_lens=(40, 33), hq=2, hkv=2, head_dim=16, window=Window(8, 0), seed=4),  # decode
    Case(q_lens=(5, 17), k_lens=(5, 17), hq=2, hkv=1, head_dim=16, window=Window(3, 0), seed=5),  # varlen
    Case(q_lens=(8,), k_lens=(30,), hq=2, hkv=2, head_dim=16, window=Window(6, 0), seed=6),  # chunked
    Case(q_lens=(16,), k_lens=(16,), hq=2, hkv=2, head_dim=16, window=Window(5, 0), page_size=8, seed=7),  # paged
    Case(q_lens=(20,), k_lens=(20,), hq=2, hkv=2, head_dim=16, window=Window(None, 0), seed=8),  # no left edge
    Case(q_lens=(16,), k_lens=(16,), hq=2, hkv=2, head_dim=16, dtype="float16", window=Window(2, 1), seed=9),
]
OFF_BY_ONE = "examples.my_kernel:MyKernelOffByOne"
RAISES = "tests.report_fixtures:Raises"
NEEDS_GPU = "tests.report_fixtures:NeedsGPU"
BACKENDS = ["sdpa", OFF_BY_ONE, RAISES, NEEDS_GPU]


class Raises(Backend):
    name = "raises"
    device = "cpu"

    def run(self, case: Case, inputs: Inputs, out: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("kernel launch failed: invalid configuration argument")


class NeedsGPU(Backend):
    name = "needs-gpu"
    device = "cpu"

    def unavailable_reason(self):
        return "needs a CUDA device (none here)"

    def run(self, case, inputs, out):  # pragma: no cover - never called
        raise AssertionError


def make_run(out: Path, backends: list[str] | None = None, cases: list[Case] | None = None) -> Path:
    """Run a real sweep into ``out`` (results.csv, masks.jsonl, environment.json) and return it."""
    from parity import env
    from parity.sweep import run_sweep
    from parity.verdict import BUDGETS

    res = run_sweep(backends or BACKENDS, cases or CASES, out_dir=out, isolate=False, progress=False)
    environment = env.collect(
        {
            "backends": res.infos,
            "profile": "test",
            "seed": 0,
            "cases": len(cases or CASES),
            "budgets": {k: vars(v) for k, v in BUDGETS.items()},
            "wall_seconds": round(res.seconds, 2),
        }
    )
    (out / "environment.json").write_text(json.dumps(environment, indent=2, default=str))
    return out


_MADE: dict[str, Path] = {}


def shared_run(tmp_path_factory, dest: Path) -> Path:
    """A copy of the one real run this test process makes (the sweep runs once, ~2 s)."""
    if "run" not in _MADE:
        _MADE["run"] = make_run(tmp_path_factory.mktemp("parity-run") / "run")
    shutil.copytree(_MADE["run"], dest)
    return dest
