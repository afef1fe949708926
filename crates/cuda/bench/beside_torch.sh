#!/usr/bin/env bash
# The ring rows that fail under contention (race_filters.sh), run by one ring_check at a time
# beside a torch process that keeps the GPU busy with bf16 matmuls (16384^2, each waited
# for): the GPU time-slices the two contexts. This brings the failures out faster than
# several ring_check processes at once (profiles/ring-grad-race.md), and with no other
# ring_check running, a variant's failures are its own. Variants run one after the other,
# each for SECONDS: a loop over the filters, again and again. Run from the repository root
# on a GPU machine with PyTorch:
#   bash crates/cuda/bench/beside_torch.sh OUTDIR SECONDS NAME=BINARY[,VAR=VALUE...] ...
# e.g. bash crates/cuda/bench/beside_torch.sh /tmp/bt 80 main=.gpu/ring_check \
#        mma=.gpu/ring_check,RINGDIL_KERNELS=mma patch=.gpu/ring_check,RINGDIL_CUDA_SOURCE=.gpu/kernels
# (kernel_variant.sh makes such a source directory from patches.) First, without the load,
# every variant runs each filter once, the variants at the same time, to fill the PTX cache
# (a cold variant spends about 100 s in NVRTC). OUTDIR/NAME.txt holds a variant's runs, each
# followed by `exit STATUS` (124: cut after RUN_LIMIT seconds, from the environment, default
# 60: a hang); OUTDIR/summary.txt counts its runs, PASS and FAIL rows, faults and hangs, with
# its distinct FAIL, error and probe (`PROBE`, bwd-probe.patch) lines.
set -u
[ $# -ge 3 ] || { sed -n 2,17p "$0"; exit 2; }
out=$1 limit=$2
shift 2
mkdir -p "$out"
# shellcheck source=race_filters.sh
. "$(dirname "$0")/race_filters.sh"
# run VARIANT LIMIT FILTER: the variant's binary (NAME=BINARY[,VAR=VALUE...]) with its
# environment on the rows of FILTER, cut after LIMIT seconds.
run() {
  local parts
  IFS=, read -r -a parts <<< "${1#*=}"
  env "${parts[@]:1}" timeout "$2" "${parts[0]}" --require-gpu --only "$3" --schedules ring
}
for v in "$@"; do
  (for f in "${filters[@]}"; do run "$v" 300 "$f" > /dev/null 2>&1; done) &
done
wait
run_limit=${RUN_LIMIT:-60}
# The load runs until the last variant is done (a variant that hangs takes longer than
# SECONDS); it reports its count when killed.
python3 -c "
import signal, sys, torch
a = torch.randn(16384, 16384, device='cuda', dtype=torch.bfloat16); b = a.clone(); n = 0
def done(*_):
    print('matmuls', n); sys.exit(0)
signal.signal(signal.SIGTERM, done)
while True:
    c = a @ b; torch.cuda.synchronize(); n += 1
" > "$out/torch.txt" 2>&1 &
torch=$!
sleep 5
: > "$out/summary.txt"
for v in "$@"; do
  name=${v%%=*} bin=${v#*=}
  bin=${bin%%,*}
  [ -x "$bin" ] || { echo "beside_torch: $bin: not an executable (variant $name)" >&2; continue; }
  : > "$out/$name.txt"
  start=$SECONDS runs=0
  while [ $((SECONDS - start)) -lt "$limit" ]; do
    for f in "${filters[@]}"; do
      run "$v" "$run_limit" "$f" >> "$out/$name.txt" 2>&1
      echo "exit $?" >> "$out/$name.txt"
      runs=$((runs + 1))
    done
  done
  {
    echo "$name: $runs runs ($((SECONDS - start)) s), PASS $(grep -c '^PASS' "$out/$name.txt"), FAIL $(grep -c '^FAIL' "$out/$name.txt"), faults $(grep -c 'LAUNCH_FAILED\|ILLEGAL_ADDRESS' "$out/$name.txt"), hangs $(grep -c '^exit 124' "$out/$name.txt")"
    grep -h '^FAIL\|rror\|panick\|^PROBE' "$out/$name.txt" | sort | uniq -c | sort -rn | head -40
  } >> "$out/summary.txt"
done
kill "$torch" 2> /dev/null
wait
cat "$out/torch.txt" >> "$out/summary.txt"
cat "$out/summary.txt"
