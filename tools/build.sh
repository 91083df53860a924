#!/usr/bin/env bash
# Configures and builds primer into ./build (CUDA kernels too when nvcc is present; PRIMER_CUDA=OFF to skip).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="${JOBS:-$(nproc)}"
cuda_flag=()
[ -n "${PRIMER_CUDA:-}" ] && cuda_flag=(-DPRIMER_CUDA="$PRIMER_CUDA")
command -v nvcc >/dev/null || [ ! -x /usr/local/cuda/bin/nvcc ] || export PATH="/usr/local/cuda/bin:$PATH"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "${cuda_flag[@]}" >/dev/null
cmake --build build -j "$jobs"
