#!/usr/bin/env bash
# One device call, nothing staged (torch, triton and jax as the image has them): issues 29, 30 and 32 on the
# backends those reach (SDPA kernels, flex-cuda, torch's vendored FA2, JAX, the float64 reference on CUDA).
# For a loan too short to stage flash-attn-4, xformers, vLLM's FA build and FlashInfer (lab/loan/h200_issues.sh).
#   [FEATURES=0] [LM=0] bash lab/loan/h200_native.sh [LIMIT_S]      # LIMIT_S (default 500): the whole call's wall clock
# grad's lanes: JOBS (default 4), SPLIT (e.g. "--split flex-cuda=4": flex compiles a backward kernel per bucket)
# Three jobs share the GPU at once, so per-row times are not comparable:
#   features  the default profile's sink / chunk / fp8 cases, and its first rows for every row's LSE, all-gpu
#   grad      `parity run --grad`, default profile, the backends with a backward
#   lm        train the language model (issue 32) for a third of the time, then the decode study
# $OUT gets features.tgz, grad.tgz, lm.tgz (the model's weights stay on the machine); a short table prints last.
set -u
limit=${1:-500}
export PYTHONUNBUFFERED=1
t0=$(date +%s)
PARITY_CC=/tmp/parity-cc
run_t=$(( limit - 150 ))  # rows start until then; shrinking and writing follow
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
features() {
  local w=/tmp/features; mkdir -p "$w"
  PYTHONPATH=. python3 lab/loan/feature_cases.py > "$w/features.jsonl"  # run from the repository root
  timeout $(( run_t + 60 )) python3 -m parity run --backend all-gpu --case-file "$w/features.jsonl" --jobs 4 \
    --time-limit $(( run_t / 2 )) --timeout 120 --shrink 4 -q --compile-cache "$PARITY_CC" --out "$w/features" > "$w/features.log" 2>&1
  echo "features rc=$?" >> "$w/features.log"
  timeout $(( run_t / 2 + 60 )) python3 -m parity run --backend all-gpu --profile default --jobs 4 --time-limit $(( run_t / 2 - 30 )) \
    --timeout 120 --shrink 4 -q --compile-cache "$PARITY_CC" --out "$w/lse" > "$w/lse.log" 2>&1
  echo "lse rc=$?" >> "$w/lse.log"
}
grad() {
  local w=/tmp/grad; mkdir -p "$w"
  timeout $(( run_t + 90 )) python3 -m parity run --grad \
    --backend sdpa-math-cuda,sdpa-efficient-cuda,sdpa-cudnn-cuda,flex-cuda,torch-fa2-cuda,torch-fa2-varlen-cuda,jax-xla-cuda,jax-cudnn-cuda,reference-cuda \
    --profile default --jobs "${JOBS:-4}" ${SPLIT:-} --time-limit "$run_t" --timeout 120 --shrink 4 -q --compile-cache "$PARITY_CC" \
    --out "$w/run" > "$w/grad.log" 2>&1
  echo "grad rc=$?" >> "$w/grad.log"
}
lm() {
  local w=/tmp/lm; mkdir -p "$w"
  if [ -f /tmp/lm-model/config.json ]; then  # h200_staged.sh trained one on this machine: study it, longer
    echo "the model in /tmp/lm-model (not trained again)" > "$w/train.log"
  else
    python3 -m parity decode-train --preset gpu --device cuda --time-budget-s $(( limit / 3 )) --out /tmp/lm-model > "$w/train.log" 2>&1
    echo "train rc=$?" >> "$w/train.log"
  fi
  cp /tmp/lm-model/*.json "$w/" 2>/dev/null
  timeout -s INT -k 15 $(( limit - (limit / 3) - 60 )) python3 -m parity decode --lm /tmp/lm-model --device cuda \
    --dtype bfloat16 --dtype float16 --prompts 32 --time-limit 6 --out "$w/study" \
    -b torch-fa2-cuda,parity.selftest.bugs:DecodeDropsWindow,flex-cuda,reference-cuda,parity.selftest.bugs:Fa2CudaWindowOneWider,sdpa-efficient-cuda \
    > "$w/study.log" 2>&1
  echo "study rc=$? (1 expected: planted bugs among the backends)" >> "$w/study.log"
}
fp=; lp=  # FEATURES=0 / LM=0: leave that job out (it ran already, or gets its own call: h200_lm_decode.sh)
[ "${FEATURES:-1}" = 1 ] && { features & fp=$!; }
grad & gp=$!
[ "${LM:-1}" = 1 ] && { lm & lp=$!; }
wait $fp $gp $lp
echo "all jobs done in $(( $(date +%s) - t0 )) s"
for j in features grad lm; do tar czf "$OUT/$j.tgz" -C /tmp "$j"; done
tail -n 4 /tmp/features/features.log /tmp/features/lse.log /tmp/grad/grad.log /tmp/lm/train.log | cut -c1-200
sed -n '/## For the PR/,$p' /tmp/lm/study/decode_summary.md 2>/dev/null | head -20
