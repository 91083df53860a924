#include "tools/primer/build_info.h"

#include <hdf5.h>
#include <mpi.h>

#include <fmt/format.h>

#include "primer_build_config.h"
#include "primer_git_commit.h"
#ifdef PRIMER_WITH_NCCL
#include <nccl.h>
#endif

namespace primer::tools {
namespace {

std::string cuda_line() {
#ifdef PRIMER_WITH_CUDA
  return fmt::format("on (toolkit {}, architectures {})", PRIMER_CUDA_TOOLKIT, PRIMER_CUDA_ARCHITECTURES);
#else
  return "off";
#endif
}

std::string blas_line() {
#ifdef PRIMER_WITH_OPENBLAS
  return fmt::format("OpenBLAS {}", PRIMER_OPENBLAS_VERSION);
#else
  return "none (primer's blocked CPU GEMM)";
#endif
}

std::string nccl_line() {
#ifdef PRIMER_WITH_NCCL
  return fmt::format("{}.{}.{}", NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH);
#else
  return "not built";
#endif
}

// The MPI library's own first line ("Open MPI v4.1.4, package: ..." → "Open MPI v4.1.4"); callable before MPI_Init.
std::string mpi_line() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  if (MPI_Get_library_version(text, &length) != MPI_SUCCESS) return "unknown";
  std::string line(text, size_t(length));
  return line.substr(0, line.find_first_of(",\n"));
}

// The HDF5 library loaded at run time (checkpoints and token shards are written with it).
std::string hdf5_line() {
  unsigned major = 0, minor = 0, release = 0;
  if (H5get_libversion(&major, &minor, &release) < 0) return "unknown";
  return fmt::format("{}.{}.{}", major, minor, release);
}

}  // namespace

std::string build_info() {
  return fmt::format("primer {} (commit {})\nbuild: {}, {}\nCUDA: {}\nBLAS: {}\nNCCL: {}\nMPI: {}\nHDF5: {}",
                     PRIMER_VERSION, PRIMER_GIT_COMMIT, PRIMER_BUILD_TYPE, PRIMER_CXX_COMPILER, cuda_line(),
                     blas_line(), nccl_line(), mpi_line(), hdf5_line());
}

}  // namespace primer::tools
