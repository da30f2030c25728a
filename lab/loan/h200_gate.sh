#!/usr/bin/env bash
# The GPU gate on the H200, after flash-attn-4 and xformers were staged into /tmp/site-fa4 and
# /tmp/site-xformers, and nox (with its pure-Python needs) into /tmp/site-nox:
#   bash lab/loan/h200_gate.sh green       # `nox -s gpu` as a GPU runner runs it -> $OUT/nox_gpu_green.log
#   bash lab/loan/h200_gate.sh start       # the same, detached (setsid): it outlives this device call ...
#   bash lab/loan/h200_gate.sh wait        # ... and a later call on the same warm machine waits for it
#                                            #     (up to $LIMIT s) and returns the log and the sweep
#   bash lab/loan/h200_gate.sh red         # the same with a planted bug plugged in -> $OUT/nox_gpu_red.log
#   bash lab/loan/h200_gate.sh repros      # the findings' standalone repro scripts and their controls
#                                            #     (parity export-repro --known, then run_repros.sh)
# Each step writes its log under $OUT and prints a short tail last; green and red exit with nox's status.
set -u
step=$1
source "$(dirname "$0")/h200_env.sh"  # FA4, XF, PARITY_WORKER_PATH, the xformers shim
export PARITY_PROFILE=${PARITY_PROFILE:-quick} PARITY_GPU_JOBS=${PARITY_GPU_JOBS:-6} PARITY_PYTEST_ARGS=${PARITY_PYTEST_ARGS:--n 4}
export PARITY_COMPILE_CACHE=/tmp/parity-cc
nox() { PYTHONPATH=/tmp/site-nox python3 -m nox "$@"; }
t0=$(date +%s)
case "$step" in
  green)
    timeout "${LIMIT:-540}" bash -c "$(declare -f nox); nox -s gpu -- --out /tmp/gate-green -q" > "$OUT/nox_gpu_green.log" 2>&1
    rc=$?; echo "nox -s gpu (green): rc=$rc in $(( $(date +%s) - t0 )) s"
    tar czf "$OUT/gate-green.tgz" -C /tmp gate-green 2>/dev/null
    grep -E "^nox >|passed|failed|xfailed|known divergences|new failures|unexpected|Session gpu" "$OUT/nox_gpu_green.log" | tail -n 20 | cut -c1-220
    exit "$rc" ;;
  start)
    rm -f /tmp/nox_gpu_green.rc
    setsid bash -c "$(declare -f nox); nox -s gpu -- --out /tmp/gate-green -q > /tmp/nox_gpu_green.log 2>&1; echo \$? > /tmp/nox_gpu_green.rc" \
      < /dev/null > /dev/null 2>&1 &
    echo "nox -s gpu started in the background (pid $!)" ;;
  wait)
    end=$(( t0 + ${LIMIT:-540} ))
    while [ ! -f /tmp/nox_gpu_green.rc ] && [ "$(date +%s)" -lt "$end" ]; do sleep 5; done
    cp /tmp/nox_gpu_green.log "$OUT/nox_gpu_green.log"; tar czf "$OUT/gate-green.tgz" -C /tmp gate-green 2>/dev/null
    if [ -f /tmp/nox_gpu_green.rc ]; then echo "nox -s gpu (green): rc=$(cat /tmp/nox_gpu_green.rc)"; else echo "nox -s gpu: still running"; fi
    grep -E "^nox >|passed|failed|xfailed|known divergences|new failures|unexpected|Session gpu" "$OUT/nox_gpu_green.log" | tail -n 20 | cut -c1-220 ;;
  red)
    # -x: the first failure is the evidence; the gate only has to turn red
    PARITY_PYTEST_ARGS="$PARITY_PYTEST_ARGS -x" PARITY_GPU_BACKENDS=parity.selftest.bugs:Fa2CudaWindowOneWider timeout "${LIMIT:-300}" \
      bash -c "$(declare -f nox); nox -s gpu -- --out /tmp/gate-red -q" > "$OUT/nox_gpu_red.log" 2>&1
    rc=$?; echo "nox -s gpu with a planted bug (red): rc=$rc in $(( $(date +%s) - t0 )) s"
    grep -E "^nox >|^FAILED|passed|failed|Session gpu|ParityError" "$OUT/nox_gpu_red.log" | tail -n 14 | cut -c1-220
    exit "$rc" ;;  # 1 is what the planted bug must give
  repros)
    # the scripts are generated from the known-divergence file and the committed runs, then run
    python3 -m parity export-repro --known --runs lab/runs --out /tmp/repro-scripts > "$OUT/repros_export.log" 2>&1
    bash "$(dirname "$0")/run_repros.sh" /tmp/repro-scripts /tmp/repro-results > "$OUT/repros.log" 2>&1
    cp /tmp/repro-results/results.tsv "$OUT/repros_results.tsv"; tar czf "$OUT/repro-logs.tgz" -C /tmp repro-results
    echo "== xformers refusals recheck"
    python3 -m parity run -b xformers-cutlass-cuda -b xformers-flash-cuda --case-file lab/runs/findings-repros/xformers-refusal-cases.jsonl \
      --out /tmp/xf-recheck -q --no-report > "$OUT/xformers_recheck.log" 2>&1; echo "rc=$?"
    cp /tmp/xf-recheck/results.csv "$OUT/xformers_recheck.csv"
    cat "$OUT/repros.log"; grep -v "^\s*$" "$OUT/xformers_recheck.log" | tail -n 8 | cut -c1-200 ;;
esac
