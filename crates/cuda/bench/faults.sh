#!/usr/bin/env bash
# The several-host path and stall detection on a machine with 2 or more GPUs (the logs
# docs/benchmarks/ring-check-2nodes*.md and ring-stall-*.md). Run from the repository root:
#   RING_CHECK=target/release/ring_check G0=0 G1=1 bash crates/cuda/bench/faults.sh LOGDIR
# (RING_CHECK defaults to .gpu/ring_check, G0 / G1 to GPUs 0 and 1); every step writes its
# output under LOGDIR.
#   (a) two "nodes" of one GPU each (--nnodes 2 --node-rank 0/1), id through a file
#   (b) the same with NCCL_COMM_ID=127.0.0.1:29551 exported (no id file)
#   (c) stall check, one process per GPU: rank 1 sleeps 600 s, watchdog timeout 20 s
#   (d) the same with the ranks as threads of one process
# Each step's exit status is appended to its file and to $1/summary.txt. About 2-3 min.
set -u
out=${1:?usage: crates/cuda/bench/faults.sh LOGDIR}
mkdir -p "$out"
bin=$(realpath "${RING_CHECK:-.gpu/ring_check}")
G0=${G0:-0}; G1=${G1:-1}
sum="$out/summary.txt"
: > "$sum"
date -u +%Y-%m-%dT%H:%MZ > "$out/date.txt"
nvidia-smi -L > "$out/devices.txt" 2>&1
day=$(date -u +%Y-%m-%d)

step() { # name status
  echo "$1: exit $2" >> "$sum"
  echo "$1: exit $2"
}

# (a) two nodes, shared id file
id=$(mktemp -u /tmp/ringdil-id-XXXXXX)
( CUDA_VISIBLE_DEVICES=$G0 timeout 240 "$bin" --nproc 1 --nnodes 2 --node-rank 0 --id-file "$id" \
    --seed 7 --date "$day" --log "$out/a-two-nodes-file.md" > "$out/a-node0.txt" 2>&1
  echo "exit $?" >> "$out/a-node0.txt" ) &
CUDA_VISIBLE_DEVICES=$G1 timeout 240 "$bin" --nproc 1 --nnodes 2 --node-rank 1 --id-file "$id" \
    --seed 7 > "$out/a-node1.txt" 2>&1
echo "exit $?" >> "$out/a-node1.txt"
wait
step "a node0" "$(tail -1 "$out/a-node0.txt" | cut -d' ' -f2)"
step "a node1" "$(tail -1 "$out/a-node1.txt" | cut -d' ' -f2)"
rm -rf "$id" "$id.progress"

# (b) two nodes, NCCL_COMM_ID (rank 0's address) instead of an id file
export NCCL_COMM_ID=127.0.0.1:29551
( CUDA_VISIBLE_DEVICES=$G0 timeout 240 "$bin" --nproc 1 --nnodes 2 --node-rank 0 \
    --seed 7 --date "$day" --log "$out/b-two-nodes-env.md" > "$out/b-node0.txt" 2>&1
  echo "exit $?" >> "$out/b-node0.txt" ) &
CUDA_VISIBLE_DEVICES=$G1 timeout 240 "$bin" --nproc 1 --nnodes 2 --node-rank 1 --seed 7 > "$out/b-node1.txt" 2>&1
echo "exit $?" >> "$out/b-node1.txt"
wait
unset NCCL_COMM_ID
step "b node0" "$(tail -1 "$out/b-node0.txt" | cut -d' ' -f2)"
step "b node1" "$(tail -1 "$out/b-node1.txt" | cut -d' ' -f2)"

# (c), (d) stall: rank 1 sleeps 600 s, the watchdog's timeout is 20 s
stall() { # letter mode (nproc or threads)
  local start s
  start=$(date +%s)
  CUDA_VISIBLE_DEVICES=$G0,$G1 timeout 120 "$bin" "--$2" 2 --stall 1:600 --timeout 20 --date "$day" \
      --log "$out/$1-stall-$2.md" > "$out/$1-stall-$2.txt" 2>&1
  s=$?
  echo "exit $s after $(( $(date +%s) - start )) s" >> "$out/$1-stall-$2.txt"
  step "$1 stall --$2 2" "$s"
}
stall c nproc     # one process per GPU
stall d threads   # threads of one process
nvidia-smi --query-compute-apps=pid,process_name --format=csv > "$out/leftover-processes.txt" 2>&1
cat "$sum"
