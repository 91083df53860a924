// The key/value caches of attention layers (MixerState::keys / values): the new tokens' rows appended to the cached
// ones.
#pragma once
#include "core/tensor.h"

namespace primer::layers {

// [B, T1, H, D] followed by [B, T2, H, D] along the tokens.
Tensor append_rows(const Tensor& cache, const Tensor& rows);

}  // namespace primer::layers
