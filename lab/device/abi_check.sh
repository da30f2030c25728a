#!/usr/bin/env bash
# Here (network): can a vLLM wheel's FlashAttention extensions load on the device's torch, which is older than the
# torch the wheel's METADATA pins? Lists each extension's NEEDED libraries and the symbols it imports that none of
# torch's libraries define. No missing symbol is necessary, not sufficient: the GPU run says the rest.
#   bash lab/device/abi_check.sh [VLLM_VERSION] [TORCH_VERSION]   (default 0.33.0 against 2.11.0, the device's torch)
set -euo pipefail
vllm=${1:-0.33.0} torch=${2:-2.11.0}
cache=${PARITY_WHEEL_CACHE:-/tmp/parity-wheels} work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
get() {  # SPEC -> the downloaded wheel's path
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux_2_28_x86_64 -d "$cache" "$1" >&2
  ls "$cache"/"$(echo "${1%%==*}" | tr - _)"-"${1##*==}"-*.whl | head -n 1
}
vw=$(get "vllm==$vllm") tw=$(get "torch==$torch")
unzip -q -o "$vw" 'vllm/vllm_flash_attn/*.so' -d "$work/v"
unzip -q -o "$tw" 'torch/lib/*' -d "$work/t"
echo "vLLM $vllm pins: $(unzip -p "$vw" "vllm-$vllm.dist-info/METADATA" | grep '^Requires-Dist: torch==' | cut -d' ' -f2)"
for l in libtorch.so libtorch_cpu.so libtorch_cuda.so libc10.so libc10_cuda.so; do
  nm -D --defined-only "$work/t/torch/lib/$l" 2>/dev/null | awk '{print $3}'
done | sort -u > "$work/defined"
for so in "$work"/v/vllm/vllm_flash_attn/*.so; do
  nm -D --undefined-only "$so" | awk '{print $2}' | sort -u > "$work/undefined"
  # what the C library, the C++ runtime, CUDA and Python define, torch does not have to
  comm -23 "$work/undefined" "$work/defined" \
    | grep -v -E '@(GLIBC|CXXABI|GLIBCXX|GCC)|@libcudart|^(cuda|cu[A-Z]|_ITM|__gmon|__cxa|_Unwind|Py|__pthread|pthread_)' > "$work/missing" || true
  echo "$(basename "$so") ($(du -m "$so" | cut -f1) MB): needs $(readelf -d "$so" | grep NEEDED | grep -o '\[.*\]' | tr -d '[]' | paste -sd' ');" \
    "$(wc -l < "$work/undefined") imported symbols, $(wc -l < "$work/missing") not defined by torch $torch"
  head -n 5 "$work/missing" | cut -c1-160 | sed 's/^/  missing: /'
done
