#!/usr/bin/env bash
# The H200 sweep in one device call (after shared/device stage1 + stage2 installed
# flash-attn-4 into /tmp/site-fa4 and xformers into /tmp/site-xformers):
#   bash lab/loan/gpu_run.sh PROFILE SWEEP_SECONDS [extra args for parity run]
# Runs every GPU backend (--backend all-gpu) in $JOBS lanes at once, stops starting rows after
# SWEEP_SECONDS (a cut-short sweep is written and reported as PARTIAL), then the decode/prefill
# and chunked/one-shot consistency checks, each group in its own process. Optional:
# PARITY_RUN_DECODE=1 (greedy-decode divergence), PARITY_RUN_BENCH=1 (speed grid and GPU reference).
# Everything goes under /tmp/h200run, packed into $OUT/h200run.tgz (the device tool returns <= 8 files).
set -u
prof=${1:-default}; sweep_t=${2:-330}; shift 2 || true
work=/tmp/h200run; rm -rf "$work"; mkdir -p "$work"
FA4=/tmp/site-fa4:/tmp/site-fa4/nvidia_cutlass_dsl/dsl_packages
XF=/tmp/site-xformers
export PYTHONUNBUFFERED=1
# explicit opt-in: run xformers' -pt operators although its C++ extension does not load on this torch
export PARITY_XFORMERS_SHIM=1 PARITY_SHIMS=xformers_built_with_cuda_forced
{ nvidia-smi; echo; echo "nvcc: $(command -v nvcc || echo none)";
  python3 -m pip list 2>/dev/null | grep -i -E "^(flash|xformers|flashinfer|torch |triton|jax)"; } > "$work/nvidia-smi.txt" 2>&1
WP=(--worker-path "fa4-cuda=$FA4" --worker-path "fa4-varlen-cuda=$FA4"
    --worker-path "xformers-cutlass-cuda=$XF" --worker-path "xformers-flash-cuda=$XF")
t0=$(date +%s)
echo "== sweep ($prof, ${JOBS:-5} lanes, rows started for ${sweep_t} s) $(date -u +%FT%TZ)"
timeout $(( sweep_t + 150 )) python3 -m parity run --backend all-gpu --profile "$prof" --jobs "${JOBS:-5}" \
  --time-limit "$sweep_t" --timeout 120 --repeats 3 --shrink "${SHRINK:-12}" -q --out "$work/sweep" "${WP[@]}" "$@" \
  > "$work/sweep.log" 2>&1
echo "sweep rc=$? in $(( $(date +%s) - t0 )) s"; grep -v "^  \|^$" "$work/sweep.log" | tail -30
python3 -c "import json; t=json.load(open('$work/sweep/timing.json')); print({k: t[k] for k in ('partial','jobs','wall_s','startup_s','rows_run','rows_per_s_after_startup')}); [print(' lane', k, v) for k, v in t['lane_overhead_share'].items()]"
echo "== consistency $(date -u +%FT%TZ)"
C="python3 -m parity.consistency"
timeout 170 $C -b torch-fa2-cuda -b torch-fa2-varlen-cuda -b sdpa-cudnn-cuda --out "$work/cons_a" > "$work/cons_a.log" 2>&1 &
timeout 170 $C -b flex-cuda --out "$work/cons_b" > "$work/cons_b.log" 2>&1 &
timeout 170 $C -b jax-cudnn-cuda -b jax-cudnn-causal-cuda -b jax-xla-cuda --out "$work/cons_c" > "$work/cons_c.log" 2>&1 &
PYTHONPATH=$FA4 timeout 170 $C -b fa4-cuda -b fa4-varlen-cuda --out "$work/cons_d" > "$work/cons_d.log" 2>&1 &
PYTHONPATH=$XF timeout 170 $C -b xformers-cutlass-cuda -b xformers-flash-cuda --out "$work/cons_e" > "$work/cons_e.log" 2>&1 &
wait
for f in "$work"/cons_?.log; do echo "$(basename "$f"): $(grep -c ' pass ' "$f") pass, $(grep -vc ' pass ' "$f") other"; grep -v ' pass ' "$f" | tail -4; done
if [ "${PARITY_RUN_DECODE:-0}" = 1 ]; then
  echo "== decode $(date -u +%FT%TZ)"
  D=(python3 -m parity decode --time-limit "${DECODE_LIMIT:-60}" -q)
  timeout 200 "${D[@]}" -b torch-fa2-cuda -b sdpa-cudnn-cuda --out "$work/decode_a" > "$work/decode_a.log" 2>&1 &
  timeout 200 "${D[@]}" -b flex-cuda --out "$work/decode_b" > "$work/decode_b.log" 2>&1 &
  timeout 200 "${D[@]}" -b jax-cudnn-cuda -b jax-cudnn-causal-cuda --out "$work/decode_c" > "$work/decode_c.log" 2>&1 &
  PYTHONPATH=$FA4 timeout 200 "${D[@]}" -b fa4-cuda --out "$work/decode_d" > "$work/decode_d.log" 2>&1 &
  PYTHONPATH=$XF timeout 200 "${D[@]}" -b xformers-flash-cuda -b xformers-cutlass-cuda --out "$work/decode_e" > "$work/decode_e.log" 2>&1 &
  wait; tail -n 4 "$work"/decode_?.log
fi
if [ "${PARITY_RUN_BENCH:-0}" = 1 ]; then
  echo "== speed grid and GPU reference"
  timeout 90 python3 benchmarks/reference_gpu.py --json "$work/reference_gpu.json" > "$work/reference_gpu.log" 2>&1; tail -3 "$work/reference_gpu.log"
  B=benchmarks/gpu_bench.py
  timeout 150 python3 $B -b torch-fa2-cuda -b sdpa-cudnn-cuda -b sdpa-efficient-cuda -b flex-cuda -b jax-cudnn-causal-cuda \
    --json "$work/bench.jsonl" > "$work/bench_a.log" 2>&1; tail -20 "$work/bench_a.log"
  PYTHONPATH=$FA4 timeout 60 python3 $B -b fa4-cuda --json "$work/bench.jsonl" > "$work/bench_b.log" 2>&1; tail -5 "$work/bench_b.log"
  PYTHONPATH=$XF timeout 60 python3 $B -b xformers-flash-cuda --json "$work/bench.jsonl" > "$work/bench_c.log" 2>&1; tail -5 "$work/bench_c.log"
fi
tar czf "$OUT/h200run.tgz" -C /tmp h200run
echo "packed $(du -h "$OUT/h200run.tgz" | cut -f1) in $(( $(date +%s) - t0 )) s"
