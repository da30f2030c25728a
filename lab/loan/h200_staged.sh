#!/usr/bin/env bash
# The staged backends' share of issues 29, 30 and 32, on the warm machine where h200_native.sh ran (its model in
# /tmp/lm-model) and the four parts were parked and installed (lab/device/README.md); one device call:
#   bash lab/device/park.sh p03 && bash lab/device/install.sh && [FEATURES=0] [LM=0] bash lab/loan/h200_staged.sh [LIMIT_S]
# Three jobs share the GPU at once (per-row times are not comparable):
#   features  the default profile's sink / chunk / fp8 cases on FA4, vLLM FA2/FA3, xformers, FlashInfer; then the
#             default profile's first rows on them (the LSE check runs on every row of a backend that returns one)
#   grad      `parity run --grad`, default profile, FA4 and xformers (the staged backends with a backward)
#   lm        the decode study on the model h200_native.sh trained (or one trained here first when there is none):
#             xformers-flash, vLLM FA2/FA3, FA4 and the rest
# $OUT gets staged-features.tgz, staged-grad.tgz, lm-decode.tgz; a short table prints last.
set -u
limit=${1:-420}
here=$(cd "$(dirname "$0")/.." && pwd)
GATE_FLASHINFER=1 source "$here/loan/h200_env.sh"  # worker paths (FlashInfer's too), the xformers shim
t0=$(date +%s)
PARITY_CC=/tmp/parity-cc
run_t=$(( limit - 150 ))
STAGED=fa4-cuda,fa4-varlen-cuda,vllm-fa2-cuda,vllm-fa3-cuda,xformers-cutlass-cuda,xformers-flash-cuda,flashinfer-cuda,flashinfer-paged-cuda,flashinfer-decode-cuda
SPLIT="--split flashinfer-cuda=2 --split flashinfer-paged-cuda=2"
features() {
  local w=/tmp/staged-features; mkdir -p "$w"
  PYTHONPATH=. python3 lab/loan/feature_cases.py > "$w/features.jsonl"  # run from the repository root
  timeout $(( run_t / 2 + 90 )) python3 -m parity run --backend "$STAGED" --case-file "$w/features.jsonl" --jobs 6 $SPLIT \
    --time-limit $(( run_t / 2 )) --timeout 240 --shrink 4 -q --compile-cache "$PARITY_CC" --out "$w/features" > "$w/features.log" 2>&1
  echo "features rc=$?" >> "$w/features.log"
  timeout $(( run_t / 2 + 60 )) python3 -m parity run --backend "$STAGED" --profile default --jobs 6 $SPLIT \
    --time-limit $(( run_t / 2 - 30 )) --timeout 240 --shrink 4 -q --compile-cache "$PARITY_CC" --out "$w/lse" > "$w/lse.log" 2>&1
  echo "lse rc=$?" >> "$w/lse.log"
}
grad() {
  local w=/tmp/staged-grad; mkdir -p "$w"
  timeout $(( run_t + 90 )) python3 -m parity run --grad --backend fa4-cuda,fa4-varlen-cuda,xformers-cutlass-cuda,xformers-flash-cuda \
    --profile default --jobs 4 --time-limit "$run_t" --timeout 240 --shrink 4 -q --compile-cache "$PARITY_CC" --out "$w/run" > "$w/grad.log" 2>&1
  echo "grad rc=$?" >> "$w/grad.log"
}
lm() {
  if [ -f /tmp/lm-model/config.json ]; then  # h200_native.sh ran first on this machine: study its model
    OUT=/tmp/lmout LM_MODEL=/tmp/lm-model bash "$here/loan/h200_lm_decode.sh" 0 6 $(( limit - 140 )) 75 > /tmp/lm-staged.log 2>&1
  else  # no model yet: train one for a quarter of the call, then a shorter study
    OUT=/tmp/lmout bash "$here/loan/h200_lm_decode.sh" $(( limit / 4 )) 5 $(( limit - limit / 4 - 150 )) 60 > /tmp/lm-staged.log 2>&1
    cp -r /tmp/lmout/lm-model /tmp/lm-model 2>/dev/null; mkdir -p "$OUT/lm-model"; cp /tmp/lmout/lm-model/*.json "$OUT/lm-model/" 2>/dev/null
  fi
  cp /tmp/lmout/lm-decode.tgz "$OUT/" 2>/dev/null
}
fp=; lp=  # FEATURES=0 / LM=0: leave that job out (it ran already, or gets its own call)
[ "${FEATURES:-1}" = 1 ] && { features & fp=$!; }
grad & gp=$!
[ "${LM:-1}" = 1 ] && { lm & lp=$!; }
wait $fp $gp $lp
echo "all jobs done in $(( $(date +%s) - t0 )) s"
tar czf "$OUT/staged-features.tgz" -C /tmp staged-features
tar czf "$OUT/staged-grad.tgz" -C /tmp staged-grad
tail -n 3 /tmp/staged-features/features.log /tmp/staged-features/lse.log /tmp/staged-grad/grad.log | cut -c1-200
tail -n 30 /tmp/lm-staged.log | cut -c1-220
