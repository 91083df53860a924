// CUDA launchers for the embedding gather and its deterministic scatter-add (compute stream, dense buffers).
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace primer::ops::cuda_ops {

// out[n, :] = weight[ids[n], :] (f32/bf16); an id outside [0, vocab) writes a NaN row.
void embedding(const void* weight, DType dtype, const void* ids, DType id_dtype, int64_t n_tokens, int64_t vocab,
               int64_t dim, void* out);

// Scratch bytes embedding_backward needs for n_tokens tokens (sort keys, positions, radix-sort temporaries).
size_t embedding_backward_workspace_bytes(int64_t n_tokens, int64_t vocab);
// dweight[ids[n], :] += dy[n, :] (dy f32/bf16, dweight f32): stable sort by id, then each id sums its rows in token
// order. Out-of-range ids are skipped.
void embedding_backward(const void* dy, DType dtype, const void* ids, DType id_dtype, int64_t n_tokens, int64_t vocab,
                        int64_t dim, float* dweight, void* workspace, size_t workspace_bytes);

}  // namespace primer::ops::cuda_ops
