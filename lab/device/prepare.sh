#!/usr/bin/env bash
# Here, in the checkout that will make the device calls (network needed): download the groups'
# wheels, pack them, split them over .stage/p00, .stage/p01, ... (<= 44 MiB each, git-ignored),
# and print the device calls. Groups: vllm-fa2 vllm-fa3 flashinfer fa4 xformers nvcc, aliases
# vllm-fa (both FA builds) and all; default: vllm-fa2 vllm-fa3 flashinfer. See lab/device/README.md.
set -euo pipefail
exec python3 "$(dirname "${BASH_SOURCE[0]}")/stage.py" prepare "$@"
