#include "core/ops/cuda/tma_map.h"

#include <cudaTypedefs.h>

#include "core/cuda_runtime.h"

namespace primer::ops::cuda_ops {
namespace {

// The driver's encoder, reached through the runtime so that nothing links libcuda directly.
PFN_cuTensorMapEncodeTiled_v12000 encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found{};
    PRIMER_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &found));
    if (found != cudaDriverEntryPointSuccess || f == nullptr)
      cuda::fail(cudaErrorSymbolNotFound, "cuTensorMapEncodeTiled (driver too old for tensor maps?)", __FILE__,
                 __LINE__);
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

}  // namespace

CUtensorMap token_head_tensor_map(const void* data, int64_t B, int64_t T, int64_t H, int64_t Dh, int rows) {
  CUtensorMap map;
  const cuuint64_t dims[4] = {cuuint64_t(Dh), cuuint64_t(H), cuuint64_t(T), cuuint64_t(B)};
  const cuuint64_t strides[3] = {cuuint64_t(Dh) * 2, cuuint64_t(H * Dh) * 2, cuuint64_t(T * H * Dh) * 2};  // bytes
  const cuuint32_t box[4] = {64, 1, cuuint32_t(rows), 1};
  const cuuint32_t element_strides[4] = {1, 1, 1, 1};
  const CUresult r = encoder()(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, const_cast<void*>(data), dims, strides, box,
                               element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                               CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) cuda::fail(cudaErrorInvalidValue, "cuTensorMapEncodeTiled", __FILE__, __LINE__);
  return map;
}

}  // namespace primer::ops::cuda_ops
