#!/usr/bin/env bash
# Follow-up H200 call (image backends only, no install): (1) is jax-xla's float32 miss JAX's
# default TF32 matmul precision? the failing sweep case, default vs JAX_DEFAULT_MATMUL_PRECISION=highest;
# (2) harness overhead of a serial sweep (one lane) on the default profile, latest code.
set -u
w=/tmp/followup; rm -rf "$w"; mkdir -p "$w"; export PYTHONUNBUFFERED=1
C='{"q_lens":[64],"k_lens":[64],"hq":4,"hkv":4,"head_dim":64,"dtype":"float32","window":{"left":15,"right":0,"align":"bottom_right"},"scale":null,"softcap":null,"page_size":null,"seed":1000}'
for prec in default highest; do
  if [ $prec = default ]; then E=(); else E=(env JAX_DEFAULT_MATMUL_PRECISION=highest); fi
  timeout 90 "${E[@]}" python3 -m parity run -b jax-xla-cuda --case "$C" --out "$w/jax_$prec" -q --no-report --shrink 0 > "$w/jax_$prec.log" 2>&1
  echo "jax-xla fp32, precision=$prec: rc=$? $(python3 -c "import csv; r=next(csv.DictReader(open('$w/jax_$prec/results.csv'))); print(r['verdict'], 'max_abs_err', r['max_abs_err'], 'budget', r['threshold_max'], 'ratio', r['err_ratio'])")"
done
timeout "${1:-230}" python3 benchmarks/sweep_overhead.py --out "$w/serial" --json "$w/overhead.jsonl" -- --profile default \
  -b reference-cuda -b sdpa-math-cuda -b sdpa-efficient-cuda -b sdpa-cudnn-cuda -b sdpa-flash-causal-cuda \
  -b torch-fa2-cuda -b torch-fa2-varlen-cuda -b jax-cudnn-causal-cuda --repeats 3 --timeout 120 --time-limit "${2:-190}" --shrink 0 \
  > "$w/serial.log" 2>&1
echo "serial rc=$?"; grep -v "^\[" "$w/serial.log" | tail -16
tar czf "$OUT/followup.tgz" -C /tmp followup
