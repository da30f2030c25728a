"""Print the default profile's cases that use a 2026 feature (learned sinks, a chunk, an fp8 KV cache) as JSON
lines, for `parity run --case-file` on the lent GPU (h200_native.sh, h200_staged.sh, h200_issues.sh). Run from the
repository root: python3 lab/loan/feature_cases.py > features.jsonl"""

from parity.strategies import PROFILES, generate

for case in generate(PROFILES["default"], 0):
    if case.sinks or case.chunk is not None or case.kv_dtype is not None:
        print(case.to_json())
