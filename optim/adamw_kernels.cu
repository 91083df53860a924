#include <cuda_bf16.h>

#include <algorithm>
#include <memory>

#include "core/cuda_runtime.h"
#include "core/ops/cuda/dependent_launch.cuh"
#include "core/ops/cuda/tile/block_reduce.cuh"
#include "core/storage.h"
#include "optim/adamw_kernels.h"

namespace primer::optim {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kChunk = 16384;  // elements per block: 16 float4 per thread
constexpr int kBatch = 36;         // tensors per launch: the arguments stay within the 4 KB kernel parameter limit

// A launch's tensors and where each one's chunks start among the launch's blocks (first[t] .. first[t + 1]).
template <class Item> struct Batch {
  Item tensors[kBatch];
  int64_t first[kBatch + 1];
  int count;
  int64_t chunks() const { return first[count]; }
};

// The tensor that block b works on, and the element range of its chunk.
struct ChunkOf {
  int t;
  int64_t begin, end;
  template <class Item> __device__ ChunkOf(const Batch<Item>& batch, int64_t b) {
    t = 0;
    while (b >= batch.first[t + 1]) ++t;
    begin = (b - batch.first[t]) * kChunk;
    end = min(begin + kChunk, batch.tensors[t].n);
  }
};

__device__ float clip_coefficient(const AdamWStep& s, const float* grad_sumsq) {
  if (s.max_grad_norm <= 0) return 1.0f;
  const float norm = sqrtf(*grad_sumsq);
  return norm > s.max_grad_norm ? s.max_grad_norm / (norm + 1e-6f) : 1.0f;
}

// One element of the update: the same arithmetic as adamw_update_cpu.
__device__ __forceinline__ float adamw_element(float& master, float& m, float& v, float grad, float coef, float wd,
                                               const AdamWStep& s) {
  const float g = grad * coef;
  m = s.beta1 * m + (1 - s.beta1) * g;
  v = s.beta2 * v + (1 - s.beta2) * g * g;
  const float update = (m / s.bias_correction1) / (sqrtf(v / s.bias_correction2) + s.eps);
  master = master - s.lr * (update + wd * master);
  return master;
}

__global__ void __launch_bounds__(kThreads)
    adamw_kernel(const __grid_constant__ Batch<AdamWBuffers> batch, const AdamWStep s, const float* grad_sumsq) {
  cuda::await_prior_grid();
  const ChunkOf c(batch, blockIdx.x);
  const AdamWBuffers& p = batch.tensors[c.t];
  const float coef = clip_coefficient(s, grad_sumsq);
  auto* compute = static_cast<__nv_bfloat16*>(p.compute_bf16);
  const bool vec = ((reinterpret_cast<uintptr_t>(p.master) | reinterpret_cast<uintptr_t>(p.m) |
                     reinterpret_cast<uintptr_t>(p.v) | reinterpret_cast<uintptr_t>(p.grad)) %
                        16 ==
                    0) &&
                   reinterpret_cast<uintptr_t>(compute) % 8 == 0;
  int64_t i = c.begin;
  if (vec) {  // chunks start at multiples of 4 elements, so the 16-byte alignment of the bases carries over
    for (int64_t q = c.begin / 4 + threadIdx.x; q < c.end / 4; q += kThreads) {
      float4 w = reinterpret_cast<float4*>(p.master)[q], m = reinterpret_cast<float4*>(p.m)[q];
      float4 v = reinterpret_cast<float4*>(p.v)[q];
      const float4 g = reinterpret_cast<const float4*>(p.grad)[q];
      adamw_element(w.x, m.x, v.x, g.x, coef, p.weight_decay, s);
      adamw_element(w.y, m.y, v.y, g.y, coef, p.weight_decay, s);
      adamw_element(w.z, m.z, v.z, g.z, coef, p.weight_decay, s);
      adamw_element(w.w, m.w, v.w, g.w, coef, p.weight_decay, s);
      reinterpret_cast<float4*>(p.master)[q] = w;
      reinterpret_cast<float4*>(p.m)[q] = m;
      reinterpret_cast<float4*>(p.v)[q] = v;
      if (compute) {
        const __nv_bfloat162 lo = __floats2bfloat162_rn(w.x, w.y), hi = __floats2bfloat162_rn(w.z, w.w);
        uint2 bits;
        bits.x = *reinterpret_cast<const uint32_t*>(&lo);
        bits.y = *reinterpret_cast<const uint32_t*>(&hi);
        reinterpret_cast<uint2*>(compute)[q] = bits;
      }
    }
    i = c.end / 4 * 4;
  }
  for (i += threadIdx.x; i < c.end; i += kThreads) {
    const float w = adamw_element(p.master[i], p.m[i], p.v[i], p.grad[i], coef, p.weight_decay, s);
    if (compute) compute[i] = __float2bfloat16_rn(w);
  }
}

// partial[offset + b] = Σ g² over block b's chunk.
__global__ void __launch_bounds__(kThreads)
    sumsq_chunks_kernel(const __grid_constant__ Batch<GradSpan> batch, float* partial, int64_t offset) {
  cuda::await_prior_grid();
  const ChunkOf c(batch, blockIdx.x);
  const float* g = batch.tensors[c.t].grad;
  float s = 0;
  for (int64_t i = c.begin + threadIdx.x; i < c.end; i += kThreads) s += g[i] * g[i];
  s = ops::cuda_ops::block_sum(s);
  if (threadIdx.x == 0) partial[offset + blockIdx.x] = s;
}

constexpr int kSumThreads = 1024;

// *out = Σ partial[0 .. n) in double: thread t takes t, t + 1024, ..., then a fixed tree.
__global__ void __launch_bounds__(kSumThreads) sum_chunks_kernel(const float* partial, int64_t n, float* out) {
  cuda::await_prior_grid();
  __shared__ double totals[kSumThreads];
  double s = 0;
  for (int64_t i = threadIdx.x; i < n; i += kSumThreads) s += double(partial[i]);
  totals[threadIdx.x] = s;
  __syncthreads();
  for (int stride = kSumThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) totals[threadIdx.x] += totals[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = float(totals[0]);
}

// Calls launch(batch) for consecutive batches of at most kBatch tensors with at least one element.
template <class Item, class Launch> void for_each_batch(const std::vector<Item>& items, Launch launch) {
  Batch<Item> batch{};
  auto flush = [&] {
    if (batch.count > 0) launch(batch);
    batch = Batch<Item>{};
  };
  for (const Item& t : items) {
    if (t.n == 0) continue;
    batch.tensors[batch.count] = t;
    batch.first[batch.count + 1] = batch.first[batch.count] + (t.n + kChunk - 1) / kChunk;
    if (++batch.count == kBatch) flush();
  }
  flush();
}

}  // namespace

void adamw_update_cuda(const std::vector<AdamWBuffers>& params, const AdamWStep& s, const float* grad_sumsq) {
  for_each_batch(params, [&](const Batch<AdamWBuffers>& batch) {
    cuda::launch_dependent(adamw_kernel, unsigned(batch.chunks()), kThreads, 0, batch, s, grad_sumsq);
  });
}

void grad_sumsq_cuda(const std::vector<GradSpan>& grads, float* sumsq) {
  int64_t chunks = 0;
  for (const GradSpan& g : grads) chunks += (g.n + kChunk - 1) / kChunk;
  if (chunks == 0) {
    PRIMER_CUDA_CHECK(cudaMemsetAsync(sumsq, 0, sizeof(float), cuda::stream()));
    return;
  }
  // Scratch from the stream-ordered pool; its free is ordered after the kernels below.
  const std::shared_ptr<Storage> partial =
      allocate(Device::cuda(cuda::current_device()), size_t(chunks) * sizeof(float));
  float* partial_ptr = static_cast<float*>(partial->data());
  int64_t offset = 0;
  for_each_batch(grads, [&](const Batch<GradSpan>& batch) {
    cuda::launch_dependent(sumsq_chunks_kernel, unsigned(batch.chunks()), kThreads, 0, batch, partial_ptr, offset);
    offset += batch.chunks();
  });
  cuda::launch_dependent(sum_chunks_kernel, 1, kSumThreads, 0, partial_ptr, chunks, sumsq);
}

}  // namespace primer::optim
