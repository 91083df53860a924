// Tensor maps for Hopper's bulk tensor copies (TMA), encoded on the host by the driver's cuTensorMapEncodeTiled,
// which is found through the runtime (so primer needs no link to libcuda). Kernels take a map by value as a
// `const __grid_constant__ CUtensorMap` parameter.
#pragma once
#include <cuda.h>

#include <cstdint>

namespace primer::ops::cuda_ops {

// A map of a tensor whose dimension 0 is contiguous: dims[i] elements along dimension i, strides[i] bytes between
// consecutive indices of dimension i + 1 (multiples of 16), copied in boxes of box[i] elements (rank <= 5).
CUtensorMap encode_tensor_map(CUtensorMapDataType type, void* base, int rank, const uint64_t* dims,
                              const uint64_t* strides, const uint32_t* box, CUtensorMapSwizzle swizzle);

}  // namespace primer::ops::cuda_ops
