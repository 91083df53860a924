#!/usr/bin/env bash
# Installs primer's build and test dependencies from the distribution's packages (Debian/Ubuntu).
# CUDA, cuBLAS and NCCL come with the CUDA toolkit image and are not installed here.
set -euo pipefail
packages=(
  build-essential cmake ninja-build pkg-config
  libopenmpi-dev openmpi-bin        # launcher and host-side collectives (parallel/)
  libhdf5-dev                       # checkpoints and tokenized shards
  libyaml-cpp-dev                   # recipes
  libcli11-dev                      # the primer CLI
  libfmt-dev                        # formatting of logs and errors
  libgtest-dev                      # tests
  libopenblas-dev                   # fast CPU GEMM (CPU training path and CI)
  clang-format                      # .ci/check-format (the style of .clang-format; Debian 12 ships version 14)
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
