#!/usr/bin/env bash
# compute-sanitizer over ring_check cases on virtual ranks: names the kernel, the access and,
# with the modules compiled with line info, the kernel source line of a bad memory access.
# Run from the repository root on a GPU machine whose runtime lets the sanitizer in
# (/work/.library/device/KINDS.md):
#   bash crates/cuda/bench/memcheck_ring.sh LOGDIR FILTER NAME=BINARY ...
# e.g. bash crates/cuda/bench/memcheck_ring.sh /tmp/mc "P=4 zigzag | dilated_expr: offsets" \
#        main=.gpu/ring_check patch=.gpu/ring_check_counters
# FILTER is ring_check's --only (the log's case column); SCHEDULES (default: ring) its
# --schedules; TOOL (default: memcheck) the sanitizer's tool (racecheck, initcheck,
# synccheck); SANITIZER_ARGS more sanitizer options (e.g. --padding 4096, which puts a
# guard region after each allocation so that an access past a buffer's end is caught even
# where another buffer would follow); LIMIT (default 600) seconds per variant. Each variant
# runs alone, one after the other (the sanitizer slows kernels many times), with NVRTC's
# line info (RINGDIL_CUDA_DEFINES=-lineinfo: PTX cache entries of their own); its report
# goes to LOGDIR/NAME.txt, its exit status to LOGDIR/summary.txt.
set -u
[ $# -ge 3 ] || { sed -n 2,16p "$0"; exit 2; }
out=$1 filter=$2
shift 2
mkdir -p "$out"
sum="$out/summary.txt"
: > "$sum"
tool=${TOOL:-memcheck}
for v in "$@"; do
  name=${v%%=*} bin=${v#*=}
  [ -x "$bin" ] || { echo "memcheck_ring: $bin: not an executable (variant $name)" >&2; exit 2; }
  start=$SECONDS
  # shellcheck disable=SC2086 # SANITIZER_ARGS is a list of options
  RINGDIL_CUDA_DEFINES=-lineinfo timeout "${LIMIT:-600}" compute-sanitizer --tool "$tool" --print-limit 20 \
    --error-exitcode 9 ${SANITIZER_ARGS:-} "$bin" --require-gpu --only "$filter" --schedules "${SCHEDULES:-ring}" > "$out/$name.txt" 2>&1
  status=$?
  echo "$name: exit $status ($tool, $((SECONDS - start)) s; 9: the sanitizer found errors; 124: cut at LIMIT)" | tee -a "$sum"
done
