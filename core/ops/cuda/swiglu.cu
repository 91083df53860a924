
#include "core/cuda_runtime.h"
#include "core/ops/cuda/dependent_launch.cuh"
#include "core/ops/cuda/tile/rowops_vec.cuh"
#include "core/ops/cuda/swiglu.h"

namespace primer::ops::cuda_ops {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float sigmoid(float g) { return 1.f / (1.f + expf(-g)); }

// Each thread handles packs of N elements, grid-stride over n / N packs.
template <class T, int N> __global__ void swiglu_forward_kernel(T* __restrict__ h, const T* __restrict__ gate,
                                                                const T* __restrict__ up, int64_t packs) {
  cuda::await_prior_grid();
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < packs; p += int64_t(gridDim.x) * blockDim.x) {
    Pack<T, N> g, u, out;
    g.load(gate + p * N);
    u.load(up + p * N);
#pragma unroll
    for (int k = 0; k < N; ++k) out.set(k, g[k] * sigmoid(g[k]) * u[k]);
    out.store(h + p * N);
  }
}

// dgate = dh * up * s * (1 + g * (1 - s)), dup = dh * g * s, with s = sigmoid(g).
template <class T, int N> __global__ void swiglu_backward_kernel(T* __restrict__ dgate, T* __restrict__ dup,
                                                                 const T* __restrict__ dh, const T* __restrict__ gate,
                                                                 const T* __restrict__ up, int64_t packs) {
  cuda::await_prior_grid();
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < packs; p += int64_t(gridDim.x) * blockDim.x) {
    Pack<T, N> d, g, u, dg, du;
    d.load(dh + p * N);
    g.load(gate + p * N);
    u.load(up + p * N);
#pragma unroll
    for (int k = 0; k < N; ++k) {
      const float s = sigmoid(g[k]);
      dg.set(k, d[k] * u[k] * s * (1.f + g[k] * (1.f - s)));
      du.set(k, d[k] * g[k] * s);
    }
    dg.store(dgate + p * N);
    du.store(dup + p * N);
  }
}

}  // namespace

void swiglu_forward(void* h, const void* gate, const void* up, int64_t n, DType dtype) {
  visit_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    constexpr int V = kVec16<T>;
    auto* hp = static_cast<T*>(h);
    const auto *gp = static_cast<const T*>(gate), *up_ = static_cast<const T*>(up);
    if (n % V == 0 && aligned16({h, gate, up})) {
      cuda::launch_dependent(swiglu_forward_kernel<T, V>, grid_for(n / V, kThreads), kThreads, 0, hp, gp, up_, n / V);
    } else {
      cuda::launch_dependent(swiglu_forward_kernel<T, 1>, grid_for(n, kThreads), kThreads, 0, hp, gp, up_, n);
    }
  });
}

void swiglu_backward(void* dgate, void* dup, const void* dh, const void* gate, const void* up, int64_t n, DType dtype) {
  visit_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    constexpr int V = kVec16<T>;
    auto *dgp = static_cast<T*>(dgate), *dup_ = static_cast<T*>(dup);
    const auto *dhp = static_cast<const T*>(dh), *gp = static_cast<const T*>(gate), *up_ = static_cast<const T*>(up);
    if (n % V == 0 && aligned16({dgate, dup, dh, gate, up})) {
      cuda::launch_dependent(swiglu_backward_kernel<T, V>, grid_for(n / V, kThreads), kThreads, 0, dgp, dup_, dhp, gp,
                             up_, n / V);
    } else {
      cuda::launch_dependent(swiglu_backward_kernel<T, 1>, grid_for(n, kThreads), kThreads, 0, dgp, dup_, dhp, gp, up_,
                             n);
    }
  });
}

}  // namespace primer::ops::cuda_ops
