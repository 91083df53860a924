// `primer --version`: the version, the source commit it was built from and how it was built (CUDA and its
// architectures, BLAS, NCCL, MPI, HDF5), so that a log or a bug report says exactly which primer ran.
#pragma once
#include <string>

namespace primer::tools {

// Several lines: "primer <version> (commit <hash>)", then one "<component>: <what>" line per component.
std::string build_info();

}  // namespace primer::tools
