#include "core/cuda_runtime.h"
#include "core/ops/cuda/tile/device_types.cuh"
#include "core/ops/cuda/key_norm_scale.h"
#include "core/ops/cuda/tile/block_reduce.cuh"

// One warp per row; lanes stride the row, so each warp's loads are contiguous. Rows are short (a head's K + V
// elements), so the row is read twice (sum, then scale) from L1/L2 rather than held in registers.
namespace primer::ops::cuda_ops {
namespace {

constexpr int kWarp = 32, kWarpsPerBlock = 8;

template <class T> __global__ void __launch_bounds__(kWarp* kWarpsPerBlock)
    forward_kernel(T* __restrict__ k_hat, T* __restrict__ v_hat, float* __restrict__ r_out, const T* __restrict__ k,
                   const T* __restrict__ v, int64_t rows, int K, int V, float eps) {
  const int64_t row = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= rows) return;  // whole warps leave together
  const T* kr = k + row * K;
  float sum_sq = 0;
  for (int i = lane; i < K; i += kWarp) {
    const float x = to_float(kr[i]);
    sum_sq += x * x;
  }
  const float r = rsqrtf(warp_sum(sum_sq) + eps);
  if (lane == 0) r_out[row] = r;
  for (int i = lane; i < K; i += kWarp) k_hat[row * K + i] = from_float<T>(r * to_float(kr[i]));
  for (int i = lane; i < V; i += kWarp) v_hat[row * V + i] = from_float<T>(r * to_float(v[row * V + i]));
}

template <class T> __global__ void __launch_bounds__(kWarp* kWarpsPerBlock)
    backward_kernel(T* __restrict__ dk, T* __restrict__ dv, const T* __restrict__ dk_hat, const T* __restrict__ dv_hat,
                    const T* __restrict__ k, const T* __restrict__ v, const float* __restrict__ r_in, int64_t rows,
                    int K, int V) {
  const int64_t row = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= rows) return;
  float dot = 0;
  for (int i = lane; i < K; i += kWarp) dot += to_float(dk_hat[row * K + i]) * to_float(k[row * K + i]);
  for (int i = lane; i < V; i += kWarp) dot += to_float(dv_hat[row * V + i]) * to_float(v[row * V + i]);
  const float r = r_in[row], c = warp_sum(dot) * r * r * r;
  for (int i = lane; i < K; i += kWarp)
    dk[row * K + i] = from_float<T>(r * to_float(dk_hat[row * K + i]) - c * to_float(k[row * K + i]));
  for (int i = lane; i < V; i += kWarp) dv[row * V + i] = from_float<T>(r * to_float(dv_hat[row * V + i]));
}

unsigned blocks_for(int64_t rows) { return unsigned((rows + kWarpsPerBlock - 1) / kWarpsPerBlock); }

}  // namespace

void key_norm_scale_forward(void* k_hat, void* v_hat, float* r, const void* k, const void* v, int64_t rows, int64_t K,
                            int64_t V, float eps, DType dtype) {
  if (rows == 0) return;
  visit_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    forward_kernel<T><<<blocks_for(rows), kWarp * kWarpsPerBlock, 0, cuda::stream()>>>(
        static_cast<T*>(k_hat), static_cast<T*>(v_hat), r, static_cast<const T*>(k), static_cast<const T*>(v), rows,
        int(K), int(V), eps);
    PRIMER_CUDA_CHECK_LAUNCH();
  });
}

void key_norm_scale_backward(void* dk, void* dv, const void* dk_hat, const void* dv_hat, const void* k, const void* v,
                             const float* r, int64_t rows, int64_t K, int64_t V, DType dtype) {
  if (rows == 0) return;
  visit_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    backward_kernel<T><<<blocks_for(rows), kWarp * kWarpsPerBlock, 0, cuda::stream()>>>(
        static_cast<T*>(dk), static_cast<T*>(dv), static_cast<const T*>(dk_hat), static_cast<const T*>(dv_hat),
        static_cast<const T*>(k), static_cast<const T*>(v), r, rows, int(K), int(V));
    PRIMER_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace primer::ops::cuda_ops
