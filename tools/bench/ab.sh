#!/usr/bin/env bash
# Before and after in one device call: GPU leases differ by up to ~9% for the same code (docs/perf.md), so a change is
# measured against its base built beside it on the same machine, the runs alternated.
#   tools/bench/ab.sh prepare REV     here, with git: the source of REV into build-ab/base-src (carry that path)
#   tools/bench/ab.sh run BENCH [ARGS...]
#                                     on the device: builds BENCH for this tree (build-device/) and for the base
#                                     (build-ab/base/), runs base, tree, base, tree, ... with ARGS ($AB_RUNS pairs,
#                                     default 2), logs to $OUT (ab-base-1.log, ab-tree-1.log, ...) and prints each
#                                     run's table rows ($AB_ROWS, an extended regex; default every markdown table row).
# AB_CMAKE_ARGS replaces the CUDA configuration (e.g. -DPRIMER_CUDA=OFF for a CPU benchmark); AB_TREE_BUILD names the
# tree's build directory (default build-device, tools/device-check.sh's); AB_TIMEOUT bounds each run (default 300 s).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
base_src=build-ab/base-src

case "${1:-}" in
  prepare)
    rev="${2:?usage: tools/bench/ab.sh prepare REV}"
    git rev-parse --verify --quiet "$rev^{commit}" >/dev/null || { echo "ab.sh: no commit '$rev'" >&2; exit 1; }
    # (-m: the files dated now, so that a base build left from another revision recompiles them all)
    rm -rf "$base_src" && mkdir -p "$base_src" && git archive "$rev" | tar -x -m -C "$base_src" || exit 1
    git rev-parse "$rev" >"$base_src/REVISION"
    echo "base $(cat "$base_src/REVISION") in $base_src: pass carry [\"$base_src\"] to the device run"
    ;;
  run)
    bench="${2:?usage: tools/bench/ab.sh run BENCH [ARGS...]}"
    shift 2
    runs="${AB_RUNS:-2}"
    [[ "$runs" =~ ^[1-9][0-9]*$ ]] || { echo "ab.sh: AB_RUNS is '$runs', expected a count of at least 1" >&2; exit 1; }
    [ -f "$base_src/CMakeLists.txt" ] || { echo "ab.sh: no base in $base_src (tools/bench/ab.sh prepare REV, then carry $base_src)" >&2; exit 1; }
    out="${OUT:-$PWD/device-logs}"
    mkdir -p "$out"
    tree_build="${AB_TREE_BUILD:-build-device}"
    read -r -a configuration <<<"${AB_CMAKE_ARGS:--DPRIMER_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a}"
    build() {  # source dir, build dir
      cmake -S "$1" -B "$2" -G Ninja "${configuration[@]}" -DPRIMER_WERROR=OFF >"$out/ab-cmake-$(basename "$2").log" 2>&1 &&
        cmake --build "$2" -j "$(nproc)" --target "$bench" >"$out/ab-build-$(basename "$2").log" 2>&1 ||
        { echo "ab.sh: building $bench in $2 failed:"; grep -E "error" "$out/ab-build-$(basename "$2").log" | head -20; return 1; }
    }
    build . "$tree_build" || exit 1
    build "$base_src" build-ab/base || exit 1
    echo "base $(cat "$base_src/REVISION" 2>/dev/null || echo '(unknown revision)') against this tree: $bench $*"
    rc=0
    for run in $(seq 1 "$runs"); do
      for side in base tree; do
        dir="$tree_build"
        [ "$side" = base ] && dir=build-ab/base
        # (a hanging kernel fails its run after AB_TIMEOUT seconds instead of taking the device call)
        timeout "${AB_TIMEOUT:-300}" "$dir/$bench" "$@" >"$out/ab-$side-$run.log" 2>&1 ||
          { echo "ab.sh: $side run $run failed (exit $?)"; rc=1; }
      done
    done
    for run in $(seq 1 "$runs"); do
      for side in base tree; do
        echo "## $side, run $run"
        grep -E "${AB_ROWS:-^\|}" "$out/ab-$side-$run.log"
      done
    done
    exit $rc
    ;;
  *)
    sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'
    exit 1
    ;;
esac
