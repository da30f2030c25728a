#!/usr/bin/env bash
# Issue 27 on a GPU: `parity run --backend all-gpu --profile models` (every model of parity/models.py at its real
# lengths), resumed over calls until complete. After the four parts are parked and `bash lab/device/install.sh` ran
# on the same warm machine (lab/device/README.md):
#   bash lab/loan/h200_models.sh run [LIMIT_S] [JOBS]  # the first call starts /tmp/models, later calls --resume it
#   SEED=lab/runs/RUN/run bash lab/loan/h200_models.sh run ...  # first call: resume that committed run (its code's
#     columns: a run of older code is refused, "lacks the columns ..."; the newest is lab/runs/h100-2026-12-07g-models)
#   PRECOMPILE=off ...                                 # --precompile off|on|auto (default auto): off when a call's
#     time limit is shorter than its compiles (12-07d: FlashInfer's prefill JIT took the whole 370 s)
#   SPLIT="flashinfer-paged-cuda=5" ...               # --split items (space-separated): the 12-07b projection's
#     critical lane is FlashInfer paged's prefill JIT (11 keys x ~132 s in one worker); split, it is a fifth
#   bash lab/loan/h200_models.sh mem [LIMIT_S]         # benchmarks/memory_estimate.py at scale 1, a few backends
# Each call leaves $OUT/models.tgz: the run folder (masks.jsonl only while small: a call returns 16 MiB) and its log.
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
GATE_FLASHINFER=1 source "$here/loan/h200_env.sh"  # worker paths (FlashInfer's too), the xformers shim
d=/tmp/models
case "${1:-}" in
  run)
    lim=${2:-420}
    # SEED=reports/RUN/run: on a fresh machine, go on from a committed partial run (its .gz files unpacked)
    if [ ! -d "$d" ] && [ -n "${SEED:-}" ]; then cp -r "$here/../$SEED" "$d" && gunzip -f "$d"/*.gz; fi
    resume=(); [ -f "$d/results.csv" ] && resume=(--resume)
    for s in ${SPLIT:-}; do resume+=(--split "$s"); done
    # rows in flight finish after --time-limit (a 32k prefill with its mask probe takes a while): the call's timeout
    # leaves them 140 s; the compile cache stays on the machine for the next call
    timeout $(( lim + 140 )) python3 -m parity run --backend all-gpu --profile models --jobs "${3:-8}" --shrink 0 \
      --no-report -q --expect default --compile-cache /tmp/models-cc --precompile "${PRECOMPILE:-auto}" --time-limit "$lim" --out "$d" "${resume[@]}" \
      >> /tmp/models-run.log 2>&1
    echo "models rc=$?"; grep -v "^  \|^$" /tmp/models-run.log | tail -n 45 | cut -c1-220
    nvidia-smi --query-gpu=name,memory.used --format=csv,noheader
    python3 "$here/../benchmarks/memory_estimate.py" --run "$d" > /tmp/models-memory.txt 2>&1; head -n 40 /tmp/models-memory.txt
    excl=(--exclude=results.json); [ "$(stat -c %s "$d/masks.jsonl" 2>/dev/null || echo 0)" -gt 12000000 ] && excl+=(--exclude=masks.jsonl)
    tar czf "$OUT/models.tgz" -C /tmp "${excl[@]}" models models-run.log models-memory.txt ;;
  mem)
    lim=${2:-300}; : > /tmp/mem.txt
    for b in reference-cuda sdpa-efficient-cuda flex-cuda torch-fa2-cuda vllm-fa2-cuda flashinfer-cuda; do
      echo "== $b" >> /tmp/mem.txt  # in process: the backend's worker path (if any) on PYTHONPATH
      wp=$(echo "$PARITY_WORKER_PATH" | tr ' ' '\n' | sed -n "s/^$b=//p")
      PYTHONPATH="${wp:+$wp:}${PYTHONPATH:-}" timeout "$(( lim / 6 ))" python3 "$here/../benchmarks/memory_estimate.py" --backend "$b" --scale 1 >> /tmp/mem.txt 2>&1
      echo "rc=$?" >> /tmp/mem.txt
    done
    cut -c1-200 /tmp/mem.txt; cp /tmp/mem.txt "$OUT/" ;;
  *) echo "usage: bash lab/loan/h200_models.sh run [LIMIT_S] [JOBS] | mem [LIMIT_S]" >&2; exit 2 ;;
esac
