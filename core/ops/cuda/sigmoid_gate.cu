#include "core/cuda_runtime.h"
#include "core/ops/cuda/dependent_launch.cuh"
#include "core/ops/cuda/sigmoid_gate.h"
#include "core/ops/cuda/tile/device_types.cuh"
#include "core/ops/elementwise_math.h"

// One thread per element: a gate row is a head count long, so a grid-wide flat index keeps every lane busy.
namespace primer::ops::cuda_ops {
namespace {

constexpr int kThreads = 256;

template <class Ta, class Tb>
__device__ float gate_input(const Ta* __restrict__ a, const Tb* __restrict__ bias, int64_t i, int64_t params) {
  return to_float(a[i]) + (bias ? to_float(bias[i % params]) : 0.f);
}

template <class Ta, class Tb> __global__ void __launch_bounds__(kThreads)
    forward_kernel(float* __restrict__ y, const Ta* __restrict__ a, const Tb* __restrict__ bias, float offset,
                   SigmoidGateDims d) {
  cuda::await_prior_grid();
  const int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (i < d.rows * d.params) y[i] = math::sigmoid(gate_input(a, bias, i, d.params)) + offset;
}

template <class Ta, class Tb> __global__ void __launch_bounds__(kThreads)
    backward_kernel(Ta* __restrict__ da, const float* __restrict__ dy, const Ta* __restrict__ a,
                    const Tb* __restrict__ bias, SigmoidGateDims d) {
  cuda::await_prior_grid();
  const int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= d.rows * d.params) return;
  da[i] = from_float<Ta>(dy[i] * math::unary_derivative(Unary::Sigmoid, gate_input(a, bias, i, d.params)));
}

unsigned blocks_for(const SigmoidGateDims& d) { return unsigned((d.rows * d.params + kThreads - 1) / kThreads); }

// Calls f(Ta{}, Tb{}) with the device types of a and of the bias.
template <class F> void visit_types(DType a_dtype, DType bias_dtype, F&& f) {
  visit_float(a_dtype, [&](auto a_tag) { visit_float(bias_dtype, [&](auto b_tag) { f(a_tag, b_tag); }); });
}

}  // namespace

void sigmoid_gate_forward(float* y, const void* a, const void* bias, float offset, const SigmoidGateDims& d,
                          DType a_dtype, DType bias_dtype) {
  if (d.rows * d.params == 0) return;
  visit_types(a_dtype, bias_dtype, [&](auto a_tag, auto b_tag) {
    using Ta = decltype(a_tag);
    using Tb = decltype(b_tag);
    cuda::launch_dependent(forward_kernel<Ta, Tb>, blocks_for(d), kThreads, 0, y, static_cast<const Ta*>(a),
                           static_cast<const Tb*>(bias), offset, d);
  });
}

void sigmoid_gate_backward(void* da, const float* dy, const void* a, const void* bias, const SigmoidGateDims& d,
                           DType a_dtype, DType bias_dtype) {
  if (d.rows * d.params == 0) return;
  visit_types(a_dtype, bias_dtype, [&](auto a_tag, auto b_tag) {
    using Ta = decltype(a_tag);
    using Tb = decltype(b_tag);
    cuda::launch_dependent(backward_kernel<Ta, Tb>, blocks_for(d), kThreads, 0, static_cast<Ta*>(da), dy,
                           static_cast<const Ta*>(a), static_cast<const Tb*>(bias), d);
  });
}

}  // namespace primer::ops::cuda_ops
