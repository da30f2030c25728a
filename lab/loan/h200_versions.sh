#!/usr/bin/env bash
# Issue 50 on one warm machine: vLLM 0.26.0's FA2/FA3 build against 0.33.0's, the same cases, one run per version.
# Before it, here: `bash lab/device/prepare.sh vllm-fa vllm33-fa`; there, call by call: park.sh p00 ... then
# `bash lab/device/install.sh` after the last park (install puts 0.26.0 in /tmp/site-vllm-fa and 0.33.0 in
# /tmp/site-vllm33-fa). Then, on the same machine:
#   bash lab/loan/h200_versions.sh run [LIMIT_S] [PROFILE]   # each version LIMIT_S (default 200) -> $OUT/versions.tgz
# The two versions run side by side (PAR=0: one after the other); RESUME=1 goes on with an earlier call's /tmp/versions
# on this machine (each run `--resume`d where it has rows, each entries run again); ENTRY_S bounds each entries run
# (default 400 s; 0 skips them). ONLY=0.26.0 or ONLY=0.33.0 runs that version alone (its FA2 pre-pass gets all 16 CPUs); the diff,
# vdiff and evidence then read whatever both folders hold (ONLY=0.26.0, then RESUME=1 ONLY=0.33.0 in the next call).
# 2026-12-07 (lab/runs/h100-2026-12-07-versions): vLLM's FA2 spent 6-145 s on each configuration's first call, so each
# version has a compile cache of its own (the CUDA driver's JIT cache among them) and the entry cases wait up to 400 s.
# Each run is judged with the known divergences (their `versions` say vllm>=0.26,<0.27, so a finding still there at
# 0.33.0 is loud), and each vLLM entry's shrunk case (lab/loan/versions-cases) for `parity evidence`; `parity vdiff` of the two runs is the version diff (vdiff/vdiff.md), `parity diff` the raw one.
# LIB=jax: the same for JAX, the image's 0.11.2 (no worker path) against 0.12.1 staged by `prepare.sh jax012` in
# /tmp/site-jax012 (ONLY=0.11.2 / ONLY=0.12.1), on its three backends, the jax entries' cases with --grad (two are
# backward entries), into /tmp/versions-jax -> $OUT/versions-jax.tgz.
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
source "$here/loan/h200_env.sh"
if [ "${LIB:-vllm}" = jax ]; then
  BACKENDS=jax-xla-cuda,jax-cudnn-cuda,jax-cudnn-causal-cuda; PKG=jax; ENTRY_ARGS=--grad
  OLD=0.11.2 OLD_SITE=""; NEW=0.12.1 NEW_SITE=/tmp/site-jax012; w=/tmp/versions-jax
else
  BACKENDS=vllm-fa2-cuda,vllm-fa3-cuda; PKG=vllm; ENTRY_ARGS=--invariance
  OLD=0.26.0 OLD_SITE=/tmp/site-vllm-fa; NEW=0.33.0 NEW_SITE=/tmp/site-vllm33-fa; w=/tmp/versions
fi
[ "${RESUME:-0}" = 1 ] || rm -rf "$w"; mkdir -p "$w"
# SEED=lab/runs/RUN: on a fresh machine, go on from a committed run of this script (its four run folders, .gz files
# unpacked); each run is then `--resume`d, so only the rows that run lacks (or had `unavailable`) are run
if [ -n "${SEED:-}" ]; then
  for f in "$here/../$SEED"/"$PKG"-*/; do
    n=$(basename "$f"); [ -d "$w/$n" ] || { cp -r "$f" "$w/$n" && gunzip -f "$w/$n"/*.gz; RESUME=1; }
  done
fi
paths() {  # SITE -> "backend=SITE ..." for this library's backends (none for the image's own version)
  [ -n "$1" ] && echo "$BACKENDS" | tr ',' '\n' | sed "s|\$|=$1|" | tr '\n' ' '
}
one() {  # SITE NAME LIMIT_S PROFILE
  local t0 resume=""; t0=$(date +%s)
  [ "${RESUME:-0}" = 1 ] && [ -f "$w/$2/results.csv" ] && resume=--resume
  PARITY_WORKER_PATH="$(paths "$1")" timeout $(( $3 + 90 )) python3 -m parity run \
    --backend "$BACKENDS" --profile "$4" --jobs "${JOBS:-6}" --time-limit "$3" --timeout 240 --shrink 4 -q \
    --compile-cache "$w/cc-$2" --out "$w/$2" $resume >> "$w/$2.log" 2>&1
  echo "$2 rc=$? in $(( $(date +%s) - t0 )) s: $(( $(zcat -f "$w/$2"/results.csv* 2>/dev/null | wc -l) - 1 )) rows"
  grep -v "^  \|^$" "$w/$2.log" | tail -n 8 | cut -c1-200
  # each entry's shrunk case (lab/loan/versions-cases, from `parity evidence --write-cases`), for `parity evidence`
  # on every backend, with --invariance (vLLM: the vllm-fa3 batch-invariance entry's case needs it) or --grad (JAX)
  [ "${ENTRY_S:-400}" = 0 ] && { echo "$2 entries: skipped (ENTRY_S=0)"; return; }  # timeout 0 would mean no limit
  cat "$here"/loan/versions-cases/"$PKG"-*-cuda.jsonl > "$w/entries-$2.jsonl"
  PARITY_WORKER_PATH="$(paths "$1")" timeout "${ENTRY_S:-400}" python3 -m parity run --backend "$BACKENDS" \
    --case-file "$w/entries-$2.jsonl" $ENTRY_ARGS --jobs 2 --timeout 240 -q --no-report --compile-cache "$w/cc-$2" \
    --out "$w/$2-entries" --force > "$w/$2-entries.log" 2>&1; echo "$2 entries rc=$?"
}
case "${1:-}" in
  run)
    for s in $OLD_SITE $NEW_SITE; do
      [ -d "$s/$PKG" ] || { echo "not staged: $s (park the parts, then install.sh)"; exit 3; }
    done
    for s in "$OLD_SITE" "$NEW_SITE"; do
      python3 -c "import sys; sys.path.insert(0, '$s') if '$s' else None; import $PKG; print('${s:-image}', $PKG.__version__)"
    done
    a="$PKG-$OLD" b="$PKG-$NEW" lim="${2:-200}" prof="${3:-default}"
    if [ -n "${ONLY:-}" ]; then
      case "$ONLY" in
        "$OLD") one "$OLD_SITE" "$a" "$lim" "$prof" ;;
        "$NEW") one "$NEW_SITE" "$b" "$lim" "$prof" ;;
        *) echo "ONLY=$ONLY: $OLD or $NEW" >&2; exit 2 ;;
      esac
    elif [ "${PAR:-1}" = 1 ]; then
      one "$OLD_SITE" "$a" "$lim" "$prof" > "$w/one-$OLD.txt" 2>&1 &
      one "$NEW_SITE" "$b" "$lim" "$prof" > "$w/one-$NEW.txt" 2>&1 &
      wait; cat "$w/one-$OLD.txt" "$w/one-$NEW.txt"
    else
      one "$OLD_SITE" "$a" "$lim" "$prof"
      one "$NEW_SITE" "$b" "$lim" "$prof"
    fi
    python3 -m parity diff "$w/$a" "$w/$b" > "$w/diff.log" 2>&1; echo "diff rc=$?"
    python3 -m parity vdiff "$w/$a" "$w/$b" --out "$w/vdiff" > "$w/vdiff.log" 2>&1; echo "vdiff rc=$?"
    python3 -m parity evidence "$w/$a-entries" "$w/$b-entries" "$w/$a" "$w/$b" \
      --entry "$PKG*" --out "$w/evidence" > "$w/evidence.log" 2>&1; echo "evidence rc=$?"; head -n 30 "$w/evidence/evidence.md" | cut -c1-200
    grep -v "^$" "$w/vdiff/vdiff.md" 2>/dev/null | head -n 40 | cut -c1-200
    tar czf "$OUT/$(basename "$w").tgz" -C /tmp --exclude=results.json --exclude=masks.jsonl --exclude='cc-*' "$(basename "$w")" ;;
  *) sed -n 2,8p "$0"; exit 2 ;;
esac
