#!/usr/bin/env bash
# Harness-overhead measurement on the lent H200, with only the backends its image has
# (no flash-attn-4 / xformers install needed): the quick profile with every worker
# profiled, then the default profile. Full outputs packed into $OUT/overhead.tgz.
#   bash lab/loan/gpu_overhead_run.sh [QUICK_LIMIT_S] [DEFAULT_LIMIT_S]
set -u
work=/tmp/overhead; rm -rf "$work"; mkdir -p "$work"
export PYTHONUNBUFFERED=1
{ nvidia-smi -L; echo "nvcc: $(command -v nvcc || echo none)";
  python3 -m pip list 2>/dev/null | grep -i -E "^(flash|xformers|flashinfer|torch |jax)" ; } > "$work/machine.txt" 2>&1
cat "$work/machine.txt"
timeout "${1:-200}" python3 benchmarks/sweep_overhead.py --out "$work/quick" --profile-workers --json "$work/overhead.jsonl" \
  -- --backend all-gpu --profile quick --repeats 3 --timeout 120 > "$work/quick.log" 2>&1
echo "quick rc=$?"; grep -v "^\[" "$work/quick.log" | tail -120
timeout "${2:-240}" python3 benchmarks/sweep_overhead.py --out "$work/default" --json "$work/overhead.jsonl" \
  -- --backend all-gpu --profile default --repeats 3 --timeout 120 > "$work/default.log" 2>&1
echo "default rc=$?"; grep -v "^\[" "$work/default.log" | tail -40
tar czf "$OUT/overhead.tgz" -C /tmp overhead
