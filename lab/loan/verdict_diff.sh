#!/usr/bin/env bash
# Issue 31's "no verdict changes": the code before the throughput work against this checkout, on the same cases,
# then `parity diff` of the two runs (exit 1 on any regression).
#   bash lab/loan/verdict_diff.sh stage [REV]        # here: .stage/old-REV/ = `git archive REV` (carry it to the device)
#   [CASES=N] bash lab/loan/verdict_diff.sh run OUT BACKENDS [PROFILE] [-- RUN ARGS]
#       # both runs on the OLD code's case list of PROFILE (default: default), so both can read every case;
#       # writes OUT/old, OUT/new (each a run folder) and OUT/new/diff.md; prints the diff's verdict line last
# REV defaults to 6ac94c6, main when issue 31 measured the H200 (its timing.json is in ../shared/h200-2026-12-05/).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
rev=${VERDICT_DIFF_REV:-6ac94c6}

case "${1:-}" in
  stage)
    rev=${2:-$rev}
    dest="$root/.stage/old-$rev"
    rm -rf "$dest"; mkdir -p "$dest"
    git -C "$root" archive "$rev" parity pyproject.toml | tar -x -C "$dest"
    echo "verdict_diff: $dest ($(du -sh "$dest" | cut -f1)); carry .stage/old-$rev" ;;
  run)
    out=$2 backends=$3 profile=${4:-default}
    shift 3; [ $# -gt 0 ] && [ "$1" != "--" ] && shift
    [ "${1:-}" = "--" ] && shift
    old="$root/.stage/old-$rev"
    [ -d "$old/parity" ] || { echo "verdict_diff: $old missing: run 'bash lab/loan/verdict_diff.sh stage' here first" >&2; exit 2; }
    mkdir -p "$out"
    (cd "$old" && PYTHONPATH="$old" python3 -m parity run --profile "$profile" --backend "$backends" --list-cases) \
      | grep '^{' > "$out/all-cases.jsonl"
    # CASES=N: N cases evenly spaced over the list (both runs whole on them: a --time-limit would cut the two runs
    # at different rows, which the diff counts as coverage lost)
    awk -v n="${CASES:-0}" -v t="$(wc -l < "$out/all-cases.jsonl")" \
      'n <= 0 || n >= t || int((NR - 1) * n / t) != int((NR - 2) * n / t) || NR == 1' "$out/all-cases.jsonl" > "$out/cases.jsonl"
    echo "verdict_diff: $(wc -l < "$out/cases.jsonl") cases of the old code's $profile profile x $backends"
    for side in old new; do
      src=$root; [ "$side" = old ] && src=$old
      t0=$(date +%s)
      (cd "$src" && PYTHONPATH="$src" python3 -m parity run --backend "$backends" --case-file "$out/cases.jsonl" \
        --shrink 0 -q --out "$out/$side" "$@" > "$out/$side.log" 2>&1) || true  # 1 / 3: failing rows / partial
      echo "verdict_diff: $side ($src) $(( $(date +%s) - t0 )) s: $(grep -c . "$out/$side/results.csv") lines"
    done
    (cd "$root" && python3 -m parity diff "$out/old" "$out/new") 2>&1 | tail -n 3 ;;
  *) echo "usage: bash lab/loan/verdict_diff.sh stage [REV] | run OUT BACKENDS [PROFILE] [-- RUN ARGS]" >&2; exit 2 ;;
esac
