#!/usr/bin/env bash
# One loan's GPU work for issues 29-32, after the four parts are parked and `bash lab/device/install.sh`
# ran on the same warm machine (lab/device/README.md):
#   bash lab/loan/h200_issues.sh thru [LIMIT_S]     # issue 31: benchmarks/throughput.py cold then warm, ALONE on
#                                                   # the GPU (run it before launch) -> $OUT/thru.tgz
#     [JOBS=N] [RUNS=warm CACHE=DIR]                # lanes; only a warm run, on a cache earlier calls filled
#     [RUN_ARGS="--split auto"]                     # more `parity run` options for every run
#   bash lab/loan/h200_issues.sh cold LIMIT_S       # issue 31's cold run of the whole default profile into
#                                                   # /tmp/tp/cold (cache /tmp/tp/cc), --resume'd by each later call
#                                                   # until complete -> $OUT/cold.tgz; then `thru` with RUNS=warm
#                                                   # CACHE=/tmp/tp/cc for the warm figure; [RUN_ARGS=...] replaces
#                                                   # its default `--split auto`
#   bash lab/loan/h200_issues.sh coldwarm [COLD_S] [WARM_S]  # issue 47 in one call with nothing staged: the default
#                                                   # profile cold, then warm if complete -> $OUT/coldwarm.tgz
#   bash lab/loan/h200_issues.sh warm [LIMIT_S]     # issue 47: the default profile again on /tmp/tp/cc (after `cold`
#                                                   # completed) into /tmp/tp/warm -> $OUT/warm.tgz
#   bash lab/loan/h200_issues.sh checks [LIMIT_S]   # issue 49: the quick profile with --invariance --graph-replay on
#                                                   # every GPU backend here, on the cold run's cache -> $OUT/checks.tgz
#     [BACKENDS=a,b | BACKENDS=staged]              # only these (staged: the staged libraries' backends, below)
#     [CASES=FILE.jsonl NAME=checks-x]              # that case file instead of the quick profile, into /tmp/NAME ->
#                                                   # $OUT/NAME.tgz (lab/loan/flashinfer_cases.py: FlashInfer's few modules)
#   bash lab/loan/h200_issues.sh vdiff LIMIT_S      # old code (.stage/old-6ac94c6, carried) against new on CASES
#                                                   # cases, both on the cold run's cache -> $OUT/vdiff.tgz
#   bash lab/loan/h200_issues.sh launch [FEAT_S] [GRAD_S] [GATE_S]  # the detached jobs below; returns at once
#   bash lab/loan/h200_issues.sh collect LIMIT_S    # wait for them (up to LIMIT_S), $OUT/<job>.tgz each
#   bash lab/loan/h200_issues.sh resume-grad LIMIT_S  # issue 30: continue the committed --grad runs of
#                                                   # lab/runs/h100-2026-12-05d, both at once, for LIMIT_S; again
#                                                   # on the same machine until complete -> $OUT/native.tgz, staged.tgz
# Jobs (lab/device/bg.sh), sharing the one GPU, so their per-row times are not comparable:
#   features  issue 29: the default profile's sink / chunk / fp8 cases on every GPU backend (FlashInfer included),
#             known divergences applied
#   lse       the default profile's first rows on the backends that return an LSE
#   grad      issue 30: `parity run --grad` on the default profile, the GPU backends with a backward
#   lm        issue 32: lab/loan/h200_lm_decode.sh (train the language model, then the decode study)
#   gate      `nox -s gpu` (quick profile), as a GPU runner runs it, at nice 10
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
bg() { bash "$here/device/bg.sh" "$@"; }
GATE_FLASHINFER=1 source "$here/loan/h200_env.sh"  # worker paths (FlashInfer's too), the xformers shim
PARITY_CC=/tmp/parity-cc
GRAD_BACKENDS=sdpa-math-cuda,sdpa-efficient-cuda,sdpa-cudnn-cuda,flex-cuda,torch-fa2-cuda,torch-fa2-varlen-cuda,fa4-cuda,fa4-varlen-cuda,xformers-cutlass-cuda,xformers-flash-cuda,jax-xla-cuda,jax-cudnn-cuda,reference-cuda
STAGED_BACKENDS=fa4-cuda,fa4-varlen-cuda,vllm-fa2-cuda,vllm-fa3-cuda,vllm-fa3-split2-cuda,xformers-cutlass-cuda,xformers-flash-cuda,flashinfer-cuda,flashinfer-paged-cuda,flashinfer-decode-cuda,flashinfer-decode-split4-cuda,reference-cuda
[ "${BACKENDS:-}" = staged ] && BACKENDS=$STAGED_BACKENDS
LSE_BACKENDS=flex-cuda,torch-fa2-cuda,torch-fa2-varlen-cuda,fa4-cuda,fa4-varlen-cuda,vllm-fa2-cuda,vllm-fa3-cuda,xformers-cutlass-cuda,xformers-flash-cuda,flashinfer-cuda,sdpa-efficient-cuda,reference-cuda

features() {  # LIMIT_S
  local w=/tmp/features; rm -rf "$w"; mkdir -p "$w"
  PYTHONPATH=. python3 lab/loan/feature_cases.py > "$w/features.jsonl"  # run from the repository root
  echo "feature cases: $(wc -l < "$w/features.jsonl")"
  timeout $(( $1 + 120 )) python3 -m parity run --backend all-gpu --case-file "$w/features.jsonl" --jobs 8 \
    --split flashinfer-cuda=2 --split flashinfer-paged-cuda=2 --time-limit "$1" --timeout 240 --shrink 4 -q \
    --compile-cache "$PARITY_CC" --out "$w/features" > "$w/features.log" 2>&1
  echo "features rc=$?"; grep -v "^  \|^$" "$w/features.log" | tail -n 40 | cut -c1-200
}

lse() {  # LIMIT_S: the default profile's first rows on the backends that return an LSE
  local w=/tmp/lse; rm -rf "$w"; mkdir -p "$w"
  timeout $(( $1 + 120 )) python3 -m parity run --backend "$LSE_BACKENDS" --profile default --jobs 6 \
    --time-limit "$1" --timeout 240 --shrink 4 -q --compile-cache "$PARITY_CC" --out "$w/run" > "$w/lse.log" 2>&1
  echo "lse rc=$?"; grep -v "^  \|^$" "$w/lse.log" | tail -n 30 | cut -c1-200
}

grad() {  # LIMIT_S
  local w=/tmp/grad; rm -rf "$w"; mkdir -p "$w"
  timeout $(( $1 + 120 )) python3 -m parity run --grad --backend "$GRAD_BACKENDS" --profile default --jobs 6 \
    --time-limit "$1" --timeout 240 --shrink 6 -q --compile-cache "$PARITY_CC" --out "$w/run" > "$w/grad.log" 2>&1
  echo "grad rc=$?"; grep -v "^  \|^$" "$w/grad.log" | tail -n 40 | cut -c1-200
}

case "${1:-}" in
  thru)
    w=/tmp/thru; rm -rf "$w"; mkdir -p "$w"
    # each run overruns its --time-limit by the rows in flight and the writing (12-05d: 302 s for 215), so the call
    # is split in runs + 1 parts; if the timeout still ends the last run, --summarize reads what each wrote
    nruns=$(echo "${RUNS:-cold,warm}" | tr ',' '\n' | grep -c .)
    timeout "${2:-240}" python3 "$here/../benchmarks/throughput.py" --out "$w/new" --profile default --backend all-gpu \
      --jobs "${JOBS:-8}" --time-limit $(( (${2:-240} - 60) / (nruns + 1) )) --runs "${RUNS:-cold,warm}" ${CACHE:+--cache "$CACHE"} \
      ${RUN_ARGS:+-- $RUN_ARGS} > "$w/thru.log" 2>&1
    rc=$?; echo "throughput rc=$rc"; tail -n 40 "$w/thru.log" | cut -c1-200
    [ "$rc" = 124 ] && python3 "$here/../benchmarks/throughput.py" --out "$w/new" --runs "${RUNS:-cold,warm}" --summarize \
      > "$w/summary.txt" 2>&1
    # the compile cache (330 MB on 12-05d) and the bulky per-row files stay on the machine: a call returns 16 MiB
    tar czf "$OUT/thru.tgz" -C /tmp --exclude=compile-cache --exclude=results.json --exclude=masks.jsonl thru ;;
  cold)
    w=/tmp/tp; mkdir -p "$w"; lim=${2:-400}
    more=""; [ -f "$w/cold/progress.jsonl" ] || [ -f "$w/cold/results.csv" ] && more="--resume"
    # no timeout kill before the run writes: rows in flight finish after --time-limit (FlashInfer builds 18 s each)
    t0=$(date +%s)
    timeout $(( lim + 150 )) python3 -m parity run $more --profile default --backend all-gpu --jobs "${JOBS:-12}" \
      ${RUN_ARGS---split auto} --shrink 0 --no-report -q --compile-cache "$w/cc" --out "$w/cold" --time-limit "$lim" >> "$w/cold.log" 2>&1
    echo "cold rc=$? in $(( $(date +%s) - t0 )) s ($more): $(( $(wc -l < "$w/cold/results.csv") - 1 )) rows"; grep -v "^  \|^$" "$w/cold.log" | tail -n 12 | cut -c1-200
    du -sh "$w/cc" 2>/dev/null
    tar czf "$OUT/cold.tgz" -C "$w" --exclude=results.json --exclude=masks.jsonl cold cold.log ;;
  coldwarm)  # issue 47 in one call, nothing staged (what the image has: torch's, JAX's and the reference backends;
    # the staged ones are unavailable rows): the default profile cold (COLD_S), then warm on its cache if complete
    w=/tmp/tp; rm -rf "$w"; mkdir -p "$w"; t0=$(date +%s)
    timeout $(( ${2:-380} + 120 )) python3 -m parity run --profile default --backend all-gpu --jobs "${JOBS:-14}" \
      --split auto --shrink 0 --no-report -q --compile-cache "$w/cc" --out "$w/cold" --time-limit "${2:-380}" > "$w/cold.log" 2>&1
    echo "cold rc=$? in $(( $(date +%s) - t0 )) s: $(( $(wc -l < "$w/cold/results.csv") - 1 )) rows"; grep -v "^  \|^$" "$w/cold.log" | tail -n 6 | cut -c1-200
    if ! grep -q PARTIAL "$w/cold.log"; then
      t1=$(date +%s)
      timeout "${3:-150}" python3 -m parity run --profile default --backend all-gpu --jobs "${JOBS:-14}" --split auto \
        --shrink 0 --no-report -q --compile-cache "$w/cc" --out "$w/warm" > "$w/warm.log" 2>&1
      echo "warm rc=$? in $(( $(date +%s) - t1 )) s"; grep -v "^  \|^$" "$w/warm.log" | tail -n 6 | cut -c1-200
    fi
    PYTHONPATH="$here/..${PYTHONPATH:+:$PYTHONPATH}" python3 "$here/../benchmarks/compile_keys.py" "$w/cold" | tee "$w/compile-keys.txt"
    du -sh "$w/cc" 2>/dev/null
    tar czf "$OUT/coldwarm.tgz" -C "$w" --exclude=results.json --exclude=masks.jsonl --exclude=cc . ;;
  warm)  # issue 47's warm figure: the whole default profile again into a fresh folder, on the cold run's cache
    w=/tmp/tp; rm -rf "$w/warm"; t0=$(date +%s)
    timeout "${2:-400}" python3 -m parity run --profile default --backend all-gpu --jobs "${JOBS:-12}" \
      ${RUN_ARGS---split auto} --shrink 0 --no-report -q --compile-cache "$w/cc" --out "$w/warm" > "$w/warm.log" 2>&1
    echo "warm rc=$? in $(( $(date +%s) - t0 )) s: $(( $(wc -l < "$w/warm/results.csv") - 1 )) rows"; grep -v "^  \|^$" "$w/warm.log" | tail -n 12 | cut -c1-200
    tar czf "$OUT/warm.tgz" -C "$w" --exclude=results.json --exclude=masks.jsonl warm warm.log ;;
  checks)  # issue 49's engine checks on CUDA: batch invariance and graph replay, a table per backend last
    # RESUME=1: go on with /tmp/checks/run of an earlier call on this machine (same BACKENDS)
    name=${NAME:-checks}; w=/tmp/$name; [ "${RESUME:-0}" = 1 ] || rm -rf "$w"; mkdir -p "$w"; t0=$(date +%s)
    what=(--profile quick); [ -n "${CASES:-}" ] && what=(--case-file "$CASES")
    timeout $(( ${2:-300} + 90 )) python3 -m parity run "${what[@]}" --backend "${BACKENDS:-all-gpu}" --jobs "${JOBS:-12}" --split auto \
      --invariance --graph-replay --shrink 0 --no-report -q --compile-cache /tmp/tp/cc --precompile "${PRECOMPILE:-auto}" --out "$w/run" --time-limit "${2:-300}" \
      $([ "${RESUME:-0}" = 1 ] && echo --resume) >> "$w/run.log" 2>&1
    echo "checks rc=$? in $(( $(date +%s) - t0 )) s"; grep -v "^  \|^$" "$w/run.log" | tail -n 4 | cut -c1-200
    python3 - "$w/run/results.csv" <<'PY' | tee "$w/checks.txt"
import sys
import pandas as pd
df = pd.read_csv(sys.argv[1], dtype=str, keep_default_na=False)
df = df[df["verdict"] != "unavailable"]
for col in ("invariance_check", "graph_check"):
    print(pd.crosstab(df["backend"], df[col].replace("", "(none)")).to_string(), "\n")
bad = df[df["graph_check"].isin(["mismatch", "close", "error"]) | df["invariance_check"].isin(["mismatch", "error"])]
for _, r in bad.head(30).iterrows():
    print(r["backend"], r["case_id"], r["invariance_check"], r["graph_check"], (r["graph_detail"] or r["invariance_detail"])[:150])
PY
    tar czf "$OUT/$name.tgz" -C /tmp --exclude=results.json --exclude=masks.jsonl "$name" ;;
  vdiff)
    # the old code has no FLASHINFER_WORKSPACE_BASE of its own: give it the cold run's builds too
    export FLASHINFER_WORKSPACE_BASE=/tmp/tp/cc/flashinfer
    timeout "${2:-400}" bash "$here/loan/verdict_diff.sh" run /tmp/vd all-gpu default -- --jobs "${JOBS:-12}" \
      --compile-cache /tmp/tp/cc ${RUN_ARGS:-} > /tmp/vd.log 2>&1
    echo "vdiff rc=$?"; tail -n 8 /tmp/vd.log | cut -c1-200
    tar czf "$OUT/vdiff.tgz" -C /tmp --exclude=results.json --exclude=masks.jsonl vd vd.log ;;
  launch)
    bg start features --watch /tmp/features -- bash -c "$(declare -f features); PARITY_CC=$PARITY_CC features ${2:-330}"
    bg start lse --watch /tmp/lse -- bash -c "$(declare -f lse); PARITY_CC=$PARITY_CC LSE_BACKENDS=$LSE_BACKENDS lse 240"
    bg start grad --watch /tmp/grad -- bash -c "$(declare -f grad); PARITY_CC=$PARITY_CC GRAD_BACKENDS=$GRAD_BACKENDS grad ${3:-330}"
    # the weights (15 MB) stay on the machine: the job returns the model's config and metrics and the study
    bg start lm --watch /tmp/lm-decode -- bash -c "OUT=/tmp/lmout bash '$here/loan/h200_lm_decode.sh' 150 6 165 75;
      cp /tmp/lmout/lm-model/*.json \$OUT/ 2>/dev/null; ls -la /tmp/lmout/lm-model"
    bg start gate --watch /tmp/gate-green -- nice -n 10 env LIMIT=${4:-600} bash "$here/loan/h200_gate.sh" green ;;
  resume-grad)
    lim=${2:-400}
    for r in grad-native grad-staged; do  # the first call copies the committed folder; later calls continue it
      [ -d "/tmp/$r" ] || cp -r "$here/runs/h100-2026-12-05d/$r" "/tmp/$r"
    done
    common="--resume --time-limit $lim -q"
    bg start native --watch /tmp/grad-native -- python3 -m parity run $common --out /tmp/grad-native --jobs 4
    # FA4 split in 3 each: on 12-05d one lane per FA4 backend ran 132 rows in three calls (866 s), its CuTe compiles
    # bound by the CPU, so the 353 left each would need ~2300 s; a split keeps each configuration on one worker
    bg start staged --watch /tmp/grad-staged -- python3 -m parity run $common --out /tmp/grad-staged --jobs 12 \
      --split flex-cuda=4 --split fa4-cuda=3 --split fa4-varlen-cuda=3
    bg collect $(( lim + 100 )) native staged
    for r in grad-native grad-staged; do echo "$r: $(grep -h 'PARTIAL\|rows ran\|complete' "/tmp/bg/${r#grad-}/log" | tail -n 1)"; done ;;
  collect)
    bg collect "${2:-540}"
    nvidia-smi --query-gpu=name,utilization.gpu,memory.used --format=csv,noheader 2>/dev/null ;;
  *) echo "usage: bash lab/loan/h200_issues.sh thru [LIMIT_S] | cold LIMIT_S | coldwarm [COLD_S] [WARM_S] | warm [LIMIT_S] | vdiff LIMIT_S | launch | collect LIMIT_S | resume-grad LIMIT_S" >&2; exit 2 ;;
esac
