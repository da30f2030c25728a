# Sourced by the H200 scripts (h200_sweep.sh, h200_gate.sh): where lab/device/install.sh (or the older
# stage scripts) put flash-attn-4 and xformers, each backend's worker path, xformers' opt-in shim.
FA4=/tmp/site-fa4:/tmp/site-fa4/nvidia_cutlass_dsl/dsl_packages
XF=/tmp/site-xformers
export PYTHONUNBUFFERED=1
# explicit opt-in: run xformers' -pt operators although its C++ extension does not load on this torch
export PARITY_XFORMERS_SHIM=1 PARITY_SHIMS=xformers_built_with_cuda_forced
export PARITY_WORKER_PATH="fa4-cuda=$FA4 fa4-varlen-cuda=$FA4 xformers-cutlass-cuda=$XF xformers-flash-cuda=$XF"
# vLLM's own FA2/FA3 build where lab/device/install.sh staged it: the gate must reach vllm-fa2's window
# clamp (the seed's own system; its quick-profile cases are in parity.strategies.edge_cases). FlashInfer
# joins only with GATE_FLASHINFER=1: it JIT-builds each kernel configuration (~18 s each, not cached yet)
VF=/tmp/site-vllm-fa FI=/tmp/site-flashinfer
[ -d "$VF" ] && PARITY_WORKER_PATH="$PARITY_WORKER_PATH vllm-fa2-cuda=$VF vllm-fa3-cuda=$VF"
[ -d "$FI" ] && [ "${GATE_FLASHINFER:-0}" = 1 ] && \
  PARITY_WORKER_PATH="$PARITY_WORKER_PATH flashinfer-cuda=$FI flashinfer-paged-cuda=$FI flashinfer-decode-cuda=$FI"
export PARITY_WORKER_PATH
