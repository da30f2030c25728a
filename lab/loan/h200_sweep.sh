#!/usr/bin/env bash
# One device call on the H200 (after flash-attn-4 and xformers were staged into /tmp/site-fa4 and
# /tmp/site-xformers): the sweep of every GPU backend and, beside it, `pytest -m gpu`, both with
# FA4 and xformers in their own worker paths (PARITY_WORKER_PATH), known divergences applied.
#   bash lab/loan/h200_sweep.sh PROFILE SWEEP_SECONDS [extra args for parity run]
# Rows start for SWEEP_SECONDS (a cut-short sweep is written and reported as partial; --resume on
# the same --out runs the rest). Everything goes to $OUT/h200sweep.tgz; a short table is printed last.
set -u
prof=${1:-default}; sweep_t=${2:-380}; shift 2 || true
work=/tmp/h200sweep; rm -rf "$work"; mkdir -p "$work"
source "$(dirname "$0")/h200_env.sh"  # FA4, XF, PARITY_WORKER_PATH, the xformers shim
{ nvidia-smi; python3 -m pip list 2>/dev/null | grep -i -E "^(flash|xformers|flashinfer|torch |triton|jax)"; } > "$work/nvidia-smi.txt" 2>&1
t0=$(date +%s)
echo "== $(date -u +%FT%TZ) pytest -m gpu (quick) in the background; sweep ($prof, ${JOBS:-6} lanes, rows started for ${sweep_t} s)"
timeout $(( sweep_t + 100 )) python3 -m pytest -m gpu --parity-profile "${PYTEST_PROFILE:-quick}" -q -p no:cacheprovider -rxXfE \
  --junitxml "$work/pytest_gpu.xml" > "$work/pytest_gpu.log" 2>&1 &
pt=$!
timeout $(( sweep_t + 130 )) python3 -m parity run --backend "${BACKENDS:-all-gpu}" --profile "$prof" --jobs "${JOBS:-6}" \
  --time-limit "$sweep_t" --timeout 120 --repeats 1 --shrink "${SHRINK:-8}" -q --compile-cache /tmp/parity-cc \
  --out "$work/sweep" "$@" > "$work/sweep.log" 2>&1
echo "sweep rc=$? in $(( $(date +%s) - t0 )) s"
wait $pt; echo "pytest -m gpu rc=$? at $(( $(date +%s) - t0 )) s"
tar czf "$OUT/h200sweep.tgz" -C /tmp h200sweep
tail -n 25 "$work/pytest_gpu.log" | cut -c1-220
grep -v "^  \|^$" "$work/sweep.log" | tail -n 40 | cut -c1-200
