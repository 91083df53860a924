#!/usr/bin/env bash
# Where a mixer layer's time goes, kernel by kernel: bench_layer_kernels under Nsight Compute (one forward + backward
# pass, durations only, clocks left alone), then tools/bench/common/kernel_table.py. After tools/device-check.sh's
# build (build-device/, or $BUILD_DIR). Writes $OUT/kernels-<MIXER>.csv, .md (grouped) and -order.md (every launch).
# Usage: tools/bench/layer-kernels.sh [MIXER ...] [-- bench_layer_kernels options]   (default: GDN M2 GKA)
# PROFILE_BYTES=1 adds each kernel's DRAM bytes, TB/s and tensor Tops/s (tools/bench/common/profile_kernels.sh).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit
. tools/bench/common/profile_kernels.sh
mixers=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do mixers+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
[ ${#mixers[@]} -eq 0 ] && mixers=(GDN M2 GKA)
rc=0
for m in "${mixers[@]}"; do
  "$build/bench_layer_kernels" --mixer "$m" "$@" || { rc=1; continue; }
  profile_kernels "$m" "$build/bench_layer_kernels" --mixer "$m" "$@" || rc=1
done
exit $rc
