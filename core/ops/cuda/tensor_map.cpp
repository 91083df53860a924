// The driver entry point is a host API: this file is plain C++ compiled only in CUDA builds.
#ifdef PRIMER_WITH_CUDA
#include "core/ops/cuda/tensor_map.h"

#include <cuda_runtime_api.h>
#include <cudaTypedefs.h>

#include "core/check.h"
#include "core/cuda_runtime.h"

namespace primer::ops::cuda_ops {

namespace {

PFN_cuTensorMapEncodeTiled_v12000 encode_function() {
  static const PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    PRIMER_CUDA_CHECK(
        cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found));
    PRIMER_CHECK(found == cudaDriverEntryPointSuccess && fn != nullptr,
                 "encode_tensor_map: the CUDA driver has no cuTensorMapEncodeTiled (query result {})", int(found));
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  return encode;
}

}  // namespace

CUtensorMap encode_tensor_map(CUtensorMapDataType type, void* base, int rank, const uint64_t* dims,
                              const uint64_t* strides, const uint32_t* box, CUtensorMapSwizzle swizzle) {
  PRIMER_CHECK(rank >= 1 && rank <= 5, "encode_tensor_map: rank {} (expected 1..5)", rank);
  cuuint64_t d[5], s[4];
  cuuint32_t b[5], unit[5];
  for (int i = 0; i < rank; ++i) {
    d[i] = dims[i];
    b[i] = box[i];
    unit[i] = 1;
    if (i + 1 < rank) s[i] = strides[i];
  }
  CUtensorMap map;
  const CUresult result = encode_function()(&map, type, cuuint32_t(rank), base, d, s, b, unit,
                                            CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                                            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  PRIMER_CHECK(result == CUDA_SUCCESS, "encode_tensor_map: cuTensorMapEncodeTiled failed with CUresult {} (rank {})",
               int(result), rank);
  return map;
}

}  // namespace primer::ops::cuda_ops
#endif  // PRIMER_WITH_CUDA
