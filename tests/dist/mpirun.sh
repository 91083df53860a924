#!/bin/sh
# Runs mpirun the way the dist tests need on a small CI machine: more ranks than cores (--oversubscribe), no
# pinning (--bind-to none: pinned ranks would share one core), and --allow-run-as-root where CI runs as root.
# Each rank gets PRIMER_RANK_THREADS host threads (default 1: the tests run more ranks than cores); a machine with
# a GPU per rank and cores to spare sets more (tools/multi-gpu-check.sh: cores / GPUs), or host-side work such as a
# large model's initialisation runs on one core.
# Usage: tests/dist/mpirun.sh <mpirun> <mpirun arguments...>
set -eu
mpirun="$1"
shift
root_flag=""
if [ "$(id -u)" = 0 ]; then root_flag="--allow-run-as-root"; fi
exec "$mpirun" $root_flag --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 -x OMP_NUM_THREADS="${PRIMER_RANK_THREADS:-1}" -x OPENBLAS_NUM_THREADS="${PRIMER_RANK_THREADS:-1}" "$@"
