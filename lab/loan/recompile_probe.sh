#!/usr/bin/env bash
# Issue 47: why flex and JAX built more kernels than compile keys (lab/runs/h200-2026-12-06d-coldwarm: flex 224 graphs
# for 119 keys). Nothing staged. lab/loan/compile_probe.py (one process, no lanes, the default profile in order):
#   1 cold   flex-cuda and jax-xla-cuda on a fresh cache A        (a key too coarse: built on a key met before)
#   2 warm   the same on cache A, in a new process                (the disk cache across processes: hits, not misses)
#   3 legacy flex-cuda on a fresh cache B as before 22:30 UTC 2026-12-06 (duck shaping, 128-row buckets), to compare
#   [LEGACY=0] bash lab/loan/recompile_probe.sh [FLEX_S] [JAX_S]   (JAX_S 0: flex only; LEGACY=0: no third run)  -> $OUT/recompile.tgz, a short table last
set -u
here=$(cd "$(dirname "$0")/../.." && pwd)
w=/tmp/rcp; rm -rf "$w"; mkdir -p "$w"; fs=${1:-110}; js=${2:-45}; be=flex-cuda,jax-xla-cuda
[ "$js" = 0 ] && be=flex-cuda  # JAX_S 0: flex only
export TORCH_LOGS=recompiles JAX_EXPLAIN_CACHE_MISSES=1 PYTHONUNBUFFERED=1 PYTHONPATH="$here"
p() { local n=$1; shift; t0=$(date +%s); timeout 280 python3 "$here/lab/loan/compile_probe.py" "$w/$n.jsonl" "$@" \
  > "$w/$n.sum" 2> "$w/$n.log"; echo "$n rc=$? $(( $(date +%s) - t0 )) s"; }
p cold --cache "$w/A" --backend "$be" --seconds "$fs,$js"
p warm --cache "$w/A" --backend "$be" --seconds "$(( fs / 2 )),$(( js / 2 ))"
[ "${LEGACY:-1}" = 1 ] && p legacy --cache "$w/B" --backend flex-cuda --seconds "$fs" --legacy
for n in cold warm legacy; do  # the recompile reasons, numbers stripped, against the newest entry of each
  grep -A2 "triggered by the following guard" "$w/$n.log" | grep -o -- "- [0-9]*/[0-9]*: .*" | sed 's/^- [0-9/]*: //; s/[0-9]\+/N/g' \
    | cut -c1-180 | sort | uniq -c | sort -rn > "$w/$n.reasons"
done
tar czf "$OUT/recompile.tgz" -C /tmp --exclude=A --exclude=B rcp
python3 - "$w" <<'PY'
import json, sys, collections
w = sys.argv[1]
for n in ("cold", "warm", "legacy"):
    try:
        rows = [json.loads(l) for l in open(f"{w}/{n}.jsonl")]
    except OSError:
        continue
    for s in open(f"{w}/{n}.sum"):
        print(n, s.strip()[:300])
    extra = [r for r in rows if r.get("seen") and r.get("built")]
    diffs = collections.Counter((r["backend"], r["b"], min(r["q"]) == 1, r["page"] is not None) for r in extra)
    print(n, "built on a seen key (backend, batch, decode, paged):", dict(diffs.most_common(8)))
    errs = collections.Counter((r["backend"], r["error"][:90]) for r in rows if r.get("error"))
    for (b, e), c in errs.most_common(4):
        print(n, "error", c, b, e)
    print(open(f"{w}/{n}.reasons").read()[:900])
PY
