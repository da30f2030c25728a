"""FlashInfer's checks in one loan: the cases of the quick and default profiles that need at most four JIT modules per
FlashInfer entry point, one JSON case per line on stdout (a `--case-file` for `h200_issues.sh checks`).

The quick profile needs 44 single-prefill, 39 paged-prefill and 14-15 decode modules (dtype x head dim x window on/off
x softcap on/off x sinks x fp8 KV: `FlashInferBackend.compile_key`); one takes 100-390 s of nvcc on the lent machine,
so the whole set is hours. This keeps bfloat16, head dim 64 or 128, a window, no softcap, no sinks, no fp8: two
modules per entry point, every case family (long paged caches, split-KV decode, ragged tables) still in.

    python lab/loan/flashinfer_cases.py > lab/loan/checks-cases/flashinfer.jsonl
"""

from __future__ import annotations

from parity.strategies import generate, profile


def keep(case) -> bool:
    return (
        case.dtype == "bfloat16"
        and case.head_dim in (64, 128)
        and case.window.left is not None
        and case.softcap is None
        and not case.sinks
        and case.kv_dtype is None
    )


def main() -> None:
    seen: set[str] = set()
    for name in ("quick", "default"):
        for case in generate(profile(name)):
            if keep(case) and case.case_id not in seen:
                seen.add(case.case_id)
                print(case.to_json())


if __name__ == "__main__":
    main()
