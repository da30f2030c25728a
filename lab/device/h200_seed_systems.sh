#!/usr/bin/env bash
# The final device call for the seed's own systems (vLLM's flash-attn FA2 / FA3, FlashInfer), after
# `bash lab/device/install.sh` in the same call. Usage: bash lab/device/h200_seed_systems.sh [TIME_LIMIT_S]
#   1. what the staged folders hold: imports, FA2 / FA3 availability, nvcc, `parity backends`;
#   2. `parity run` of the three backends (or $SEED_BACKENDS, comma-separated, e.g. adding
#      flashinfer-paged-cuda,flashinfer-decode-cuda), default profile, $SEED_JOBS lanes (default 3;
#      $SEED_ARGS adds options, e.g. --split flashinfer-cuda=2), stopping new rows after
#      TIME_LIMIT_S (default 300), each backend with its own --worker-path (from install.sh);
#      SEED_RESUME=1 resumes the sweep an earlier call left partial on the same warm machine;
#   3. everything under /tmp/seedrun, tarred to $OUT/seedrun.tgz; a short table printed last.
# Exit status: that of `parity run` (1 also when a backend was unavailable).
set -uo pipefail
limit=${1:-300}
out=${OUT:-/tmp/out}
run=/tmp/seedrun
mkdir -p "$run" "$out"
wp=/tmp/parity-stage/worker-paths.txt
[ -f "$wp" ] || { echo "h200_seed_systems: $wp is missing: run bash lab/device/install.sh first" >&2; exit 3; }
args=()
while read -r line; do [ -n "$line" ] && args+=(--worker-path "$line"); done < "$wp"
paths=/tmp/site-vllm-fa:/tmp/site-flashinfer  # the seed systems' folders (fa4 and xformers cannot share a path)

{
  echo "== $(date -u '+%F %T') UTC  $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null)"
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
  echo "nvcc: $(command -v nvcc || echo none on PATH)  CUDA_HOME=${CUDA_HOME:-unset}  g++: $(command -v g++ || echo none)"
  echo "== worker paths"; cat "$wp"
  echo "== vllm_flash_attn"
  PYTHONPATH=/tmp/site-vllm-fa python3 - <<'EOF'
import torch  # noqa: F401  the extensions link libtorch by soname
import sys
try:
    import vllm
    print("vllm", vllm.__version__, "stub" if getattr(vllm, "_parity_stub", False) else "full")
    import vllm.vllm_flash_attn  # noqa: F401
except Exception as exc:  # noqa: BLE001
    print("vllm_flash_attn import failed:", type(exc).__name__, exc)
f = sys.modules.get("vllm.vllm_flash_attn.flash_attn_interface")  # loaded before __init__ raises
if f is not None:
    print("FA2", f.FA2_AVAILABLE, f.FA2_UNAVAILABLE_REASON)
    print("FA3", f.FA3_AVAILABLE, f.FA3_UNAVAILABLE_REASON)
EOF
  echo "== flashinfer"
  PYTHONPATH=/tmp/site-flashinfer python3 -c 'import flashinfer, flashinfer.jit.env as e; print("flashinfer", flashinfer.__version__, "cubin dir", e.FLASHINFER_CUBIN_DIR, "jit-cache", e.has_flashinfer_jit_cache())' 2>&1 | tail -3
  echo "== parity backends (staged folders on PYTHONPATH)"
  PYTHONPATH="$paths" python3 -m parity backends 2>&1
} 2>&1 | tee "$run/probe.txt"

# a hard stop well inside the call's 10 minutes, so the tarball is still written
timeout -s INT -k 15 "$((limit + 150))" python3 -m parity run --backend "${SEED_BACKENDS:-vllm-fa2-cuda,vllm-fa3-cuda,flashinfer-cuda}" --profile default --jobs "${SEED_JOBS:-3}" \
  --time-limit "$limit" --timeout 120 --shrink 12 "${args[@]}" ${SEED_ARGS:-} ${SEED_RESUME:+--resume} --out "$run/sweep" \
  >> "$run/run.log" 2>&1
rc=$?
tail -n 25 "$run/run.log"
tar -czf "$out/seedrun.tgz" -C /tmp seedrun
echo "== parity run exit $rc; $out/seedrun.tgz ($(du -h "$out/seedrun.tgz" | cut -f1))"
python3 - "$run/sweep/results.csv" <<'EOF'
import collections, csv, sys
try:
    rows = list(csv.DictReader(open(sys.argv[1], newline="")))
except OSError as exc:
    sys.exit(f"no results: {exc}")
count = collections.defaultdict(collections.Counter)
for r in rows:
    count[r["backend"]][r["verdict"]] += 1
cols = ["pass", "fail", "expected", "unexpected-pass", "error", "crash", "timeout", "unsupported", "unavailable"]
print(f"{'backend':24s} " + " ".join(f"{c:>11s}" for c in cols))
for b, c in sorted(count.items()):
    print(f"{b:24s} " + " ".join(f"{c.get(k, 0):11d}" for k in cols))
firsts = {}
for r in rows:
    if r["verdict"] in ("fail", "unexpected-pass", "error", "crash", "timeout") and r["backend"] not in firsts:
        firsts[r["backend"]] = r
for b, r in firsts.items():
    print(f"first {r['verdict']} {b}: {r['case_json'][:160]} | {r['reasons'] or r['detail'][:200]}")
EOF
exit $rc
