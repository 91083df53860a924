#!/usr/bin/env bash
# On a machine with a GPU: build with CUDA (sm_90a), run the `cuda` tests, then the benchmarks.
# Usage: tools/device-check.sh [ctest -R regex] [bench executable or tools/bench/*.py name ...]
#   tools/device-check.sh                 everything (every test, every benchmark: most of a session's device time)
#   tools/device-check.sh 'RmsNorm' bench_norms   only matching tests and the named benchmarks
#   tools/device-check.sh 'RmsNorm'       only matching tests, no benchmark
# Logs go to $OUT (or ./device-logs) and a short summary table is printed last.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-$PWD/device-logs}"
mkdir -p "$out"
run_all_benches=$(( $# == 0 ))
filter="${1:-.}"
shift || true
benches=("$@")

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpu.txt"
cmake -S . -B build-device -G Ninja -DPRIMER_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DPRIMER_WERROR=OFF >"$out/cmake.log" 2>&1 ||
  { tail -30 "$out/cmake.log"; exit 1; }
if ! cmake --build build-device -j "$(nproc)" >"$out/build.log" 2>&1; then
  grep -E "error|Error" "$out/build.log" | head -40
  exit 1
fi
echo "build: ok"

# Four tests at once, each with its share of the cores for its f64 CPU references (OpenMP's default, every core per
# test, oversubscribes them four times over). A test that hangs (a kernel's barrier or shuffle that some lanes skip)
# fails after 5 minutes with its name, instead of taking the rest of the device call.
cuda_test_timeout=300
(cd build-device && OMP_NUM_THREADS=$(( $(nproc) / 4 > 0 ? $(nproc) / 4 : 1 )) ctest -L cuda -R "$filter" \
  --timeout "$cuda_test_timeout" --output-on-failure -j 4) >"$out/ctest-cuda.log" 2>&1
test_rc=$?
grep -E "tests passed|tests failed|Failed|\*\*\*|Not Run" "$out/ctest-cuda.log" | head -40
# Attention, the Chebyshev iteration (GKA) and the gated delta rule's sequential passes (GDN, KZLA) have Hopper
# (wgmma) kernels and mma.sync ones: where the first ran, test the second too.
hopper_tests=$(cd build-device && ctest -N -L cuda -R "$filter" | awk '/Test +#/ {print $3}' |
  grep -E "Attention|Chebyshev|Gka|GatedDelta|Gdn|Kaczmarz|Kzla" | paste -sd'|')
if [ -n "$hopper_tests" ]; then
  echo "attention, GKA and GDN tests again with the mma.sync kernels (PRIMER_NO_WGMMA=1):"
  (cd build-device && PRIMER_NO_WGMMA=1 OMP_NUM_THREADS=$(( $(nproc) / 4 > 0 ? $(nproc) / 4 : 1 )) \
    ctest -L cuda -R "^($hopper_tests)\$" --timeout "$cuda_test_timeout" --output-on-failure -j 4) \
    >"$out/ctest-cuda-no-wgmma.log" 2>&1 ||
    test_rc=1
  grep -E "tests passed|tests failed|Failed|\*\*\*" "$out/ctest-cuda-no-wgmma.log" | head -10
fi

# The multi-rank GPU paths (label dist, tests named *Gpu*, and the plain process): the communicators and training
# with NCCL at world size 1, with 2 and 4 ranks sharing this GPU through MPI with host staging (NCCL refuses two ranks
# on one device), sequence parallelism (every CUDA mixer and mode against one rank and f64; training under sp 2 and
# dp 2 x sp 2), and the hang report on GPU tensors.
(cd build-device && ctest -L dist -R 'Gpu|NoLauncher' -V) >"$out/ctest-dist-gpu.log" 2>&1 || test_rc=1
grep -E "tests passed|tests failed|\*\*\*|communicator:|GPU, ZeRO|GPU, (p2p|usp)" "$out/ctest-dist-gpu.log" | sort -u | head -40

if [ "$run_all_benches" = 1 ]; then
  mapfile -t benches < <(cd build-device && ls bench_* 2>/dev/null; cd ../tools/bench && ls *.py 2>/dev/null)
fi
# Benchmarks: executables from build-device/, and PyTorch peer scripts (*.py in tools/bench/, run with python3).
for b in "${benches[@]}"; do
  echo "## $b"
  if [ "$b" = bench_generate ]; then
    # Decoding tests, primer's generation speed and the transformers peer's, one table (tools/bench/generate-check.sh).
    BUILD_DIR=build-device tools/bench/generate-check.sh || test_rc=1
  elif [ "$b" = hf_generate_peer.py ]; then
    echo "run by bench_generate's section (tools/bench/generate-check.sh)"
  elif [[ "$b" == *.py ]]; then
    BENCH_LOG_DIR="$out" PYTHONUNBUFFERED=1 python3 "tools/bench/$b" 2>&1 | tee "$out/${b%.py}.log"
  elif [ "$b" = bench_fsdp ]; then
    # One process (NCCL): the machinery's overhead; 2 and 4 ranks sharing the GPU: memory per rank by stage.
    build-device/bench_fsdp --modes unsharded,0,3 2>&1 | tee "$out/bench_fsdp-1.log"
    for n in 2 4; do
      timeout 240 tests/dist/mpirun.sh mpirun -np $n build-device/bench_fsdp --modes 0,1,2,3 --batch 1 --steps 2 \
        ${BENCH_FSDP_ARGS:-} 2>&1 | tee "$out/bench_fsdp-$n.log"
    done
  elif [ "$b" = bench_sp ]; then
    # One process: P2P's compute overhead over the plain layer at T_local = 16K (no communication).
    build-device/bench_sp ${BENCH_SP_ARGS:-} 2>&1 | tee "$out/bench_sp-1.log"
  elif [ -x "build-device/$b" ]; then
    "build-device/$b" 2>&1 | tee "$out/$b.log"
  else
    echo "no benchmark $b"
  fi
done
exit $test_rc
