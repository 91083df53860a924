// FlashAttention-2 style forward (sm_80, and the fallback where the Hopper kernel of attention_forward_wgmma.cu
// does not run): one CTA per (query tile, head, batch); each warp owns 16 query rows and keeps its
// Q fragments, the output accumulator and the running max / sum in registers while K/V tiles stream through shared
// memory (cp.async, two stages). Tiles the mask hides entirely are never loaded; only tiles crossing the mask's
// edge (or the sequence end) pay for per-element masking.
#include <cmath>

#include "core/cuda_runtime.h"
#include "core/ops/cuda/attention.h"
#include "core/ops/cuda/attention_forward_wgmma.h"
#include "core/ops/cuda/attention_mask.cuh"
#include "core/ops/cuda/dependent_launch.cuh"
#include "core/ops/cuda/tile/mma.cuh"
#include "core/ops/cuda/dynamic_smem.h"
#include "core/ops/cuda/wgmma_available.h"

namespace primer::ops::cuda_ops {
namespace {

using tile::bf16;
constexpr float kLog2e = 1.4426950408889634f;

struct ForwardArgs {
  const bf16 *q, *k, *v;
  bf16* out;
  float* lse;
  int Hq, Hkv, group;
  float scale_log2;  // softmax runs in base 2: exp(x * scale) = exp2(x * scale * log2(e))
  attn::Mask mask;
};

template <int kDh, int kWarps, int kBlockN> struct ForwardTraits {
  static constexpr int kBlockM = 16 * kWarps, kThreads = 32 * kWarps;
  static constexpr int kSmemBytes = (kBlockM + 4 * kBlockN) * kDh * int(sizeof(bf16));  // Q + two stages of K, V
};

template <int kDh, int kWarps, int kBlockN> __global__ void __launch_bounds__(32 * kWarps)
    attention_forward_kernel(ForwardArgs a) {
  cuda::await_prior_grid();
  using Tr = ForwardTraits<kDh, kWarps, kBlockN>;
  constexpr int kBlockM = Tr::kBlockM, kThreads = Tr::kThreads, kNT = kBlockN / 8, kDT = kDh / 8;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* sQ = reinterpret_cast<bf16*>(smem);
  bf16* sK = sQ + kBlockM * kDh;      // [2][kBlockN][kDh]
  bf16* sV = sK + 2 * kBlockN * kDh;  // [2][kBlockN][kDh]

  const int m0 = (gridDim.x - 1 - blockIdx.x) * kBlockM;  // longest causal rows first
  const int h = blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const attn::Mask& mask = a.mask;
  const int64_t q_stride = int64_t(a.Hq) * kDh, kv_stride = int64_t(a.Hkv) * kDh;
  const bf16* q = a.q + (int64_t(b) * mask.Tq * a.Hq + h) * kDh;
  const bf16* k = a.k + (int64_t(b) * mask.Tk * a.Hkv + h / a.group) * kDh;
  const bf16* v = a.v + (int64_t(b) * mask.Tk * a.Hkv + h / a.group) * kDh;

  int key_lo, key_hi;
  mask.key_range(m0, min(m0 + kBlockM, mask.Tq), &key_lo, &key_hi);
  const int tile_begin = key_lo / kBlockN, tile_end = key_hi > key_lo ? (key_hi + kBlockN - 1) / kBlockN : tile_begin;

  float o[kDT][4] = {};
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f};  // rows g and g + 8 of this warp
  if (tile_begin < tile_end) {
    tile::load_tile_async<kBlockM, kDh, kThreads>(sQ, q + m0 * q_stride, q_stride, mask.Tq - m0);
    auto load_kv = [&](int tile, int stage) {
      const int n0 = tile * kBlockN;
      tile::load_tile_async<kBlockN, kDh, kThreads>(sK + stage * kBlockN * kDh, k + n0 * kv_stride, kv_stride,
                                                    mask.Tk - n0);
      tile::load_tile_async<kBlockN, kDh, kThreads>(sV + stage * kBlockN * kDh, v + n0 * kv_stride, kv_stride,
                                                    mask.Tk - n0);
    };
    load_kv(tile_begin, 0);
    tile::cp_async_commit();

    uint32_t qf[kDh / 16][4];
    for (int tile = tile_begin; tile < tile_end; ++tile) {
      const int stage = (tile - tile_begin) & 1;
      if (tile + 1 < tile_end) {
        load_kv(tile + 1, stage ^ 1);  // that stage was released by the previous iteration's final barrier
        tile::cp_async_commit();
        tile::cp_async_wait<1>();
      } else {
        tile::cp_async_wait<0>();
      }
      __syncthreads();
      if (tile == tile_begin) {
#pragma unroll
        for (int kk = 0; kk < kDh / 16; ++kk) tile::load_a<kDh>(qf[kk], sQ, warp * 16, kk * 16, lane);
      }
      const bf16* tK = sK + stage * kBlockN * kDh;
      const bf16* tV = sV + stage * kBlockN * kDh;

      float s[kNT][4] = {};
#pragma unroll
      for (int kk = 0; kk < kDh / 16; ++kk) {
#pragma unroll
        for (int np = 0; np < kNT / 2; ++np) {
          uint32_t bk[4];
          tile::load_b_pair_nk<kDh>(bk, tK, np * 16, kk * 16, lane);
          tile::mma_bf16(s[2 * np], qf[kk], bk[0], bk[1]);
          tile::mma_bf16(s[2 * np + 1], qf[kk], bk[2], bk[3]);
        }
      }

      const int n0 = tile * kBlockN, row0 = m0 + warp * 16 + g;
      const bool masked = !mask.tile_fully_visible(m0, kBlockM, n0, kBlockN);
#pragma unroll
      for (int j = 0; j < kNT; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          s[j][e] *= a.scale_log2;
          if (masked && !mask.visible(row0 + (e >> 1) * 8, n0 + j * 8 + 2 * t + (e & 1))) s[j][e] = -INFINITY;
        }

        // Online softmax: rescale what was accumulated so far by exp2(old max - new max).
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float mx = row_max[r];
#pragma unroll
        for (int j = 0; j < kNT; ++j) mx = fmaxf(mx, fmaxf(s[j][2 * r], s[j][2 * r + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float base = mx == -INFINITY ? 0.f : mx;  // a row with nothing visible yet stays at zero
        const float correction = exp2f(row_max[r] - base);
        row_max[r] = mx;
        row_sum[r] *= correction;
#pragma unroll
        for (int d = 0; d < kDT; ++d) {
          o[d][2 * r] *= correction;
          o[d][2 * r + 1] *= correction;
        }
#pragma unroll
        for (int j = 0; j < kNT; ++j) {
          s[j][2 * r] = exp2f(s[j][2 * r] - base);
          s[j][2 * r + 1] = exp2f(s[j][2 * r + 1] - base);
          row_sum[r] += s[j][2 * r] + s[j][2 * r + 1];
        }
      }

#pragma unroll
      for (int kk = 0; kk < kBlockN / 16; ++kk) {
        uint32_t pa[4];
        tile::accumulators_to_a<kNT>(pa, s, kk);
#pragma unroll
        for (int dp = 0; dp < kDT / 2; ++dp) {
          uint32_t bv[4];
          tile::load_b_pair_kn<kDh>(bv, tV, dp * 16, kk * 16, lane);
          tile::mma_bf16(o[2 * dp], pa, bv[0], bv[1]);
          tile::mma_bf16(o[2 * dp + 1], pa, bv[2], bv[3]);
        }
      }
      __syncthreads();
    }
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float sum = row_sum[r];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const int row = m0 + warp * 16 + g + 8 * r;
    if (row >= mask.Tq) continue;
    const float inv = sum > 0 ? 1.f / sum : 0.f;
    bf16* out_row = a.out + (int64_t(b) * mask.Tq + row) * q_stride + h * kDh;
#pragma unroll
    for (int d = 0; d < kDT; ++d)
      *reinterpret_cast<__nv_bfloat162*>(out_row + d * 8 + 2 * t) =
          __floats2bfloat162_rn(o[d][2 * r] * inv, o[d][2 * r + 1] * inv);
    if (t == 0)
      a.lse[(int64_t(b) * a.Hq + h) * mask.Tq + row] = sum > 0 ? (row_max[r] + log2f(sum)) / kLog2e : -INFINITY;
  }
}

template <int kDh, int kWarps, int kBlockN> void launch_forward(const ForwardArgs& a, int B) {
  using Tr = ForwardTraits<kDh, kWarps, kBlockN>;
  constexpr auto kernel = attention_forward_kernel<kDh, kWarps, kBlockN>;
  allow_dynamic_smem<kernel>(Tr::kSmemBytes);
  const dim3 grid((a.mask.Tq + Tr::kBlockM - 1) / Tr::kBlockM, a.Hq, B);
  cuda::launch_dependent(kernel, grid, Tr::kThreads, Tr::kSmemBytes, a);
}

}  // namespace

bool attention_two_sources_available() { return wgmma_available(); }

void attention_forward(void* out, float* lse, const void* q, const void* k, const void* v, const AttentionDims& d) {
  if (wgmma_available()) return attention_forward_wgmma(out, lse, q, k, v, d);
  const ForwardArgs a{static_cast<const bf16*>(q),
                      static_cast<const bf16*>(k),
                      static_cast<const bf16*>(v),
                      static_cast<bf16*>(out),
                      lse,
                      int(d.Hq),
                      int(d.Hkv),
                      int(d.Hq / d.Hkv),
                      d.scale * kLog2e,
                      attn::Mask::of(d)};
  if (d.Dh == 64)
    launch_forward<64, 8, 64>(a, int(d.B));
  else
    launch_forward<128, 8, 64>(a, int(d.B));
}

}  // namespace primer::ops::cuda_ops
