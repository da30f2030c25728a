#!/usr/bin/env bash
# The greedy-decode divergence study with the seed's own systems (issue 20), after
# `bash lab/device/install.sh` on the same warm machine: vLLM's FA2 and FA3 against xformers' flash
# operator, torch's vendored FA2 and the float64-backed reference, on the two small models, in three passes (below).
#   bash lab/loan/h200_seed_decode.sh [PER_BACKEND_S] [TOTAL_S]
# PER_BACKEND_S (default 60) is `--time-limit`, per backend and model; TOTAL_S (default 540) stops the
# whole study (SIGINT, then the tarball is still written).
# `parity decode` runs the model in this process, so the staged folders go on PYTHONPATH (vLLM's
# vllm_flash_attn and xformers can share one; FA4 cannot, and is left out). Everything goes to
# $OUT/seed-decode.tgz; the summary table is printed last.
set -uo pipefail
limit=${1:-60}
total=${2:-540}
source "$(dirname "$0")/h200_env.sh"  # the xformers shim
work=/tmp/seed-decode; rm -rf "$work"; mkdir -p "$work"
end=$(( $(date +%s) + total ))
# three passes: bfloat16 and float16 with contiguous KV, then bfloat16 with 16-token pages (vLLM's
# decode path: block_table + seqused_k; backends without paged KV are `unsupported` there)
for pass in "bfloat16" "float16" "bfloat16 --page-size 16"; do
  name=$(echo "$pass" | tr -d ' -' | sed 's/pagesize/-paged/'); left=$(( end - $(date +%s) ))
  [ "$left" -gt 30 ] || { echo "pass $name: skipped, the study's $total s are spent"; continue; }
  # shellcheck disable=SC2086  # $pass is a dtype and optional page-size words
  PYTHONPATH=/tmp/site-vllm-fa:/tmp/site-xformers timeout -s INT -k 15 "$left" python3 -m parity decode \
    -b reference-cuda,torch-fa2-cuda,xformers-flash-cuda,vllm-fa2-cuda,vllm-fa3-cuda --model mistral --model gemma2 \
    --dtype $pass --time-limit "$limit" --out "$work/$name" > "$work/$name.log" 2>&1
  echo "== pass $name: parity decode rc=$?"
  grep -v "^\s*$" "$work/$name.log" | tail -n 14 | cut -c1-200
done
tar czf "${OUT:-/tmp}/seed-decode.tgz" -C /tmp seed-decode
