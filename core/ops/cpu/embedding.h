// CPU embedding gather and scatter-add (f32/f64; ids i32/i64 already range-checked by the caller).
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace primer::ops::cpu {

// out[n, :] = weight[ids[n], :] for n < n_tokens; all buffers dense.
template <class T>
void embedding(const T* weight, const void* ids, DType id_dtype, int64_t n_tokens, int64_t dim, T* out);

// dweight[ids[n], :] += dy[n, :], tokens in order.
template <class T>
void embedding_backward(const T* dy, const void* ids, DType id_dtype, int64_t n_tokens, int64_t dim, T* dweight);

}  // namespace primer::ops::cpu
