#include <algorithm>

#include "core/cuda_runtime.h"
#include "core/ops/cuda/dependent_launch.cuh"
#include "core/ops/cuda/rmsnorm_rope.h"
#include "core/ops/cuda/sm_count.h"
#include "core/ops/cuda/tile/rowops_vec.cuh"

// A token's heads are handled by one group of R = head_dim / N consecutive lanes (N elements of a 16-byte pack per
// lane), which computes the token's cos/sin once and walks its heads: lane l holds elements [l·N, l·N + N), and the
// element it rotates with, half a head away, sits in lane l ^ R/2 of the same group (one shuffle). The norm's sum
// runs over the group's lanes by shuffles, so a head is read once and written once, with no shared memory.
namespace primer::ops::cuda_ops {
namespace {

constexpr int kThreads = 256;
// Heads whose loads are issued before the first of them is reduced (the backward reads two tensors a head).
constexpr int kHeadsInFlight = 4, kBackwardHeadsInFlight = 2;
constexpr int kBackwardBlocksPerSm = 2;  // its register budget: 128 a thread

template <int R> __device__ __forceinline__ float group_sum(float v) {
#pragma unroll
  for (int offset = R / 2; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// cos and sin of the lane's N angles pos · inv_freq[i], i = (l mod R/2)·N + k: fp32 angle, sincosf (accurate for
// large angles), as ops::rope computes them.
template <int R, int N> struct Rotation {
  float c[N], s[N];
  bool first_half;
  __device__ Rotation(int lane, float pos, const float* inv_freq) {
    first_half = lane < R / 2;
    const int i0 = (lane % (R / 2)) * N;
#pragma unroll
    for (int k = 0; k < N; ++k) sincosf(pos * inv_freq[i0 + k], &s[k], &c[k]);
  }
  // The lane's elements of the rotated head, given its own and its partner's (sign = -1: the inverse rotation).
  __device__ __forceinline__ float apply(int k, float own, float partner, float sign) const {
    return own * c[k] + (first_half ? -sign : sign) * partner * s[k];
  }
};

template <class T, int N> __device__ __forceinline__ void load_floats(const T* p, float (&v)[N]) {
  if constexpr (std::is_same_v<T, float>) {
#pragma unroll
    for (int q = 0; q < N / 4; ++q) {
      const float4 f = reinterpret_cast<const float4*>(p)[q];
      v[4 * q] = f.x, v[4 * q + 1] = f.y, v[4 * q + 2] = f.z, v[4 * q + 3] = f.w;
    }
  } else {
    Pack<T, N> pack;
    pack.load(p);
#pragma unroll
    for (int k = 0; k < N; ++k) v[k] = pack[k];
  }
}

template <class T, int R> __global__ void __launch_bounds__(kThreads)
    norm_rope_forward_kernel(T* __restrict__ y, float* __restrict__ rstd, const T* __restrict__ x,
                             const T* __restrict__ w, const int32_t* __restrict__ positions,
                             const float* __restrict__ inv_freq, int64_t tokens, int heads, float eps) {
  cuda::await_prior_grid();
  constexpr int N = kVec16<T>, D = R * N;
  const int lane = threadIdx.x % R;
  const int64_t token = int64_t(blockIdx.x) * (kThreads / R) + threadIdx.x / R;
  // Groups past the last token still run the loop: the shuffles need every lane of the warp.
  const bool active = token < tokens;
  const Rotation<R, N> rot(lane, active ? float(positions[token]) : 0.f, inv_freq);
  float wk[N];
  load_floats(w + lane * N, wk);
  for (int h0 = 0; h0 < heads; h0 += kHeadsInFlight) {
    float xs[kHeadsInFlight][N];
#pragma unroll
    for (int u = 0; u < kHeadsInFlight; ++u)
      if (active && h0 + u < heads) load_floats(x + ((token * heads + h0 + u) * D + lane * N), xs[u]);
#pragma unroll
    for (int u = 0; u < kHeadsInFlight; ++u) {
      float ss = 0;
#pragma unroll
      for (int k = 0; k < N; ++k) ss += xs[u][k] * xs[u][k];
      const float rs = rsqrtf(group_sum<R>(ss) / float(D) + eps);
      Pack<T, N> out;
#pragma unroll
      for (int k = 0; k < N; ++k) {
        const float n = wk[k] * (xs[u][k] * rs);
        out.set(k, rot.apply(k, n, __shfl_xor_sync(0xffffffffu, n, R / 2), 1.f));
      }
      if (active && h0 + u < heads) {
        const int64_t row = token * heads + h0 + u;
        out.store(y + row * D + lane * N);
        if (lane == 0) rstd[row] = rs;
      }
    }
  }
}

// g = R(−θ)·dy (the inverse rotation), û = x·rs: dx = rs·(g⊙w − û·Σ(g⊙w⊙û)/D), dw += g⊙û. Each thread keeps its N
// columns of dw over every head and token it visits; the block's groups are summed in shared memory in a fixed order
// into the block's row of dw_partial.
template <class T, class TD, int R> __global__ void __launch_bounds__(kThreads, kBackwardBlocksPerSm)
    norm_rope_backward_kernel(T* __restrict__ dx, float* __restrict__ dw_partial, const TD* __restrict__ dy,
                              const T* __restrict__ x, const T* __restrict__ w, const float* __restrict__ rstd,
                              const int32_t* __restrict__ positions, const float* __restrict__ inv_freq, int64_t tokens,
                              int heads) {
  cuda::await_prior_grid();
  constexpr int N = kVec16<T>, D = R * N, kGroups = kThreads / R;
  __shared__ float block_dw[kGroups][D];
  const int lane = threadIdx.x % R, group = threadIdx.x / R;
  float wk[N], dw[N] = {};
  load_floats(w + lane * N, wk);
  const int64_t stride = int64_t(gridDim.x) * kGroups;
  for (int64_t first = int64_t(blockIdx.x) * kGroups; first < tokens; first += stride) {
    const int64_t token = first + group;
    const bool active = token < tokens;
    const Rotation<R, N> rot(lane, active ? float(positions[token]) : 0.f, inv_freq);
    for (int h0 = 0; h0 < heads; h0 += kBackwardHeadsInFlight) {
      float xs[kBackwardHeadsInFlight][N], ds[kBackwardHeadsInFlight][N], rs[kBackwardHeadsInFlight];
#pragma unroll
      for (int u = 0; u < kBackwardHeadsInFlight; ++u) {
        const bool valid = active && h0 + u < heads;
        const int64_t row = token * heads + h0 + u;
        if (valid) {
          load_floats(x + (row * D + lane * N), xs[u]);
          load_floats(dy + (row * D + lane * N), ds[u]);
        }
        rs[u] = valid ? rstd[row] : 0.f;
      }
#pragma unroll
      for (int u = 0; u < kBackwardHeadsInFlight; ++u) {
        const bool valid = active && h0 + u < heads;
        float g[N], dot = 0;
#pragma unroll
        for (int k = 0; k < N; ++k) {
          g[k] = rot.apply(k, ds[u][k], __shfl_xor_sync(0xffffffffu, ds[u][k], R / 2), -1.f);
          dot += valid ? g[k] * wk[k] * (xs[u][k] * rs[u]) : 0.f;
        }
        const float mean_dot = group_sum<R>(dot) / float(D);
        if (!valid) continue;
        Pack<T, N> out;
#pragma unroll
        for (int k = 0; k < N; ++k) {
          const float uhat = xs[u][k] * rs[u];
          out.set(k, rs[u] * (g[k] * wk[k] - uhat * mean_dot));
          dw[k] += g[k] * uhat;
        }
        out.store(dx + (token * heads + h0 + u) * D + lane * N);
      }
    }
  }
#pragma unroll
  for (int k = 0; k < N; ++k) block_dw[group][lane * N + k] = dw[k];
  __syncthreads();
  for (int c = threadIdx.x; c < D; c += kThreads) {
    float total = 0;
    for (int gi = 0; gi < kGroups; ++gi) total += block_dw[gi][c];
    dw_partial[int64_t(blockIdx.x) * D + c] = total;
  }
}

// Calls fn(T{}, Const R) for the dtype and the lanes per head.
template <class F> void with_lanes(const NormRopeShape& s, F&& fn) {
  visit_float(s.dtype, [&](auto tag) {
    using T = decltype(tag);
    switch (s.head_dim / kVec16<T>) {
      case 2: return fn(tag, std::integral_constant<int, 2>{});
      case 4: return fn(tag, std::integral_constant<int, 4>{});
      case 8: return fn(tag, std::integral_constant<int, 8>{});
      case 16: return fn(tag, std::integral_constant<int, 16>{});
      default: return fn(tag, std::integral_constant<int, 32>{});
    }
  });
}

int64_t lanes_per_head(const NormRopeShape& s) { return s.head_dim / (16 / int64_t(dtype_size(s.dtype))); }

}  // namespace

bool norm_rope_supported(const NormRopeShape& s, std::initializer_list<const void*> ptrs) {
  if (s.dtype != DType::BF16 && s.dtype != DType::F32) return false;
  const int64_t lanes = lanes_per_head(s);
  return s.head_dim % (16 / int64_t(dtype_size(s.dtype))) == 0 && lanes >= 2 && lanes <= 32 &&
         (lanes & (lanes - 1)) == 0 && aligned16(ptrs);
}

void rmsnorm_rope_forward(void* y, float* rstd, const void* x, const void* w, const int32_t* positions,
                          const float* inv_freq, const NormRopeShape& s, float eps) {
  with_lanes(s, [&](auto tag, auto lanes) {
    using T = decltype(tag);
    constexpr int R = decltype(lanes)::value;
    const int64_t blocks = (s.tokens + kThreads / R - 1) / (kThreads / R);
    cuda::launch_dependent(norm_rope_forward_kernel<T, R>, unsigned(blocks), kThreads, 0, static_cast<T*>(y), rstd,
                           static_cast<const T*>(x), static_cast<const T*>(w), positions, inv_freq, s.tokens,
                           int(s.heads), eps);
  });
}

int64_t norm_rope_backward_blocks(const NormRopeShape& s) {
  const int64_t groups = kThreads / lanes_per_head(s);
  const int64_t needed = (s.tokens + groups - 1) / groups;
  return std::max<int64_t>(1, std::min<int64_t>(needed, int64_t(sm_count()) * kBackwardBlocksPerSm));
}

void rmsnorm_rope_backward(void* dx, float* dw_partial, const void* dy, DType dy_dtype, const void* x, const void* w,
                           const float* rstd, const int32_t* positions, const float* inv_freq, const NormRopeShape& s) {
  const unsigned blocks = unsigned(norm_rope_backward_blocks(s));
  with_lanes(s, [&](auto tag, auto lanes) {
    using T = decltype(tag);
    constexpr int R = decltype(lanes)::value;
    auto launch = [&](const auto* d) {
      cuda::launch_dependent(norm_rope_backward_kernel<T, std::remove_cv_t<std::remove_pointer_t<decltype(d)>>, R>,
                             blocks, kThreads, 0, static_cast<T*>(dx), dw_partial, d, static_cast<const T*>(x),
                             static_cast<const T*>(w), rstd, positions, inv_freq, s.tokens, int(s.heads));
    };
    if (dy_dtype == DType::F32)
      launch(static_cast<const float*>(dy));
    else
      launch(static_cast<const T*>(dy));
  });
}

}  // namespace primer::ops::cuda_ops
