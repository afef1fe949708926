#!/usr/bin/env bash
# ring_check rows that have failed only under load (profiles/ring-grad-race.md), repeated by
# several processes at once on one GPU, for binaries side by side. Each variant runs COPIES
# loops; a loop runs ring_check on each filter of FILTERS in turn, again and again, until
# SECONDS have passed. LOAD processes of the first variant's binary run the broad filter
# LOAD_FILTER (default: offsets) meanwhile, to keep the GPU busy the way the failing runs had
# it. Run from the repository root on a GPU machine:
#   bash crates/cuda/bench/race_ring.sh OUTDIR SECONDS NAME=BINARY:COPIES ...
# e.g. bash crates/cuda/bench/race_ring.sh /tmp/race 300 fence=.gpu/ring_check_fence:4 main=.gpu/ring_check:2
# Every ring_check run's output goes to OUTDIR/NAME-COPY-RUN-FILTERNO.txt; OUTDIR/summary.txt
# counts, per variant, the runs of each filter (started, and finished before the time limit)
# and the rows passed and failed (PASS and FAIL lines), with every FAIL and error line.
set -u
[ $# -ge 3 ] || { sed -n 2,12p "$0"; exit 2; }
out=$1 limit=$2
shift 2
mkdir -p "$out"
# shellcheck source=race_filters.sh
. "$(dirname "$0")/race_filters.sh"
end=$((SECONDS + limit))
loop() {  # NAME BINARY COPY
  local run=0
  while [ $SECONDS -lt $end ]; do
    for f in "${!filters[@]}"; do
      local left=$((end - SECONDS))
      [ $left -gt 0 ] || break
      timeout "$left" "$2" --require-gpu --only "${filters[$f]}" --schedules ring \
        > "$out/$1-$3-$run-$f.txt" 2>&1
      echo "exit $?" >> "$out/$1-$3-$run-$f.txt"
    done
    run=$((run + 1))
  done
}
first=
for v in "$@"; do
  name=${v%%=*} rest=${v#*=}
  bin=${rest%:*} copies=${rest##*:}
  [ -x "$bin" ] || { echo "race_ring: $bin: not an executable (variant $name)" >&2; exit 2; }
  first=${first:-$bin}
  for c in $(seq 1 "$copies"); do loop "$name" "$bin" "$c" & done
done
for l in $(seq 1 "${LOAD:-4}"); do
  timeout "$limit" "$first" --require-gpu --only "${LOAD_FILTER:-offsets}" --schedules ring > "$out/load-$l.txt" 2>&1 &
done
wait
{
  for v in "$@"; do
    name=${v%%=*}
    for f in "${!filters[@]}"; do
      files=$(ls "$out/$name"-*-"$f".txt 2>/dev/null)
      [ -n "$files" ] || continue
      # shellcheck disable=SC2086 # one word per file
      done_runs=$(grep -l "^ring check:" $files | wc -l)
      # shellcheck disable=SC2086
      passed=$(cat $files | grep -c "^PASS")
      # shellcheck disable=SC2086
      failed=$(cat $files | grep -c "^FAIL")
      echo "$name | ${filters[$f]} | runs $(echo "$files" | wc -l), finished $done_runs | rows passed $passed, failed $failed"
      # shellcheck disable=SC2086
      grep -h "^FAIL" $files
      # shellcheck disable=SC2086
      grep -h "rror\|panick" $files | grep -v "^FAIL" | sort | uniq -c
    done
  done
  for l in $(seq 1 "${LOAD:-4}"); do
    echo "load-$l: $(grep -c '^PASS' "$out/load-$l.txt") PASS, $(grep -c '^FAIL' "$out/load-$l.txt") FAIL, $(tail -n 1 "$out/load-$l.txt")"
    grep -h "FAIL\|rror\|panick" "$out/load-$l.txt"
  done
} > "$out/summary.txt"
cat "$out/summary.txt"
