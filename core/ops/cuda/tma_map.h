// Host side of the bulk tensor copies (tma.cuh): the tensor map of a [B, T, H, Dh] bf16 or fp32 tensor whose boxes
// are [rows tokens][128 bytes of channels] of one (batch, head), stored with the 128-byte swizzle of
// wgmma::Sw128Tile (16-byte chunks of each 128-byte row XORed with row % 8).
#pragma once
#include <cuda.h>

#include <cstdint>

namespace primer::ops::cuda_ops {

// Coordinates of a box, innermost first: (channel0, head, token0, batch); tokens past T read as zeros and are left
// alone by reduce-adds. A box row holds 64 bf16 or 32 fp32 channels.
CUtensorMap token_head_tensor_map(const void* data, int64_t B, int64_t T, int64_t H, int64_t Dh, int rows,
                                  CUtensorMapDataType type = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16);

}  // namespace primer::ops::cuda_ops
