#include "parallel/comm/mpi_util.h"

#include <climits>

#include "core/check.h"

namespace primer::parallel::mpi {

void fail(int code, const char* expr, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw_error(file, line, fmt::format("{} failed: {} (MPI error {})", expr, text, code));
}

MPI_Datatype datatype(DType dtype) {
  switch (dtype) {
    case DType::F32: return MPI_FLOAT;
    case DType::F64: return MPI_DOUBLE;
    case DType::BF16: return MPI_UINT16_T;
    case DType::I32: return MPI_INT32_T;
    case DType::I64: return MPI_INT64_T;
    default: PRIMER_FAIL("MPI: no datatype for {}", dtype_name(dtype));
  }
}

namespace {

// Each pairwise combination rounds to bf16, as NCCL's bf16 reductions do.
template <class Combine> void reduce_bf16(void* in, void* inout, int* len, Combine combine) {
  auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) {
    bf16 x, y;
    x.bits = a[i];
    y.bits = b[i];
    b[i] = bf16::from_float(combine(float(x), float(y)));
  }
}

void bf16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  reduce_bf16(in, inout, len, [](float x, float y) { return x + y; });
}
void bf16_max(void* in, void* inout, int* len, MPI_Datatype*) {
  reduce_bf16(in, inout, len, [](float x, float y) { return x > y ? x : y; });
}
void bf16_min(void* in, void* inout, int* len, MPI_Datatype*) {
  reduce_bf16(in, inout, len, [](float x, float y) { return x < y ? x : y; });
}

MPI_Op created(MPI_User_function* fn) {
  MPI_Op op;
  PRIMER_MPI_CHECK(MPI_Op_create(fn, /*commute=*/1, &op));
  return op;
}

}  // namespace

MPI_Op reduction(ReduceOp op, DType dtype) {
  if (dtype == DType::BF16) {
    // Created on first use and kept until MPI_Finalize releases them.
    static MPI_Op sum = created(bf16_sum), max = created(bf16_max), min = created(bf16_min);
    return op == ReduceOp::Sum ? sum : op == ReduceOp::Max ? max : min;
  }
  return op == ReduceOp::Sum ? MPI_SUM : op == ReduceOp::Max ? MPI_MAX : MPI_MIN;
}

int count(int64_t numel, const OpInfo& info) {
  PRIMER_CHECK(numel <= INT_MAX, "{}: {} elements exceed MPI's count limit ({}); split the tensor", info.describe(),
               numel, INT_MAX);
  return int(numel);
}

bool initialized() {
  int init = 0, finalized = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&finalized);
  return init && !finalized;
}

}  // namespace primer::parallel::mpi
