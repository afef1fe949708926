#!/usr/bin/env bash
# A kernel-source variant for RINGDIL_CUDA_SOURCE: a copy of crates/cuda/kernels with the
# kernel part of each PATCH applied (other files a patch touches, such as docs, are left
# out), in DIR. A binary built from main then compiles its kernels from DIR, so variants
# need no Rust build of their own. Run from the repository root, with crates/cuda/kernels
# unmodified (the patches are applied there, copied, and undone):
#   bash crates/cuda/bench/kernel_variant.sh DIR PATCH...
# e.g. bash crates/cuda/bench/kernel_variant.sh .gpu/k_probe docs/benchmarks/profiles/bwd-probe.patch
set -eu
[ $# -ge 2 ] || { sed -n 2,8p "$0"; exit 2; }
dir=$1
shift
kernels=crates/cuda/kernels
git diff --quiet -- "$kernels" || { echo "kernel_variant: $kernels has changes; commit or stash them" >&2; exit 1; }
trap 'git checkout -q -- "$kernels"' EXIT
for patch in "$@"; do git apply --include="$kernels/*" "$patch"; done
rm -rf "$dir"
mkdir -p "$(dirname "$dir")"
cp -r "$kernels" "$dir"
git diff --stat -- "$kernels"
