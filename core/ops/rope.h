// Rotary position embedding, Hugging Face "rotate_half" convention: element i of the first half of head_dim
// pairs with element i + Dh/2, rotated by angle pos * inv_freq[i].
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace primer::ops {

// x [B, T, H, Dh] (Dh even); positions i32 [B, T] (arbitrary: per-document resets, sequence-parallel offsets);
// inv_freq f32 [Dh/2]; all on x's device. angle = float(pos) * inv_freq[i] in fp32 (double on the f64 CPU path).
Tensor rope(const Tensor& x, const Tensor& positions, const Tensor& inv_freq);
// Gradient of rope wrt x: the inverse rotation of dy [B, T, H, Dh].
Tensor rope_backward(const Tensor& dy, const Tensor& positions, const Tensor& inv_freq);

// inv_freq[i] = theta^(-2i/head_dim), f32 [head_dim/2] on the CPU (computed in double, rounded once).
Tensor rope_inv_freq(int64_t head_dim, double theta);

}  // namespace primer::ops
