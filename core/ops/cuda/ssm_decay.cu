#include "core/cuda_runtime.h"
#include "core/ops/cuda/dependent_launch.cuh"
#include "core/ops/cuda/ssm_decay.h"
#include "core/ops/cuda/tile/device_types.cuh"
#include "core/ops/elementwise_math.h"

// One thread per element; the rows are short (a head count), so a grid-wide flat index keeps every lane busy.
namespace primer::ops::cuda_ops {
namespace {

constexpr int kThreads = 256;

template <class T> __global__ void __launch_bounds__(kThreads)
    forward_kernel(float* __restrict__ g, float* __restrict__ delta, const T* __restrict__ a,
                   const float* __restrict__ A_log, const float* __restrict__ dt_bias, SsmDecayDims d) {
  cuda::await_prior_grid();
  const int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= d.rows * d.params) return;
  const int64_t p = i % d.params;
  const float step = math::unary(Unary::Softplus, to_float(a[i]) + dt_bias[p]);
  g[i] = -expf(A_log[p / d.group]) * step;
  if (delta) delta[i] = step;
}

template <class T> __global__ void __launch_bounds__(kThreads)
    backward_kernel(T* __restrict__ da, float* __restrict__ dz_out, float* __restrict__ dg_g,
                    const float* __restrict__ dg, const float* __restrict__ ddelta, const T* __restrict__ a,
                    const float* __restrict__ A_log, const float* __restrict__ dt_bias, SsmDecayDims d) {
  cuda::await_prior_grid();
  const int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= d.rows * d.params) return;
  const int64_t p = i % d.params;
  const float z = to_float(a[i]) + dt_bias[p], decay_rate = expf(A_log[p / d.group]);
  const float dgi = dg ? dg[i] : 0.f;
  const float dz = ((ddelta ? ddelta[i] : 0.f) - dgi * decay_rate) * math::sigmoid(z);
  da[i] = from_float<T>(dz);
  dz_out[i] = dz;
  dg_g[i] = -dgi * decay_rate * math::unary(Unary::Softplus, z);  // dg · g
}

unsigned blocks_for(const SsmDecayDims& d) { return unsigned((d.rows * d.params + kThreads - 1) / kThreads); }

}  // namespace

void ssm_decay_forward(float* g, float* delta, const void* a, const float* A_log, const float* dt_bias,
                       const SsmDecayDims& d, DType a_dtype) {
  if (d.rows * d.params == 0) return;
  visit_float(a_dtype, [&](auto tag) {
    using T = decltype(tag);
    cuda::launch_dependent(forward_kernel<T>, blocks_for(d), kThreads, 0, g, delta, static_cast<const T*>(a), A_log,
                           dt_bias, d);
  });
}

void ssm_decay_backward(void* da, float* dz, float* dg_g, const float* dg, const float* ddelta, const void* a,
                        const float* A_log, const float* dt_bias, const SsmDecayDims& d, DType a_dtype) {
  if (d.rows * d.params == 0) return;
  visit_float(a_dtype, [&](auto tag) {
    using T = decltype(tag);
    cuda::launch_dependent(backward_kernel<T>, blocks_for(d), kThreads, 0, static_cast<T*>(da), dz, dg_g, dg, ddelta,
                           static_cast<const T*>(a), A_log, dt_bias, d);
  });
}

}  // namespace primer::ops::cuda_ops
