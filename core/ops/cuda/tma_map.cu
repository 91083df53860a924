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

CUtensorMap token_head_tensor_map(const void* data, int64_t B, int64_t T, int64_t H, int64_t Dh, int rows,
                                  CUtensorMapDataType type) {
  if (type != CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 && type != CU_TENSOR_MAP_DATA_TYPE_FLOAT32)
    cuda::fail(cudaErrorInvalidValue, "token_head_tensor_map: bf16 or fp32 elements", __FILE__, __LINE__);
  const cuuint64_t bytes = type == CU_TENSOR_MAP_DATA_TYPE_FLOAT32 ? 4 : 2;
  CUtensorMap map;
  const cuuint64_t dims[4] = {cuuint64_t(Dh), cuuint64_t(H), cuuint64_t(T), cuuint64_t(B)};
  const cuuint64_t strides[3] = {cuuint64_t(Dh) * bytes, cuuint64_t(H * Dh) * bytes, cuuint64_t(T * H * Dh) * bytes};
  const cuuint32_t box[4] = {cuuint32_t(128 / bytes), 1, cuuint32_t(rows), 1};  // 128-byte rows: the swizzle's span
  const cuuint32_t element_strides[4] = {1, 1, 1, 1};
  const CUresult r = encoder()(&map, type, 4, const_cast<void*>(data), dims, strides, box, element_strides,
                               CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                               CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)  // the usual cause: a base address or row stride that is not a multiple of 16 bytes
    cuda::fail(cudaErrorInvalidValue, "cuTensorMapEncodeTiled (tensor base and strides must be 16-byte aligned)",
               __FILE__, __LINE__);
  return map;
}

}  // namespace primer::ops::cuda_ops
