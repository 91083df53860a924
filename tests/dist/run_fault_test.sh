#!/bin/bash
# A fault scenario end to end: runs the job, and passes only if mpirun exits non-zero within <seconds> and its
# stderr contains every expected fragment.
# Usage: run_fault_test.sh <mpirun> <ranks> <test executable> <mode> <timeout s> <within s (integer)> [expected fragments...]
# PRIMER_FAULT_DEVICE=cuda in the environment runs it on GPU tensors (without a GPU the script exits 77: skipped);
# PRIMER_FAULT_GROUP=odd on the sub-communicator of the odd world ranks.
set -u
mpirun="$1" ranks="$2" exe="$3" mode="$4" timeout="$5" within="$6"
shift 6
here="$(cd "$(dirname "$0")" && pwd)"
stderr_file="$(mktemp)"
trap 'rm -f "$stderr_file"' EXIT

start_ms=$(($(date +%s%N) / 1000000))
# The outer timeout is a backstop: if it fires, the fault handling failed (and the time check below says so).
# A status of 137 is not necessarily it: mpirun itself exits 128 + 9 when a rank was SIGKILLed.
timeout --kill-after=5 $((within + 30)) "$here/mpirun.sh" "$mpirun" -np "$ranks" \
  -x PRIMER_FAULT_MODE="$mode" -x PRIMER_FAULT_TIMEOUT="$timeout" -x PRIMER_FAULT_DEVICE="${PRIMER_FAULT_DEVICE:-cpu}" \
  -x PRIMER_FAULT_GROUP="${PRIMER_FAULT_GROUP:-world}" \
  "$exe" --gtest_also_run_disabled_tests --gtest_filter='DistFault.DISABLED_RankMisbehavesInsideStep' \
  >/dev/null 2>"$stderr_file"
status=$?
elapsed_ms=$(($(date +%s%N) / 1000000 - start_ms))
elapsed="$((elapsed_ms / 1000)).$(printf %03d $((elapsed_ms % 1000)))"

fail() {
  echo "FAIL ($mode, $ranks ranks): $1"
  echo "--- stderr of the job ---"
  cat "$stderr_file"
  exit 1
}

echo "mpirun exited with status $status after ${elapsed} s"
if [ "$status" -eq 77 ] && grep -q "fault test: no GPU" "$stderr_file"; then
  echo "SKIPPED: no GPU"
  exit 77
fi
[ "$status" -ne 0 ] || fail "the job exited 0; a fault must end it non-zero"
[ "$elapsed_ms" -le $((within * 1000)) ] || fail "the job took ${elapsed} s, more than ${within} s"
for fragment in "$@"; do
  grep -qF -- "$fragment" "$stderr_file" || fail "stderr lacks '$fragment'"
done
echo "--- stderr of the job ---"
cat "$stderr_file"
echo "PASS"
