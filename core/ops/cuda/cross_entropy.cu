#include <cmath>
#include <type_traits>

#include "core/cuda_runtime.h"
#include "core/ops/cuda/cross_entropy.h"
#include "core/ops/cuda/dependent_launch.cuh"
#include "core/ops/cuda/tile/device_types.cuh"

namespace primer::ops::cuda_ops {
namespace {

constexpr int kRowThreads = 512;
constexpr int kWarps = kRowThreads / 32;

// Running (max, sum of exp(x - max)) of a softmax denominator; merging two is exact up to rounding.
struct MaxSum {
  float max = -INFINITY, sum = 0.f;
  __device__ void add(float x) {
    if (x > max) {
      sum = sum * __expf(max - x) + 1.f;
      max = x;
    } else {
      sum += __expf(x - max);
    }
  }
  __device__ void merge(MaxSum o) {
    const float m = fmaxf(max, o.max);
    if (m == -INFINITY) return;
    sum = sum * __expf(max - m) + o.sum * __expf(o.max - m);
    max = m;
  }
};

__device__ MaxSum block_reduce(MaxSum v) {
  __shared__ MaxSum partial[kWarps];
  for (int off = 16; off > 0; off /= 2) {
    MaxSum o;
    o.max = __shfl_xor_sync(0xffffffffu, v.max, off);
    o.sum = __shfl_xor_sync(0xffffffffu, v.sum, off);
    v.merge(o);
  }
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  MaxSum total;
  for (int w = 0; w < kWarps; ++w) total.merge(partial[w]);
  return total;
}

__device__ __forceinline__ void store4(float* p, float4 v) { *reinterpret_cast<float4*>(p) = v; }
__device__ __forceinline__ void store4(__nv_bfloat16* p, float4 v) {
  __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y), hi = __floats2bfloat162_rn(v.z, v.w);
  uint2 bits;
  bits.x = *reinterpret_cast<uint32_t*>(&lo);
  bits.y = *reinterpret_cast<uint32_t*>(&hi);
  *reinterpret_cast<uint2*>(p) = bits;
}

// Visits a row as a scalar head up to 16-byte alignment, float4 body, scalar tail: f(j, x) or f4(j, x4).
// A bf16 gradient at the same index is then 8-byte aligned (both buffers come 256-byte aligned from the pool).
template <class F, class F4> __device__ void for_row(const float* z, int64_t vocab, F f, F4 f4) {
  const int64_t misaligned = int64_t(reinterpret_cast<uintptr_t>(z) % 16) / 4;  // floats past a 16-byte boundary
  const int64_t head = misaligned == 0 ? 0 : (4 - misaligned < vocab ? 4 - misaligned : vocab);
  const int64_t body = (vocab - head) / 4 * 4;
  for (int64_t j = threadIdx.x; j < head; j += blockDim.x) f(j, z[j]);
  const float4* z4 = reinterpret_cast<const float4*>(z + head);
  for (int64_t q = threadIdx.x; q < body / 4; q += blockDim.x) f4(head + 4 * q, z4[q]);
  for (int64_t j = head + body + threadIdx.x; j < vocab; j += blockDim.x) f(j, z[j]);
}

// One block per row: an online max/sum pass, then a pass writing grad_scale * (softmax - onehot).
template <class G> __global__ void __launch_bounds__(kRowThreads)
    xent_rows_kernel(const float* logits, G* grad, const int32_t* targets, int64_t vocab, int64_t ignore_index,
                     float grad_scale, float* row_loss) {
  cuda::await_prior_grid();
  const int64_t row = blockIdx.x;
  const float* z = logits + row * vocab;
  G* g = grad + row * vocab;
  const int64_t t = targets[row];
  if (t == ignore_index) {
    for_row(
        z, vocab, [&](int64_t j, float) { g[j] = from_float<G>(0.f); },
        [&](int64_t j, float4) { store4(g + j, make_float4(0.f, 0.f, 0.f, 0.f)); });
    if (threadIdx.x == 0) row_loss[row] = 0.f;
    return;
  }
  const bool valid = t >= 0 && t < vocab;
  // Read before the (possibly aliasing) gradient overwrites it; block_reduce's barrier orders the two.
  const float target_logit = valid ? z[t] : NAN;
  MaxSum acc;
  for_row(
      z, vocab, [&](int64_t, float x) { acc.add(x); },
      [&](int64_t, float4 x) {
        acc.add(x.x);
        acc.add(x.y);
        acc.add(x.z);
        acc.add(x.w);
      });
  const MaxSum total = block_reduce(acc);
  const float lse = valid ? total.max + __logf(total.sum) : NAN;
  auto grad_of = [&](int64_t j, float x) { return grad_scale * (__expf(x - lse) - (j == t ? 1.f : 0.f)); };
  for_row(
      z, vocab, [&](int64_t j, float x) { g[j] = from_float<G>(grad_of(j, x)); },
      [&](int64_t j, float4 x) {
        store4(g + j, make_float4(grad_of(j, x.x), grad_of(j + 1, x.y), grad_of(j + 2, x.z), grad_of(j + 3, x.w)));
      });
  if (threadIdx.x == 0) row_loss[row] = lse - target_logit;
}

constexpr int kSumThreads = 1024;

__global__ void __launch_bounds__(kSumThreads) sum_kernel(const float* v, int64_t n, float* out) {
  cuda::await_prior_grid();
  __shared__ double partial[kSumThreads / 32];
  double s = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += double(v[i]);
  for (int off = 16; off > 0; off /= 2) s += __shfl_xor_sync(0xffffffffu, s, off);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = s;
  __syncthreads();
  if (threadIdx.x == 0) {
    double total = 0;
    for (int w = 0; w < kSumThreads / 32; ++w) total += partial[w];
    *out = float(total);
  }
}

}  // namespace

void xent_rows(const float* logits, DType grad_type, void* grad, const int32_t* targets, int64_t rows, int64_t vocab,
               int64_t ignore_index, float grad_scale, float* row_loss) {
  if (rows == 0) return;
  auto launch = [&](auto* g) {
    cuda::launch_dependent(xent_rows_kernel<std::remove_pointer_t<decltype(g)>>, unsigned(rows), kRowThreads, 0, logits,
                           g, targets, vocab, ignore_index, grad_scale, row_loss);
  };
  if (grad_type == DType::BF16)
    launch(static_cast<__nv_bfloat16*>(grad));
  else
    launch(static_cast<float*>(grad));
}

void sum_losses(const float* row_loss, int64_t n, float* out) {
  cuda::launch_dependent(sum_kernel, 1, kSumThreads, 0, row_loss, n, out);
}

}  // namespace primer::ops::cuda_ops
