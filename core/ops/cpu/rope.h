// CPU rotary embedding (f32/f64). Tensors are contiguous and already validated.
#pragma once
#include "core/tensor.h"

namespace primer::ops::cpu {

// y, x [B, T, H, Dh] of one dtype; positions i32 [B, T]; inv_freq f32 [Dh/2]. `inverse` rotates by -angle.
void rope(const Tensor& y, const Tensor& x, const Tensor& positions, const Tensor& inv_freq, bool inverse);

}  // namespace primer::ops::cpu
