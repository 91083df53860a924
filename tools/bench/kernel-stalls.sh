#!/usr/bin/env bash
# Where one kernel's warps wait: Nsight Compute (--set full) on the first launch of a kernel matching REGEX while
# COMMAND runs, then tools/bench/common/stall_table.py on its per-instruction stall samples. Writes
# $OUT/stalls-NAME.csv (the source page, SASS), -details.txt and .md, and prints the kernel's headline figures and
# the table. The report itself is removed (tens of MB) unless KEEP_REPORT=1.
# Usage: tools/bench/kernel-stalls.sh NAME REGEX COMMAND...
#   e.g. tools/bench/kernel-stalls.sh state-gradients state_gradients build-device/bench_gka --seq 1024
# REGEX matches the kernel's function name; to pick one instance of a template, STALLS_NAME_BASE=mangled matches the
# mangled name ('state_pass_kernelILi128ELi32ELi3ELb0ELb1E') and STALLS_NAME_BASE=demangled the whole demangled one,
# as Nsight Compute prints it ('state_pass_kernel<\(int\)128, \(int\)32'). STALLS_SKIP=N skips N matching launches.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
[ $# -ge 3 ] || { sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 1; }
name="$1" regex="$2"
shift 2
out="${OUT:-$PWD/device-logs}"
mkdir -p "$out"
report="$out/stalls-$name"
if ! ncu --kernel-name-base "${STALLS_NAME_BASE:-function}" -k "regex:$regex" --launch-skip "${STALLS_SKIP:-0}" \
  --launch-count 1 --set full --import-source no -f -o "$report" "$@" >"$out/stalls-$name-ncu.log" 2>&1; then
  echo "kernel-stalls: ncu failed:"; tail -5 "$out/stalls-$name-ncu.log"; exit 1
fi
[ -f "$report.ncu-rep" ] || { echo "kernel-stalls: no kernel matched '$regex' (see $out/stalls-$name-ncu.log)"; exit 1; }
ncu -i "$report.ncu-rep" --page source --csv --print-source sass >"$report.csv" 2>/dev/null
ncu -i "$report.ncu-rep" --page details >"$report-details.txt" 2>&1
[ "${KEEP_REPORT:-0}" = 1 ] || rm -f "$report.ncu-rep"
grep -E "^ +(Duration|Registers Per Thread|Achieved Occupancy|Issued Warp Per Scheduler|No Eligible|DRAM Throughput|Compute \(SM\) Throughput|Dynamic Shared Memory Per Block) " \
  "$report-details.txt" | sed 's/  */ /g'
python3 tools/bench/common/stall_table.py "$report.csv" | tee "$report.md"
