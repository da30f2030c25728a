#!/usr/bin/env bash
# One H200 loan's GPU work, all at once, detached (lab/device/bg.sh), after the four parts are parked and
# `bash lab/device/install.sh` ran in the same call as `launch`:
#   bash lab/loan/h200_loan.sh launch [SEED_LIMIT_S]   # start the five jobs below; returns at once
#   bash lab/loan/h200_loan.sh collect LIMIT_S         # wait for them (up to LIMIT_S), $OUT/<job>.tgz each
#   bash lab/loan/h200_loan.sh resume-seed [LIMIT_S]   # job seed2: the seed sweep's rest (--resume), if
#                                                        # seed ended partial (exit 3) with time left on the loan
# The jobs share the one GPU; the seed sweep (nvcc JIT builds for FlashInfer) runs at nice 10 so the
# gate's per-row timings and timeouts are not starved by it.
#   gate    `nox -s gpu` as a runner runs it (lab/loan/h200_gate.sh green; quick profile)  issue 17
#   red     the same with a planted bug, once the gate ended (h200_gate.sh red)               issue 17
#   repros  every finding's standalone script and control (h200_gate.sh repros)               issue 17
#   seed    vLLM's FA2 / FA3 and the three FlashInfer backends on the default profile         issue 20
#   decode  the greedy-decode study with vLLM's FA2 / FA3 (h200_seed_decode.sh)               issue 20
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
bg() { bash "$here/device/bg.sh" "$@"; }
seed() {  # LIMIT_S JOB RESUME: the seed systems' default-profile sweep at nice 10, 8 lanes
  bg start "$2" --watch /tmp/seedrun -- nice -n 10 env SEED_RESUME="$3" \
    SEED_BACKENDS=vllm-fa2-cuda,vllm-fa3-cuda,flashinfer-cuda,flashinfer-paged-cuda,flashinfer-decode-cuda SEED_JOBS=8 \
    SEED_ARGS="--split flashinfer-cuda=2 --split flashinfer-paged-cuda=2 --split flashinfer-decode-cuda=2 --shrink 6 --timeout 240" \
    bash "$here/device/h200_seed_systems.sh" "$1"
}
case "${1:-}" in
  launch)
    seed "${2:-720}" seed ""
    bg start gate --watch /tmp/gate-green -- env LIMIT=1100 bash "$here/loan/h200_gate.sh" green
    bg start red -- bash -c "while [ ! -f ${BG_ROOT:-/tmp/bg}/gate/rc ]; do sleep 5; done; LIMIT=300 bash '$here/loan/h200_gate.sh' red"
    bg start repros -- bash "$here/loan/h200_gate.sh" repros
    bg start decode --watch /tmp/seed-decode -- bash "$here/loan/h200_seed_decode.sh" 60 540 ;;
  resume-seed)
    seed "${2:-400}" seed2 1 ;;
  collect)
    bg collect "${2:-540}"
    nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader 2>/dev/null ;;
  *) echo "usage: bash lab/loan/h200_loan.sh launch [SEED_LIMIT_S] | collect LIMIT_S | resume-seed [LIMIT_S]" >&2; exit 2 ;;
esac
