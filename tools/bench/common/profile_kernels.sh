# Sourced by the *-kernels.sh tools from the repository root: sets $out (logs: $OUT or ./device-logs) and $build
# (tools/device-check.sh's build: build-device/, or $BUILD_DIR). profile_kernels NAME COMMAND...: runs COMMAND (a benchmark that brackets the
# pass to record with cudaProfilerStart/Stop) under Nsight Compute, durations only and clocks left alone, and writes
# $out/kernels-NAME.csv, .md (kernels grouped by name, largest first) and -order.md (every launch in order).
# Prints the grouped table's head and its total; returns nonzero when ncu or the table fails.
# PROFILE_BYTES=1 also counts each kernel's DRAM bytes and tensor-core ops (each kernel then replays a few times), and
# the tables add what it achieved: TB/s, tensor Tops/s, and their fractions of PROFILE_COPY_TBPS (the copy bandwidth
# measured on the device) and PROFILE_TENSOR_TOPS (the dense peak) where those are set. The op counters (bf16 and fp16
# sources) count two per multiply-add, like FLOPs: checked on an H200 against the lm_head GEMM of a training step.
out="${OUT:-$PWD/device-logs}"
build="${BUILD_DIR:-build-device}"
mkdir -p "$out"

profile_kernels() {
  local name="$1"; shift
  local metrics=gpu__time_duration.sum
  [ "${PROFILE_BYTES:-0}" = 1 ] && metrics+=",dram__bytes_read.sum,dram__bytes_write.sum"\
",sm__ops_path_tensor_src_bf16_dst_fp32.sum,sm__ops_path_tensor_src_fp16_dst_fp32.sum"
  if ! ncu --clock-control none --profile-from-start off --metrics "$metrics" --csv --page raw \
    "$@" >"$out/kernels-$name.csv" 2>"$out/kernels-$name.err"; then
    echo "ncu failed for $name:"; tail -5 "$out/kernels-$name.err"; return 1
  fi
  local ceilings=(--copy-tbps "${PROFILE_COPY_TBPS:-0}" --tensor-tops "${PROFILE_TENSOR_TOPS:-0}")
  python3 tools/bench/common/kernel_table.py "${ceilings[@]}" "$out/kernels-$name.csv" >"$out/kernels-$name.md" ||
    return 1
  python3 tools/bench/common/kernel_table.py --order "${ceilings[@]}" "$out/kernels-$name.csv" \
    >"$out/kernels-$name-order.md"
  echo "## $name: kernels of one pass"
  local rows="${PROFILE_ROWS:-30}"
  head -"$rows" "$out/kernels-$name.md"
  [ "$(wc -l <"$out/kernels-$name.md")" -gt "$rows" ] && tail -1 "$out/kernels-$name.md"
  return 0
}
