#include "core/cuda_runtime.h"
#include "core/ops/cuda/dependent_launch.cuh"
#include "core/ops/cuda/rope.h"
#include "core/ops/cuda/tile/rowops_vec.cuh"

namespace primer::ops::cuda_ops {
namespace {

constexpr int kThreads = 256;
constexpr int kHeadsPerThread = 4;  // cos/sin of one (token, frequency) pack are reused across this many heads

// One thread per (token, group of heads, pack of N frequencies): rotates the pairs (i, i + half) for i in the pack.
// The angle is one fp32 multiply, as on the CPU f32 path; sincosf (not __sincosf) stays accurate for large angles.
template <class T, int N>
__global__ void rope_kernel(T* __restrict__ y, const T* __restrict__ x, const int32_t* __restrict__ positions,
                            const float* __restrict__ inv_freq, int64_t tokens, int heads, int half, float sin_sign) {
  cuda::await_prior_grid();
  const int packs = half / N;
  const int head_groups = (heads + kHeadsPerThread - 1) / kHeadsPerThread;
  const int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (idx >= tokens * head_groups * packs) return;
  const int pack = int(idx % packs);
  const int group = int((idx / packs) % head_groups);
  const int64_t token = idx / (int64_t(packs) * head_groups);

  const float pos = float(positions[token]);
  float c[N], s[N];
#pragma unroll
  for (int k = 0; k < N; ++k) {
    sincosf(pos * inv_freq[pack * N + k], &s[k], &c[k]);
    s[k] *= sin_sign;
  }
  const int h_end = min(heads, (group + 1) * kHeadsPerThread);
  for (int h = group * kHeadsPerThread; h < h_end; ++h) {
    const int64_t base = (token * heads + h) * 2 * half + pack * N;
    Pack<T, N> a, b, ya, yb;
    a.load(x + base);
    b.load(x + base + half);
#pragma unroll
    for (int k = 0; k < N; ++k) {
      ya.set(k, a[k] * c[k] - b[k] * s[k]);
      yb.set(k, b[k] * c[k] + a[k] * s[k]);
    }
    ya.store(y + base);
    yb.store(y + base + half);
  }
}

}  // namespace

void rope(void* y, const void* x, const int32_t* positions, const float* inv_freq, int64_t tokens, int64_t heads,
          int64_t head_dim, DType dtype, bool inverse) {
  const int half = int(head_dim / 2);
  const int64_t head_groups = (heads + kHeadsPerThread - 1) / kHeadsPerThread;
  const float sin_sign = inverse ? -1.f : 1.f;
  visit_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    constexpr int V = kVec16<T>;
    auto* yp = static_cast<T*>(y);
    const auto* xp = static_cast<const T*>(x);
    // Both halves of every head start on a 16-byte boundary when half is a multiple of the pack.
    if (half % V == 0 && aligned16({x, y})) {
      const int64_t threads = tokens * head_groups * (half / V);
      cuda::launch_dependent(rope_kernel<T, V>, unsigned((threads + kThreads - 1) / kThreads), kThreads, 0, yp, xp,
                             positions, inv_freq, tokens, int(heads), half, sin_sign);
    } else {
      const int64_t threads = tokens * head_groups * half;
      cuda::launch_dependent(rope_kernel<T, 1>, unsigned((threads + kThreads - 1) / kThreads), kThreads, 0, yp, xp,
                             positions, inv_freq, tokens, int(heads), half, sin_sign);
    }
  });
}

}  // namespace primer::ops::cuda_ops
