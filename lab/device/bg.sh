#!/usr/bin/env bash
# Detached jobs that outlive one device call, and a collector for a later call on the same warm
# machine (the device runs one command per call, at most 10 minutes, and returns only $OUT):
#   bash lab/device/bg.sh start NAME [--watch DIR] -- CMD ...   # run CMD detached (setsid), its own $OUT
#   bash lab/device/bg.sh collect LIMIT_S [NAME ...]            # wait until those are done (or LIMIT_S),
#                                                           # pack what they wrote into $OUT/NAME.tgz
#   bash lab/device/bg.sh status                                # one line per job
#   bash lab/device/bg.sh stop NAME                             # end a job and everything it started
# Each job lives in /tmp/bg/NAME ($BG_ROOT/NAME): cmd, pid, log (stdout + stderr), rc (once it ended), out/ (its $OUT),
# and watch (a folder it writes as it goes: collect tars it even while the job runs, so a machine
# lost between two calls loses at most what was written since the last collect).
set -u
root=${BG_ROOT:-/tmp/bg}
mkdir -p "$root"

start() {
  local name=$1; shift
  local watch=""
  if [ "${1:-}" = "--watch" ]; then watch=$2; shift 2; fi
  [ "${1:-}" = "--" ] && shift
  [ $# -gt 0 ] || { echo "bg.sh start $name: no command after --" >&2; exit 2; }
  local dir=$root/$name
  [ -d "$dir" ] && [ ! -f "$dir/rc" ] && { echo "bg.sh: $name is still running" >&2; exit 2; }
  rm -rf "$dir"; mkdir -p "$dir/out"
  printf '%q ' "$@" > "$dir/cmd"; echo "$watch" > "$dir/watch"; date +%s > "$dir/t0"
  OUT=$dir/out setsid bash -c '"$@" > "$0/log" 2>&1; echo $? > "$0/rc"' "$dir" "$@" < /dev/null > /dev/null 2>&1 &
  echo $! > "$dir/pid"
  echo "bg $name: started (pid $!): $(cat "$dir/cmd")"
}

line() {  # one job's state in one line
  local dir=$root/$1 now; now=$(date +%s)
  local t0; t0=$(cat "$dir/t0" 2>/dev/null || echo "$now")
  if [ -f "$dir/rc" ]; then
    printf '%-14s done rc=%-3s %5ss  %s\n' "$1" "$(cat "$dir/rc")" "$(( $(stat -c %Y "$dir/rc") - t0 ))" \
      "$(grep -v '^\s*$' "$dir/log" | tail -n 1 | cut -c1-120)"
  else
    printf '%-14s running   %5ss  %s\n' "$1" "$(( now - t0 ))" "$(grep -v '^\s*$' "$dir/log" | tail -n 1 | cut -c1-120)"
  fi
}

names() { if [ $# -gt 0 ]; then echo "$@"; else ls "$root"; fi; }

collect() {
  local limit=$1; shift
  local end=$(( $(date +%s) + limit )) n
  local want; want=$(names "$@")
  while [ "$(date +%s)" -lt "$end" ]; do
    local left=0
    for n in $want; do [ -f "$root/$n/rc" ] || left=$((left + 1)); done
    [ "$left" -eq 0 ] && break
    sleep 5
  done
  for n in $want; do  # one tarball per job: the device returns at most 8 files of 16 MiB
    local dir=$root/$n watch; watch=$(cat "$dir/watch" 2>/dev/null)
    local items=(log cmd out); [ -f "$dir/rc" ] && items+=(rc)
    if [ -n "$watch" ] && [ -d "$watch" ]; then
      tar czf "$dir/watch.tgz" -C "$(dirname "$watch")" "$(basename "$watch")" 2>/dev/null && items+=(watch.tgz)
    fi
    tar czf "${OUT:-/tmp/out}/$n.tgz" -C "$dir" "${items[@]}"
    local mb=$(( $(stat -c %s "${OUT:-/tmp/out}/$n.tgz") / 1048576 ))
    [ "$mb" -lt 16 ] || echo "bg.sh: $n.tgz is $mb MiB, over the 16 MiB a returned file may have" >&2
  done
  for n in $want; do line "$n"; done
}

case "${1:-}" in
  start) shift; start "$@" ;;
  collect) shift; collect "$@" ;;
  status) for n in $(names); do line "$n"; done ;;
  stop)  # the wrapper that writes rc dies with the group: write it here (143, as for SIGTERM)
    kill -- -"$(cat "$root/$2/pid")" 2>/dev/null; sleep 1; [ -f "$root/$2/rc" ] || echo 143 > "$root/$2/rc"; line "$2" ;;
  *) echo "usage: bash lab/device/bg.sh start NAME [--watch DIR] -- CMD ... | collect LIMIT_S [NAME ...] | status | stop NAME" >&2; exit 2 ;;
esac
