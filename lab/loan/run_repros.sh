#!/usr/bin/env bash
# Runs every script of SCRIPTS_DIR/index.tsv (written by `python -m parity export-repro --known --out
# SCRIPTS_DIR`) and its control on a GPU, each in its own process, with the package folders
# flash-attn-4, xformers, FlashInfer and vLLM need (FA4=, XF=, FI=, VF= override the defaults of the
# staging in lab/device/); writes results.tsv into RESULTS_DIR (default SCRIPTS_DIR) and prints it. Its outcome column:
# shown (script exit 1, control 0), NOT-SHOWN (script 0), cannot-run (exit 2, or an older script's exit 1
# from a missing package or GPU), timeout, and CONTROL-DIFFERS / control-cannot-run beside shown.
#   python -m parity export-repro --known --runs lab/runs --out /tmp/repro-scripts
#   bash lab/loan/run_repros.sh /tmp/repro-scripts [RESULTS_DIR]
set -u
[ -f "${1:-}/index.tsv" ] || { echo "usage: bash lab/loan/run_repros.sh SCRIPTS_DIR [RESULTS_DIR] (SCRIPTS_DIR/index.tsv from parity export-repro --known)" >&2; exit 2; }
here=$(cd "$1" && pwd); dest=${2:-$here}; mkdir -p "$dest"
FA4=${FA4:-/tmp/site-fa4:/tmp/site-fa4/nvidia_cutlass_dsl/dsl_packages}; XF=${XF:-/tmp/site-xformers}
FI=${FI:-/tmp/site-flashinfer}; VF=${VF:-/tmp/site-vllm-fa}
path_for() { case "$1" in fa4-*) echo "$FA4" ;; xformers-*) echo "$XF" ;; flashinfer-*) echo "$FI" ;; vllm-*) echo "$VF" ;; *) echo "" ;; esac; }
run() {  # backend script -> "exit status<TAB>last line"
  local p; p=$(path_for "$1")
  PYTHONPATH=$p timeout 300 python3 "$here/$2" > "$dest/${2%.py}.log" 2>&1; local rc=$?
  printf '%s\t%s' "$rc" "$(grep -v '^\s*$' "$dest/${2%.py}.log" | tail -n 1 | cut -c1-160)"
}
outcome() {  # script exit, control exit, script log, control log -> one word for the table
  local cant='CANNOT RUN|ModuleNotFoundError|ImportError|Torch not compiled with CUDA|No CUDA GPUs'
  if [ "$1" = 2 ] || { [ "$1" = 1 ] && grep -qE "$cant" "$3"; }; then echo "cannot-run"; return; fi
  if [ "$1" = 124 ]; then echo "timeout"; return; fi
  if [ "$1" = 0 ]; then echo "NOT-SHOWN"; return; fi  # the divergence did not reproduce
  if [ "$2" = - ]; then echo "shown"; return; fi
  if [ "$2" = 2 ] || { [ "$2" = 1 ] && grep -qE "$cant" "$4"; }; then echo "shown,control-cannot-run"; return; fi
  if [ "$2" = 0 ]; then echo "shown"; else echo "shown,CONTROL-DIFFERS"; fi
}
printf 'entry\tscript\texit\tlast line\tcontrol\texit\tlast line\toutcome\n' > "$dest/results.tsv"
n=0
while IFS=$'\t' read -r entry backend script control; do
  n=$((n + 1))
  while [ "$(jobs -rp | wc -l)" -ge "${JOBS:-4}" ]; do sleep 1; done  # a few at once: one GPU holds them all
  (
    a=$(run "$backend" "$script")
    cb=${control%%_*}; b="-	-"; [ "$control" != "-" ] && b=$(run "$cb" "$control")
    o=$(outcome "${a%%	*}" "${b%%	*}" "$dest/${script%.py}.log" "$dest/${control%.py}.log")
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$entry" "$script" "$a" "$control" "$b" "$o" > "$dest/row.$(printf %03d "$n")"
  ) &
done < <(tail -n +2 "$here/index.tsv")
wait
cat "$dest"/row.* >> "$dest/results.tsv" && rm -f "$dest"/row.*
if command -v column > /dev/null; then cut -f1,3,6,8 "$dest/results.tsv" | column -t; else cut -f1,3,6,8 "$dest/results.tsv"; fi
