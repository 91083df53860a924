#!/usr/bin/env bash
# Where a whole training step's time goes, kernel by kernel: one step of bench_train_step (activations kept unless
# told otherwise) under Nsight Compute, then tools/bench/common/kernel_table.py (issue 16, item 4: the Transformer's
# MFU). After tools/device-check.sh's build (build-device/, or $BUILD_DIR). Writes $out/kernels-step.{csv,md},
# kernels-step-order.md. Usage: tools/bench/step-kernels.sh [bench_train_step options]   (default: --recompute off)
set -uo pipefail
cd "$(dirname "$0")/../.." || exit
. tools/bench/common/profile_kernels.sh
[ $# -eq 0 ] && set -- --recompute off
"$build/bench_train_step" "$@" || exit 1
PROFILE_ROWS=45 profile_kernels step "$build/bench_train_step" --profile "$@"
