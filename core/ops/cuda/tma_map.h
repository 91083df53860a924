// Host side of the bulk tensor copies (tma.cuh): the tensor map of a [B, T, H, Dh] bf16 tensor whose boxes are
// [rows tokens][64 channels] of one (batch, head), stored with the 128-byte swizzle of wgmma::Sw128Tile.
#pragma once
#include <cuda.h>

#include <cstdint>

namespace primer::ops::cuda_ops {

// Coordinates of a box, innermost first: (channel0, head, token0, batch); tokens past T read as zeros.
CUtensorMap token_head_tensor_map(const void* data, int64_t B, int64_t T, int64_t H, int64_t Dh, int rows);

}  // namespace primer::ops::cuda_ops
