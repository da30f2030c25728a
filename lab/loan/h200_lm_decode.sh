#!/usr/bin/env bash
# The decode study on a language model (issue 32), after `bash lab/device/install.sh` (groups vllm-fa2,
# vllm-fa3, xformers, fa4) on the same warm machine:
#   bash lab/loan/h200_lm_decode.sh [TRAIN_S] [PER_BACKEND_S] [STUDY1_S] [STUDY2_S]
# 1. `parity decode-train --preset gpu` for TRAIN_S (default 150) s of wall clock -> $OUT/lm-model
#    (weights-00.pt < 16 MiB, config.json, metrics.json: held-out loss and the margin distribution).
# 2. `parity decode --lm` in bfloat16 and float16, 48 held-out prompts x 256 greedy tokens: xformers-flash
#    first (the swap's start, as in the seed), the planted decode-drops-window bug, vLLM FA2 / FA3,
#    torch-fa2, reference-cuda, torch's FA2 handed a window one key wider (a planted bug on a real
#    kernel) and flex-cuda; PYTHONPATH holds vLLM's and xformers' folders; stopped after STUDY1_S (165).
# 3. the same with fa4-cuda next to torch-fa2-cuda (flash-attn-4 cannot share xformers' sys.path);
#    stopped after STUDY2_S (75).
# LM_MODEL=DIR: study a model trained earlier (h200_native.sh leaves one in /tmp/lm-model), skip step 1.
# PER_BACKEND_S (default 6) is --time-limit: seconds per backend and dtype after its warm-up (prefill and
# first decode step, where JIT builds happen); a backend cut there keeps the steps it measured.
# Each study writes its files after every backend, so a stopped one keeps what it measured.
# $OUT gets lm-model/ (3 files) and lm-decode.tgz (both study folders and the logs); the PR lines print last.
# Wall clock: training about TRAIN_S + 15 s (start, held-out evaluation, save), then at most 165 + 75 s:
# about 6 to 7 minutes on one H200, all caps reached.
set -uo pipefail
train_s=${1:-150}
limit=${2:-6}
study1_s=${3:-165}
study2_s=${4:-75}
source "$(dirname "$0")/h200_env.sh"  # PYTHONUNBUFFERED, the xformers shim, FA4's folders
out=${OUT:-/tmp}
work=/tmp/lm-decode; rm -rf "$work"; mkdir -p "$work"
if [ -n "${LM_MODEL:-}" ]; then  # a model trained earlier on this machine (h200_native.sh): no training here
  mkdir -p "$out"; ln -sfn "$LM_MODEL" "$out/lm-model"; echo "== the model in $LM_MODEL (not trained again)"
else
  python3 -m parity decode-train --preset gpu --device cuda --time-budget-s "$train_s" --out "$out/lm-model" > "$work/train.log" 2>&1
  echo "== decode-train rc=$?"; tail -n 3 "$work/train.log" | cut -c1-300
fi
study() {  # NAME SECONDS SITE BACKENDS
  PYTHONPATH=$3 timeout -s INT -k 15 "$2" python3 -m parity decode --lm "$out/lm-model" --device cuda \
    --dtype bfloat16 --dtype float16 -b "$4" --prompts 48 --time-limit "$limit" --out "$work/$1" > "$work/$1.log" 2>&1
  echo "== study $1: parity decode rc=$? (1 is expected where a planted bug is among the backends)"
}
study main "$study1_s" "/tmp/site-vllm-fa:/tmp/site-xformers" \
  "xformers-flash-cuda,parity.selftest.bugs:DecodeDropsWindow,vllm-fa2-cuda,vllm-fa3-cuda,torch-fa2-cuda,reference-cuda,parity.selftest.bugs:Fa2CudaWindowOneWider,flex-cuda"
study fa4 "$study2_s" "$FA4" "torch-fa2-cuda,fa4-cuda"
tar czf "$out/lm-decode.tgz" -C /tmp lm-decode
for s in main fa4; do
  echo "== $s"; grep -v "^\s*$" "$work/$s.log" | grep -v "^[|#-]\|^Model:\|^Study:" | tail -n 4 | cut -c1-200
  sed -n '/^| dtype/,/^$/p' "$work/$s/decode_summary.md" 2>/dev/null | cut -c1-220
  sed -n '/## For the PR/,$p' "$work/$s/decode_summary.md" 2>/dev/null
done
