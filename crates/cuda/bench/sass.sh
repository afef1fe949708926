#!/usr/bin/env bash
# The SASS (machine code) of one kernel, on a machine without a GPU or a CUDA toolkit: the
# module's PTX from NVRTC (`kernel_report ptx`), assembled by ptxas and disassembled by
# cuobjdump (which runs nvdisasm), from NVIDIA's PyPI wheels (installed once under
# target/cuda-tools). For counting what a kernel change adds or removes per loop (selects,
# address arithmetic, shared-memory stores) before spending GPU time on it. Run from the
# repository root:
#   bash crates/cuda/bench/sass.sh MODULE KERNEL [OUT_DIR]
# e.g. bash crates/cuda/bench/sass.sh sm_90a_Bf16_d128 attn_bwd /tmp/sass
# MODULE is a module name of `kernel_report ptx` (ARCH_VARIANT); RINGDIL_CUDA_SOURCE=DIR
# compiles DIR's kernel files instead of the built-in ones. Writes OUT_DIR/MODULE.ptx,
# .cubin and OUT_DIR/MODULE.KERNEL.sass, and prints the kernel's instruction count.
set -euo pipefail
[ $# -ge 2 ] || { sed -n 2,12p "$0"; exit 2; }
module=$1 kernel=$2 out=${3:-target/sass}
tools=$PWD/target/cuda-tools
bin=$tools/nvidia/cu13/bin
if [ ! -x "$bin/ptxas" ] || [ ! -x "$bin/cuobjdump" ] || [ ! -x "$bin/nvdisasm" ]; then
  python3 -m pip install --quiet --disable-pip-version-check --root-user-action ignore --target "$tools" \
    'nvidia-cuda-nvcc>=13,<14' 'nvidia-cuda-cuobjdump>=13,<14' 'nvidia-cuda-nvdisasm>=13,<14'
fi
nvrtc=$PWD/target/nvrtc
[ -e "$nvrtc/nvidia/cu13/lib/libnvrtc.so.13" ] ||
  python3 -m pip install --quiet --disable-pip-version-check --root-user-action ignore --target "$nvrtc" 'nvidia-cuda-nvrtc>=13,<14'
export LD_LIBRARY_PATH="$nvrtc/nvidia/cu13/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
mkdir -p "$out"
cargo run --release --quiet -p ringdil-cuda --example kernel_report -- ptx "$out" "$module" > /dev/null
[ -s "$out/$module.ptx" ] || { echo "sass.sh: kernel_report wrote no module $module" >&2; exit 2; }
"$bin/ptxas" -arch="${module%%_[BF]*}" "$out/$module.ptx" -o "$out/$module.cubin"
PATH="$bin:$PATH" "$bin/cuobjdump" -sass -fun "$kernel" "$out/$module.cubin" > "$out/$module.$kernel.sass"
echo "$out/$module.$kernel.sass: $(grep -cE '^ +/\*[0-9a-f]{4,}\*/' "$out/$module.$kernel.sass") instructions"
