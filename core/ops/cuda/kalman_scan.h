// CUDA launchers of ops::kalman_scan (compute stream). Per-token tensors q, k [B, T, H, N] and v, value precision,
// y, y_var [B, T, H, D] (and their gradients) are of `dtype` (f32 or bf16); the dynamics ā, p̄ [H, N, D], the states
// [B, H, N, D] and every accumulation are f32. N is a multiple of 16, at most 128; D is any size.
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace primer::ops::cuda_ops {

struct KalmanScanShape {
  int64_t batch, time, heads, slots, channels;  // B, T, H, N, D
};

// The backward needs the filters' state every kKalmanCheckpointEvery tokens, and the final one: an f32 buffer of this
// many floats (2 per filter and checkpoint: B·H·N·D·(⌈T/64⌉ + 1)·8 bytes, e.g. 546 MB at B 4, T 4096, H 16,
// N = D = 128). The forward fills it when given one (the backward then skips its own forward pass); else the
// backward fills it first.
inline constexpr int64_t kKalmanCheckpointEvery = 64;
inline int64_t kalman_scan_checkpoint_floats(const KalmanScanShape& s) {
  return 2 * s.batch * s.heads * ((s.time + kKalmanCheckpointEvery - 1) / kKalmanCheckpointEvery + 1) * s.slots *
         s.channels;
}

// checkpoints (kalman_scan_checkpoint_floats, may be null) receives the states the backward needs.
void kalman_scan_forward(const KalmanScanShape& shape, DType dtype, const void* q, const void* k, const void* v,
                         const void* value_precision, const float* a_bar, const float* p_bar, const float* precision_in,
                         const float* info_mean_in, void* y, void* y_var, float* precision_out, float* info_mean_out,
                         float* checkpoints);

// dy, dy_var, dprecision_out, dinfo_mean_out may be null (zero). dq, dk [B, T, H, N], da_bar and dp_bar are f32
// accumulators the caller zeroes; dv and dvalue_precision are written whole in `dtype`. checkpoints: filled by the
// forward from the same inputs (checkpoints_kept), or scratch the backward fills.
void kalman_scan_backward(const KalmanScanShape& shape, DType dtype, const void* dy, const void* dy_var,
                          const float* dprecision_out, const float* dinfo_mean_out, const void* q, const void* k,
                          const void* v, const void* value_precision, const float* a_bar, const float* p_bar,
                          const float* precision_in, const float* info_mean_in, float* dq, float* dk, void* dv,
                          void* dvalue_precision, float* da_bar, float* dp_bar, float* dprecision_in,
                          float* dinfo_mean_in, float* checkpoints, bool checkpoints_kept);

}  // namespace primer::ops::cuda_ops
