#!/usr/bin/env bash
# The whole H200 run in one device call (after shared/device stage1 + stage2 installed
# flash-attn-4 into /tmp/site-fa4 and xformers into /tmp/site-xformers):
#   bash benchmarks/gpu_run.sh PROFILE SWEEP_TIMEOUT [extra args for parity run]
# Writes everything under /tmp/h200run and packs it into $OUT/h200run.tgz (the device tool
# returns at most 8 files). Every step has its own time limit so the pack always happens.
set -u
prof=${1:-quick}; sweep_t=${2:-240}; shift 2 || true
work=/tmp/h200run; rm -rf "$work"; mkdir -p "$work"
FA4=/tmp/site-fa4:/tmp/site-fa4/nvidia_cutlass_dsl/dsl_packages
XF=/tmp/site-xformers
export PYTHONUNBUFFERED=1
# explicit opt-in: run xformers' -pt operators although its C++ extension does not load on this torch
export PARITY_XFORMERS_SHIM=1 PARITY_SHIMS=xformers_built_with_cuda_forced
nvidia-smi > "$work/nvidia-smi.txt" 2>&1
WP=(--worker-path "fa4-cuda=$FA4" --worker-path "fa4-varlen-cuda=$FA4"
    --worker-path "xformers-cutlass-cuda=$XF" --worker-path "xformers-flash-cuda=$XF")
t0=$(date +%s)
TOTAL=${PARITY_RUN_TOTAL:-500}  # seconds for this whole script; each step's limit is clipped to what is left
lim() {  # lim SECONDS -> min(SECONDS, time left before the deadline minus 15 s for packing), at least 1
  local left=$(( t0 + TOTAL - $(date +%s) - 15 )); [ "$left" -lt 1 ] && left=1
  [ "$1" -lt "$left" ] && echo "$1" || echo "$left"
}
echo "== reference on the GPU"
timeout "$(lim 90)" python3 benchmarks/reference_gpu.py --json "$work/reference_gpu.json" 2>&1 | tee "$work/reference_gpu.log" | tail -4
echo "== sweep ($prof) $(date -u +%FT%TZ)"
timeout "$(lim "$sweep_t")" python3 -m parity run --backend all-gpu --profile "$prof" --timeout 120 --repeats 3 -q \
  --out "$work/sweep" "${WP[@]}" "$@" > "$work/sweep.log" 2>&1
echo "sweep rc=$? in $(( $(date +%s) - t0 )) s"; tail -32 "$work/sweep.log"
echo "== consistency"
timeout "$(lim 60)" python3 -m parity.consistency -b torch-fa2-cuda -b torch-fa2-varlen-cuda -b sdpa-cudnn-cuda -b flex-cuda \
  -b jax-cudnn-cuda -b jax-xla-cuda --out "$work" 2>&1 | tee "$work/consistency.log" | grep -v " pass " | tail -20
PYTHONPATH=$FA4 timeout "$(lim 60)" python3 -m parity.consistency -b fa4-cuda -b fa4-varlen-cuda --out "$work" 2>&1 | tee -a "$work/consistency.log" | grep -v " pass " | tail -8
PYTHONPATH=$XF timeout "$(lim 40)" python3 -m parity.consistency -b xformers-cutlass-cuda -b xformers-flash-cuda --out "$work" 2>&1 | tee -a "$work/consistency.log" | grep -v " pass " | tail -8
echo "consistency: $(grep -c ' pass ' "$work/consistency.log") pass lines, $(grep -vc ' pass ' "$work/consistency.log") other"
echo "== speed grid"
B=benchmarks/gpu_bench.py
timeout "$(lim 150)" python3 $B -b torch-fa2-cuda -b sdpa-cudnn-cuda -b sdpa-efficient-cuda -b flex-cuda -b jax-cudnn-cuda -b jax-xla-cuda \
  --skip jax-xla-cuda@32768 --json "$work/bench.jsonl" > "$work/bench_a.log" 2>&1; tail -26 "$work/bench_a.log"
PYTHONPATH=$FA4 timeout "$(lim 60)" python3 $B -b fa4-cuda --json "$work/bench.jsonl" > "$work/bench_b.log" 2>&1; tail -5 "$work/bench_b.log"
PYTHONPATH=$XF timeout "$(lim 60)" python3 $B -b xformers-cutlass-cuda -b xformers-flash-cuda --json "$work/bench.jsonl" > "$work/bench_c.log" 2>&1; tail -9 "$work/bench_c.log"
if [ "${PARITY_RUN_DECODE:-1}" = 1 ] && python3 -m parity decode --help > /dev/null 2>&1; then
  echo "== decode (greedy-decode divergence, parity/decode)"
  D=(python3 -m parity decode --time-limit "${DECODE_LIMIT:-8}" -q)
  timeout "$(lim 150)" "${D[@]}" -b torch-fa2-cuda -b sdpa-cudnn-cuda -b flex-cuda -b jax-cudnn-cuda --out "$work/decode" > "$work/decode_a.log" 2>&1; echo "decode a rc=$?"
  PYTHONPATH=$FA4 timeout "$(lim 60)" "${D[@]}" -b fa4-cuda --out "$work/decode_fa4" > "$work/decode_b.log" 2>&1; echo "decode b rc=$?"
  PYTHONPATH=$XF timeout "$(lim 60)" "${D[@]}" -b xformers-flash-cuda -b xformers-cutlass-cuda --out "$work/decode_xformers" > "$work/decode_c.log" 2>&1; echo "decode c rc=$?"
  tail -n 6 "$work/decode_a.log" "$work/decode_b.log" "$work/decode_c.log"
fi
cat "$work/sweep/timing.json" 2>/dev/null | head -12
tar czf "$OUT/h200run.tgz" -C /tmp h200run
echo "packed $(du -h "$OUT/h200run.tgz" | cut -f1) in $(( $(date +%s) - t0 )) s"
