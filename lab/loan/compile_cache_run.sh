#!/usr/bin/env bash
# One sweep of the GPU backends that compile per configuration, with every compiler's disk
# cache under $PARITY_CC_DIR (default /tmp/parity-cc), into /tmp/ccrun/NAME; run it twice, the second time
# on the cache the first filled, then compare with benchmarks/compile_cache.py:
#   bash lab/loan/compile_cache_run.sh cold 300              # empty cache (it is wiped when NAME=cold)
#   bash lab/loan/compile_cache_run.sh warm 300              # same sweep, warm cache
#   bash lab/loan/compile_cache_run.sh seed1 300 --seed 1    # other cases, the same cache
# Expects flash-attn-4 in /tmp/site-fa4 (shared/device stage1 + stage2); --repeats 1, no shrinking,
# so both runs do the same work. The folders (results, timing, environment) go to $OUT/ccrun-NAME.tgz.
set -u
name=$1; sweep_t=${2:-300}; shift 2 || true
CACHE=${PARITY_CC_DIR:-/tmp/parity-cc}; work=/tmp/ccrun; mkdir -p "$work"
# a cold run starts from an empty cache; only a folder of ours is ever wiped
if [ "$name" = cold ]; then case "$CACHE" in /tmp/parity-*) rm -rf "$CACHE" ;; *) echo "cold: $CACHE is not under /tmp/parity-*: not wiped" ;; esac; fi
FA4=/tmp/site-fa4:/tmp/site-fa4/nvidia_cutlass_dsl/dsl_packages
BACKENDS=${BACKENDS:-flex-cuda,fa4-cuda,fa4-varlen-cuda,jax-xla-cuda,jax-cudnn-cuda,jax-cudnn-causal-cuda,sdpa-cudnn-cuda}
export PYTHONUNBUFFERED=1
t0=$(date +%s)
echo "== $name: $BACKENDS, ${JOBS:-5} lanes, rows started for ${sweep_t} s, cache $CACHE $(date -u +%FT%TZ)"
rm -rf "${work:?}/$name"
timeout $(( sweep_t + 120 )) python3 -m parity run --backend "$BACKENDS" --profile "${PROFILE:-default}" --jobs "${JOBS:-5}" \
  --time-limit "$sweep_t" --timeout 120 --repeats 1 --shrink 0 --no-report -q --compile-cache "$CACHE" \
  --out "$work/$name" --worker-path "fa4-cuda=$FA4" --worker-path "fa4-varlen-cuda=$FA4" "$@" > "$work/$name.log" 2>&1
echo "$name rc=$? in $(( $(date +%s) - t0 )) s; cache now $(du -sh "$CACHE" | cut -f1)"
grep -v "^  \|^$" "$work/$name.log" | tail -12
python3 -c "import json; c=json.load(open('$work/$name/environment.json'))['compile_cache']; print('cache', c['state'], c['files_before'], '->', c['files_before'] + c['files_added'], 'files')"
tar czf "$OUT/ccrun-$name.tgz" -C "$work" "$name" "$name.log"
