// MPI as the communicators use it: checked calls (every failing MPI call becomes a primer::Error naming the
// call and file:line), the datatype and reduction of each tensor dtype, and counts that fit MPI's int.
#pragma once
#include <mpi.h>

#include "core/dtype.h"
#include "parallel/comm/communicator.h"

namespace primer::parallel::mpi {

[[noreturn]] void fail(int code, const char* expr, const char* file, int line);

MPI_Datatype datatype(DType dtype);
// bf16 has no MPI type: it travels as 16-bit words and reduces through user-defined operations.
MPI_Op reduction(ReduceOp op, DType dtype);
int count(int64_t numel, const OpInfo& info);  // checks numel fits MPI's int

bool initialized();  // MPI_Init done and MPI_Finalize not yet

}  // namespace primer::parallel::mpi

#define PRIMER_MPI_CHECK(expr)                                                                                   \
  do {                                                                                                           \
    int primer_mpi_rc_ = (expr);                                                                                 \
    if (primer_mpi_rc_ != MPI_SUCCESS) ::primer::parallel::mpi::fail(primer_mpi_rc_, #expr, __FILE__, __LINE__); \
  } while (0)
