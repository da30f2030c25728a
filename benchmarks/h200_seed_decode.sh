#!/usr/bin/env bash
# The greedy-decode divergence study with the seed's own systems (issue 20), after
# `bash device/install.sh` on the same warm machine: vLLM's FA2 and FA3 against xformers' flash
# operator, torch's vendored FA2 and the float64-backed reference, on the two small models.
#   bash benchmarks/h200_seed_decode.sh [TIME_LIMIT_S]
# `parity decode` runs the model in this process, so the staged folders go on PYTHONPATH (vLLM's
# vllm_flash_attn and xformers can share one; FA4 cannot, and is left out). Everything goes to
# $OUT/seed-decode.tgz; the summary table is printed last. Not yet run on a GPU (written 2026-12-04).
set -uo pipefail
limit=${1:-400}
source "$(dirname "$0")/h200_env.sh"  # the xformers shim
work=/tmp/seed-decode; rm -rf "$work"; mkdir -p "$work"
PYTHONPATH=/tmp/site-vllm-fa:/tmp/site-xformers timeout -s INT -k 15 "$((limit + 60))" python3 -m parity decode \
  -b reference-cuda,torch-fa2-cuda,xformers-flash-cuda,vllm-fa2-cuda,vllm-fa3-cuda --model mistral --model gemma2 \
  --time-limit "$limit" --out "$work" > "$work/decode.log" 2>&1
echo "parity decode rc=$?"
tar czf "${OUT:-/tmp}/seed-decode.tgz" -C /tmp seed-decode
grep -v "^\s*$" "$work/decode.log" | tail -n 30 | cut -c1-200
