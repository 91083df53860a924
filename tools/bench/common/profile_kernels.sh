# Sourced by the *-kernels.sh tools from the repository root: sets $out (logs: $OUT or ./device-logs) and $build
# (tools/device-check.sh's build: build-device/, or $BUILD_DIR). profile_kernels NAME COMMAND...: runs COMMAND (a benchmark that brackets the
# pass to record with cudaProfilerStart/Stop) under Nsight Compute, durations only and clocks left alone, and writes
# $out/kernels-NAME.csv, .md (kernels grouped by name, largest first) and -order.md (every launch in order).
# Prints the grouped table's head and its total; returns nonzero when ncu or the table fails.
out="${OUT:-$PWD/device-logs}"
build="${BUILD_DIR:-build-device}"
mkdir -p "$out"

profile_kernels() {
  local name="$1"; shift
  if ! ncu --clock-control none --profile-from-start off --metrics gpu__time_duration.sum --csv --page raw \
    "$@" >"$out/kernels-$name.csv" 2>"$out/kernels-$name.err"; then
    echo "ncu failed for $name:"; tail -5 "$out/kernels-$name.err"; return 1
  fi
  python3 tools/bench/common/kernel_table.py "$out/kernels-$name.csv" >"$out/kernels-$name.md" || return 1
  python3 tools/bench/common/kernel_table.py --order "$out/kernels-$name.csv" >"$out/kernels-$name-order.md"
  echo "## $name: kernels of one pass"
  local rows="${PROFILE_ROWS:-30}"
  head -"$rows" "$out/kernels-$name.md"
  [ "$(wc -l <"$out/kernels-$name.md")" -gt "$rows" ] && tail -1 "$out/kernels-$name.md"
  return 0
}
