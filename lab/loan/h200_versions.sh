#!/usr/bin/env bash
# Issue 50 on one warm machine: vLLM 0.26.0's FA2/FA3 build against 0.33.0's, the same cases, one run per version.
# Before it, here: `bash lab/device/prepare.sh vllm-fa vllm33-fa`; there, call by call: park.sh p00 ... then
# `bash lab/device/install.sh` after the last park (install puts 0.26.0 in /tmp/site-vllm-fa and 0.33.0 in
# /tmp/site-vllm33-fa). Then, on the same machine:
#   bash lab/loan/h200_versions.sh run [LIMIT_S] [PROFILE]   # each version LIMIT_S (default 200) -> $OUT/versions.tgz
# The two versions run side by side (PAR=0: one after the other); RESUME=1 goes on with an earlier call's /tmp/versions
# on this machine (each run `--resume`d, each entries run again); ENTRY_S bounds each entries run (default 400 s).
# 2026-12-07 (lab/runs/h100-2026-12-07-versions): vLLM's FA2 spent 6-145 s on each configuration's first call, so each
# version has a compile cache of its own (the CUDA driver's JIT cache among them) and the entry cases wait up to 400 s.
# Each run is judged with the known divergences (their `versions` say vllm>=0.26,<0.27, so a finding still there at
# 0.33.0 is loud), and each vLLM entry's shrunk case (lab/loan/versions-cases) for `parity evidence`; `parity vdiff` of the two runs is the version diff (vdiff/vdiff.md), `parity diff` the raw one.
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
source "$here/loan/h200_env.sh"
BACKENDS=vllm-fa2-cuda,vllm-fa3-cuda
w=/tmp/versions; [ "${RESUME:-0}" = 1 ] || rm -rf "$w"; mkdir -p "$w"
resume=$([ "${RESUME:-0}" = 1 ] && echo --resume)
one() {  # SITE NAME LIMIT_S PROFILE
  local t0; t0=$(date +%s)
  PARITY_WORKER_PATH="vllm-fa2-cuda=$1 vllm-fa3-cuda=$1" timeout $(( $3 + 90 )) python3 -m parity run \
    --backend "$BACKENDS" --profile "$4" --jobs "${JOBS:-6}" --time-limit "$3" --timeout 240 --shrink 4 -q \
    --compile-cache "$w/cc-$2" --out "$w/$2" $resume >> "$w/$2.log" 2>&1
  echo "$2 rc=$? in $(( $(date +%s) - t0 )) s: $(( $(zcat -f "$w/$2"/results.csv* 2>/dev/null | wc -l) - 1 )) rows"
  grep -v "^  \|^$" "$w/$2.log" | tail -n 8 | cut -c1-200
  # each vLLM entry's shrunk case (lab/loan/versions-cases, from `parity evidence --write-cases`), for `parity evidence`
  # on both backends, with --invariance (the vllm-fa3 batch-invariance entry's case needs it)
  cat "$here"/loan/versions-cases/vllm-fa*-cuda.jsonl > "$w/entries-$2.jsonl"
  PARITY_WORKER_PATH="vllm-fa2-cuda=$1 vllm-fa3-cuda=$1" timeout "${ENTRY_S:-400}" python3 -m parity run --backend "$BACKENDS" \
    --case-file "$w/entries-$2.jsonl" --invariance --jobs 2 --timeout 240 -q --no-report --compile-cache "$w/cc-$2" \
    --out "$w/$2-entries" --force > "$w/$2-entries.log" 2>&1; echo "$2 entries rc=$?"
}
case "${1:-}" in
  run)
    for s in /tmp/site-vllm-fa /tmp/site-vllm33-fa; do
      [ -d "$s/vllm/vllm_flash_attn" ] || { echo "not staged: $s (park the parts, then install.sh)"; exit 3; }
      python3 -c "import sys; sys.path.insert(0, '$s'); import vllm; print('$s', vllm.__version__)"
    done
    if [ "${PAR:-1}" = 1 ]; then
      one /tmp/site-vllm-fa vllm-0.26.0 "${2:-200}" "${3:-default}" > "$w/one-0.26.0.txt" 2>&1 &
      one /tmp/site-vllm33-fa vllm-0.33.0 "${2:-200}" "${3:-default}" > "$w/one-0.33.0.txt" 2>&1 &
      wait; cat "$w/one-0.26.0.txt" "$w/one-0.33.0.txt"
    else
      one /tmp/site-vllm-fa vllm-0.26.0 "${2:-200}" "${3:-default}"
      one /tmp/site-vllm33-fa vllm-0.33.0 "${2:-200}" "${3:-default}"
    fi
    python3 -m parity diff "$w/vllm-0.26.0" "$w/vllm-0.33.0" > "$w/diff.log" 2>&1; echo "diff rc=$?"
    python3 -m parity vdiff "$w/vllm-0.26.0" "$w/vllm-0.33.0" --out "$w/vdiff" > "$w/vdiff.log" 2>&1; echo "vdiff rc=$?"
    python3 -m parity evidence "$w/vllm-0.26.0-entries" "$w/vllm-0.33.0-entries" "$w/vllm-0.26.0" "$w/vllm-0.33.0" \
      --entry 'vllm*' --out "$w/evidence" > "$w/evidence.log" 2>&1; echo "evidence rc=$?"; head -n 30 "$w/evidence/evidence.md" | cut -c1-200
    grep -v "^$" "$w/vdiff/vdiff.md" 2>/dev/null | head -n 40 | cut -c1-200
    tar czf "$OUT/versions.tgz" -C /tmp --exclude=results.json --exclude=masks.jsonl --exclude='cc-*' versions ;;
  *) sed -n 2,8p "$0"; exit 2 ;;
esac
