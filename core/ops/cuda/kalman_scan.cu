#include "core/cuda_runtime.h"
#include "core/ops/cuda/dependent_launch.cuh"
#include "core/ops/cuda/dynamic_smem.h"
#include "core/ops/cuda/kalman_scan.h"
#include "core/ops/cuda/tile/device_types.cuh"

// Kalman linear attention's filters on the GPU. Each filter (b, h, n, d) is a scalar recursion with no matrix
// product, so a thread steps 4 filters through time; a CTA holds every slot n of 8 channels of one (b, h), so the
// readout y[t, d] = Σ_n q[t, n] μ_t[n, d] and the backward's sums over n (dv, dΛᵛ) stay inside it. The sums over d
// (dq, dk) span D/8 CTAs and meet in f32 atomics.
//
// The filter runs in moment form — covariance P = 1/λ and mean μ = η/λ — which is the information form's recursion
// rewritten (ρλ = 1/(ā²P + p̄)):
//   m = ā²P + p̄,  r = 1/(1 + φ m),  P' = m r,  μ' = (ā μ + β m) r,   φ = k²Λᵛ, β = kΛᵛv,
// one reciprocal per step instead of two (the information form also divides η by λ to read out), every term
// positive but β m, and μ stays bounded where η and λ grow without bound (small process noise). The carried state
// crosses the op's boundary as (λ, η).
//
// Each step needs its token's inputs; every pass over the sequence copies them 16 tokens at a time into shared memory
// with all the CTA's threads (loading them step by step from global memory left every step waiting on it).
//
// The backward needs each step's incoming state in reverse order. The state every 64 tokens (and the final one) comes
// from the forward, which keeps it in a global buffer when asked (what training does), or from a forward pass of the
// backward's own; then, chunk by chunk from the end, the backward steps the chunk forward again keeping the state
// every 8 tokens in shared memory, and for each 8-token piece steps it once more into registers and walks it
// backwards: two or three forward passes and one reverse, in O(T/64) memory per filter.
namespace primer::ops::cuda_ops {
namespace {

constexpr int kSlots = 4;     // filters per thread: slots n0..n0+3 of one channel
constexpr int kChannels = 8;  // channels per CTA (the lanes of a warp that share slots)
constexpr int kPiece = 8;     // tokens per register-held piece of the backward
constexpr int kStage = 16;    // tokens staged in shared memory at a time (static shared memory stays under 48 KB)
constexpr int kChunk = int(kKalmanCheckpointEvery);  // tokens per global checkpoint
constexpr int kMaxSlots = 128;                       // N: threads = N / kSlots * kChannels
constexpr int kMaxThreads = kMaxSlots / kSlots * kChannels, kMaxWarps = kMaxThreads / 32;
constexpr int kPiecesPerChunk = kChunk / kPiece;
static_assert(kSlots * kChannels == 32, "a warp covers 4 slot groups of 8 channels");
static_assert(kChunk % kStage == 0 && kStage % kPiece == 0, "stages tile chunks, pieces tile stages");

struct Layout {
  int64_t B, T, H, N, D;
  __device__ int64_t chunks() const { return (T + kChunk - 1) / kChunk; }
  // Filter (n, d) of (b, h) at checkpoint c ≤ chunks() (the state before token c·64; c = chunks(): the final one).
  __device__ int64_t checkpoint(int64_t b, int64_t h, int64_t c, int64_t n, int64_t d) const {
    return (((b * H + h) * (chunks() + 1) + c) * N + n) * D + d;
  }
  __device__ int64_t slots(int64_t b, int64_t t, int64_t h) const { return ((b * T + t) * H + h) * N; }
  __device__ int64_t channels(int64_t b, int64_t t, int64_t h) const { return ((b * T + t) * H + h) * D; }
  __device__ int64_t filter(int64_t h, int64_t n, int64_t d) const { return (h * N + n) * D + d; }
  __device__ int64_t state(int64_t b, int64_t h, int64_t n, int64_t d) const { return ((b * H + h) * N + n) * D + d; }
};

__device__ __forceinline__ float reciprocal(float x) {
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));  // within 1 ulp; x ≥ 1 here
  return r;
}

__device__ __forceinline__ void load4(const float* p, float (&out)[kSlots]) {
  const float4 v = *reinterpret_cast<const float4*>(p);
  out[0] = v.x, out[1] = v.y, out[2] = v.z, out[3] = v.w;
}
__device__ __forceinline__ void load4(const __nv_bfloat16* p, float (&out)[kSlots]) {
  const uint2 raw = *reinterpret_cast<const uint2*>(p);
  const __nv_bfloat162 lo = *reinterpret_cast<const __nv_bfloat162*>(&raw.x),
                       hi = *reinterpret_cast<const __nv_bfloat162*>(&raw.y);
  out[0] = __low2float(lo), out[1] = __high2float(lo), out[2] = __low2float(hi), out[3] = __high2float(hi);
}

// The inputs of up to kStage tokens for the CTA, copied from global memory by all its threads at once (the
// recursion reads one token after another; loading each token's inputs on the way stalled every step on memory).
struct Stage {
  float k[kStage * kMaxSlots], q[kStage * kMaxSlots];                            // [token][slot]
  float lv[kStage * kChannels], lvv[kStage * kChannels], v[kStage * kChannels];  // [token][channel]: Λᵛ, Λᵛv, v
  float gy[kStage * kChannels], gvar[kStage * kChannels];                        // the output gradients
};

template <class T> struct TokenInputs {
  const T *q, *k, *v, *lv, *dy, *dy_var;  // q, dy, dy_var may be null: not staged (zero)
};

// Copies tokens t0 .. t0 + count − 1 of (b, h) into `stage`; the caller brackets it with barriers.
template <class T> __device__ void load_stage(Stage& stage, const TokenInputs<T>& in, const Layout& at, int64_t b,
                                              int64_t h, int64_t t0, int count) {
  const int quads = int(at.N / kSlots);
  for (int i = threadIdx.x; i < count * quads; i += blockDim.x) {
    const int s = i / quads, n = (i % quads) * kSlots;
    float x[kSlots];
    load4(in.k + at.slots(b, t0 + s, h) + n, x);
    *reinterpret_cast<float4*>(&stage.k[s * kMaxSlots + n]) = make_float4(x[0], x[1], x[2], x[3]);
    if (in.q) {
      load4(in.q + at.slots(b, t0 + s, h) + n, x);
      *reinterpret_cast<float4*>(&stage.q[s * kMaxSlots + n]) = make_float4(x[0], x[1], x[2], x[3]);
    }
  }
  for (int i = threadIdx.x; i < count * kChannels; i += blockDim.x) {
    const int s = i / kChannels;
    const int64_t d = int64_t(blockIdx.x) * kChannels + i % kChannels, at_c = at.channels(b, t0 + s, h) + d;
    const bool valid = d < at.D;  // the padding channels get zero evidence
    const float lv = valid ? to_float(in.lv[at_c]) : 0.f, v = valid ? to_float(in.v[at_c]) : 0.f;
    stage.lv[i] = lv, stage.lvv[i] = lv * v, stage.v[i] = v;
    stage.gy[i] = valid && in.dy ? to_float(in.dy[at_c]) : 0.f;
    stage.gvar[i] = valid && in.dy_var ? to_float(in.dy_var[at_c]) : 0.f;
  }
}

__device__ __forceinline__ void read4(const float* p, float (&out)[kSlots]) {
  const float4 v = *reinterpret_cast<const float4*>(p);
  out[0] = v.x, out[1] = v.y, out[2] = v.z, out[3] = v.w;
}

// One thread's filters: slots n0..n0+3 of channel d of (b, h); `valid` is false for the channels past D of the
// last CTA, which step with zero evidence and write nothing.
struct Filters {
  Layout at;
  int64_t b, h, n0, d;
  int channel;  // d within the CTA
  bool valid;
  float a[kSlots], a2[kSlots], p[kSlots];

  __device__ Filters(const Layout& layout, const float* a_bar, const float* p_bar) : at(layout) {
    b = blockIdx.z, h = blockIdx.y;
    n0 = int64_t(threadIdx.x / kChannels) * kSlots;
    channel = threadIdx.x % kChannels;
    d = int64_t(blockIdx.x) * kChannels + channel;
    valid = d < at.D;
#pragma unroll
    for (int i = 0; i < kSlots; ++i) {
      a[i] = valid ? a_bar[at.filter(h, n0 + i, d)] : 1.f;
      p[i] = valid ? p_bar[at.filter(h, n0 + i, d)] : 0.f;
      a2[i] = a[i] * a[i];
    }
  }

  // (λ, η) → (P, μ); the padding channels start at P = 1, μ = 0.
  __device__ void load_state(const float* lam, const float* eta, float (&P)[kSlots], float (&mu)[kSlots]) const {
#pragma unroll
    for (int i = 0; i < kSlots; ++i) {
      const float l = valid ? lam[at.state(b, h, n0 + i, d)] : 1.f, e = valid ? eta[at.state(b, h, n0 + i, d)] : 0.f;
      P[i] = 1.f / l;
      mu[i] = e / l;
    }
  }

  // Token s of the stage: k over the thread's slots, Λᵛ and Λᵛv of its channel.
  __device__ void evidence(const Stage& st, int s, float (&kt)[kSlots], float& lvt, float& lvvt) const {
    read4(&st.k[s * kMaxSlots + n0], kt);
    lvt = st.lv[s * kChannels + channel];
    lvvt = st.lvv[s * kChannels + channel];
  }

  __device__ void step(const Stage& st, int s, float (&P)[kSlots], float (&mu)[kSlots]) const {
    float kt[kSlots], lvt, lvvt;
    evidence(st, s, kt, lvt, lvvt);
#pragma unroll
    for (int i = 0; i < kSlots; ++i) {
      const float m = fmaf(a2[i], P[i], p[i]), r = reciprocal(fmaf(kt[i] * kt[i] * lvt, m, 1.f));
      P[i] = m * r;
      mu[i] = fmaf(kt[i] * lvvt, m, a[i] * mu[i]) * r;
    }
  }
};

// Sum over the 4 slot groups of a warp (lanes 8 apart), then over the warps through `partial` [kStage][warps][8]:
// lanes 0..7 of each warp park their channel's sum for stage token s. Finished by `flush_channel_sums`.
__device__ __forceinline__ void park_channel_sum(float x, float* partial, int s) {
  x += __shfl_xor_sync(0xffffffffu, x, 8);
  x += __shfl_xor_sync(0xffffffffu, x, 16);
  if (threadIdx.x % 32 < kChannels) partial[(s * kMaxWarps + threadIdx.x / 32) * kChannels + threadIdx.x % 32] = x;
}

// After a barrier: out[t0 + s, channel] = Σ_warps partial for the stage's `count` tokens.
template <class T> __device__ void flush_channel_sums(const float* partial, T* out, const Layout& at, int64_t b,
                                                      int64_t h, int64_t t0, int count) {
  const int warps = blockDim.x / 32;
  for (int i = threadIdx.x; i < count * kChannels; i += blockDim.x) {
    const int s = i / kChannels, c = i % kChannels;
    const int64_t d = int64_t(blockIdx.x) * kChannels + c;
    if (d >= at.D) continue;
    float sum = 0;
    for (int w = 0; w < warps; ++w) sum += partial[(s * kMaxWarps + w) * kChannels + c];
    out[at.channels(b, t0 + s, h) + d] = from_float<T>(sum);
  }
}

__device__ __forceinline__ int stage_count(int64_t t0, int64_t t_end) {
  return int(t_end - t0 < kStage ? t_end - t0 : kStage);
}

struct ForwardArgs {
  Layout at;
  const void *q, *k, *v, *lv;
  const float *a_bar, *p_bar, *lam0, *eta0;
  void *y, *y_var;
  float *lam_out, *eta_out;
  float2* checkpoints;  // may be null: the states every 64 tokens and the final one, for the backward
};

template <class T, bool kVariance> __global__ void __launch_bounds__(kMaxThreads) forward_kernel(ForwardArgs args) {
  cuda::await_prior_grid();
  __shared__ Stage stage;
  __shared__ float partial[kVariance ? 2 : 1][kStage * kMaxWarps * kChannels];
  const Layout& at = args.at;
  const Filters f(at, args.a_bar, args.p_bar);
  const TokenInputs<T> in{static_cast<const T*>(args.q),
                          static_cast<const T*>(args.k),
                          static_cast<const T*>(args.v),
                          static_cast<const T*>(args.lv),
                          nullptr,
                          nullptr};
  float P[kSlots], mu[kSlots];
  f.load_state(args.lam0, args.eta0, P, mu);
  for (int64_t t0 = 0; t0 < at.T; t0 += kStage) {
    const int count = stage_count(t0, at.T);
    __syncthreads();  // the previous stage is consumed and flushed
    load_stage(stage, in, at, f.b, f.h, t0, count);
    __syncthreads();
#pragma unroll 8
    for (int s = 0; s < count; ++s) {
      if (args.checkpoints && (t0 + s) % kChunk == 0 && f.valid)
#pragma unroll
        for (int i = 0; i < kSlots; ++i)
          args.checkpoints[at.checkpoint(f.b, f.h, (t0 + s) / kChunk, f.n0 + i, f.d)] = make_float2(P[i], mu[i]);
      f.step(stage, s, P, mu);
      float qt[kSlots], y = 0, y_var = 0;
      read4(&stage.q[s * kMaxSlots + f.n0], qt);
#pragma unroll
      for (int i = 0; i < kSlots; ++i) {
        y = fmaf(qt[i], mu[i], y);
        if (kVariance) y_var = fmaf(qt[i] * qt[i], P[i], y_var);
      }
      park_channel_sum(y, partial[0], s);
      if constexpr (kVariance) park_channel_sum(y_var, partial[1], s);
    }
    __syncthreads();
    flush_channel_sums(partial[0], static_cast<T*>(args.y), at, f.b, f.h, t0, count);
    if constexpr (kVariance) flush_channel_sums(partial[1], static_cast<T*>(args.y_var), at, f.b, f.h, t0, count);
  }
  if (!f.valid) return;
#pragma unroll
  for (int i = 0; i < kSlots; ++i) {
    const int64_t st = at.state(f.b, f.h, f.n0 + i, f.d);
    args.lam_out[st] = 1.f / P[i];
    args.eta_out[st] = mu[i] / P[i];
    if (args.checkpoints)
      args.checkpoints[at.checkpoint(f.b, f.h, at.chunks(), f.n0 + i, f.d)] = make_float2(P[i], mu[i]);
  }
}

struct BackwardArgs {
  Layout at;
  const void *dy, *dy_var;
  const float *dlam_out, *deta_out;
  const void *q, *k, *v, *lv;
  const float *a_bar, *p_bar, *lam0, *eta0;
  float *dq, *dk;
  void *dv, *dlv;
  float *da, *dp, *dlam0, *deta0;
  float2* checkpoints;    // [B, H, chunks + 1, N, D]
  bool checkpoints_kept;  // filled by the forward: no forward pass here
};

// The 8 lanes of a slot group hold dq and dk for its 4 slots, each a partial sum over the lane's channel; halving
// exchanges (4, 2, 1 lanes apart) leave lane c with the group's sum of value c (dq of slot c for c < 4, else dk of
// slot c − 4) in 7 shuffles instead of 24.
__device__ __forceinline__ float reduce_scatter_over_channels(const float (&dq)[kSlots], const float (&dk)[kSlots]) {
  const int c = threadIdx.x % kChannels;
  float x[8] = {dq[0], dq[1], dq[2], dq[3], dk[0], dk[1], dk[2], dk[3]};
#pragma unroll
  for (int half = 4; half >= 1; half /= 2) {
    const bool upper = c & half;
#pragma unroll
    for (int j = 0; j < half; ++j) {
      const float keep = upper ? x[j + half] : x[j], give = upper ? x[j] : x[j + half];
      x[j] = keep + __shfl_xor_sync(0xffffffffu, give, half);
    }
  }
  return x[0];
}

template <class T, bool kVariance> __global__ void __launch_bounds__(kMaxThreads, 2)
    backward_kernel(BackwardArgs args) {
  cuda::await_prior_grid();
  extern __shared__ float2 piece_start[];  // [kPiecesPerChunk][threads][kSlots]: state at each piece's start
  __shared__ Stage stage;
  __shared__ float partial[2][kStage * kMaxWarps * kChannels];
  const Layout& at = args.at;
  const Filters f(at, args.a_bar, args.p_bar);
  const TokenInputs<T> evidence_only{
      nullptr, static_cast<const T*>(args.k), static_cast<const T*>(args.v), static_cast<const T*>(args.lv), nullptr,
      nullptr};
  TokenInputs<T> all = evidence_only;
  all.q = static_cast<const T*>(args.q);
  all.dy = static_cast<const T*>(args.dy);
  all.dy_var = kVariance ? static_cast<const T*>(args.dy_var) : nullptr;
  const int64_t chunks = at.chunks();
  auto checkpoint_at = [&](int64_t c, int i) -> float2& {
    return args.checkpoints[at.checkpoint(f.b, f.h, c, f.n0 + i, f.d)];
  };
  auto piece_start_at = [&](int64_t piece, int i) -> float2& {
    return piece_start[(piece * blockDim.x + threadIdx.x) * kSlots + i];
  };

  // The state at each chunk's start and at the end: the forward's, or from a forward pass here.
  float P[kSlots], mu[kSlots];
  if (args.checkpoints_kept) {
#pragma unroll
    for (int i = 0; i < kSlots; ++i) {
      const float2 s = f.valid ? checkpoint_at(chunks, i) : make_float2(1.f, 0.f);
      P[i] = s.x, mu[i] = s.y;
    }
  } else {
    f.load_state(args.lam0, args.eta0, P, mu);
    for (int64_t t0 = 0; t0 < at.T; t0 += kStage) {
      const int count = stage_count(t0, at.T);
      __syncthreads();
      load_stage(stage, evidence_only, at, f.b, f.h, t0, count);
      __syncthreads();
      for (int s = 0; s < count; ++s) {
        if ((t0 + s) % kChunk == 0 && f.valid)
#pragma unroll
          for (int i = 0; i < kSlots; ++i) checkpoint_at((t0 + s) / kChunk, i) = make_float2(P[i], mu[i]);
        f.step(stage, s, P, mu);
      }
    }
  }

  // Adjoints of the carried (P, μ), from those of the final (λ, η) = (1/P, μ/P).
  float gP[kSlots], gmu[kSlots], ga[kSlots] = {}, gp[kSlots] = {};
#pragma unroll
  for (int i = 0; i < kSlots; ++i) {
    const int64_t st = at.state(f.b, f.h, f.n0 + i, f.d);
    const float glam = f.valid && args.dlam_out ? args.dlam_out[st] : 0.f,
                geta = f.valid && args.deta_out ? args.deta_out[st] : 0.f;
    gP[i] = -(glam + geta * mu[i]) / (P[i] * P[i]);
    gmu[i] = geta / P[i];
  }

  for (int64_t c = chunks - 1; c >= 0; --c) {
    const int64_t chunk_start = c * kChunk, chunk_end = at.T < chunk_start + kChunk ? at.T : chunk_start + kChunk;
    // The chunk forward again, keeping the state at each piece's start.
#pragma unroll
    for (int i = 0; i < kSlots; ++i) {
      const float2 s = f.valid ? checkpoint_at(c, i) : make_float2(1.f, 0.f);
      P[i] = s.x, mu[i] = s.y;
    }
    for (int64_t t0 = chunk_start; t0 < chunk_end; t0 += kStage) {
      const int count = stage_count(t0, chunk_end);
      __syncthreads();
      load_stage(stage, evidence_only, at, f.b, f.h, t0, count);
      __syncthreads();
      for (int s = 0; s < count; ++s) {
        if ((t0 + s - chunk_start) % kPiece == 0)
#pragma unroll
          for (int i = 0; i < kSlots; ++i)
            piece_start_at((t0 + s - chunk_start) / kPiece, i) = make_float2(P[i], mu[i]);
        f.step(stage, s, P, mu);
      }
    }
    // Then stage by stage and piece by piece from the end: each piece forward into registers, then backwards.
    for (int64_t t0 = chunk_start + (chunk_end - 1 - chunk_start) / kStage * kStage; t0 >= chunk_start; t0 -= kStage) {
      const int count = stage_count(t0, chunk_end);
      __syncthreads();  // the previous stage is consumed and flushed
      load_stage(stage, all, at, f.b, f.h, t0, count);
      __syncthreads();
      for (int p0 = (count - 1) / kPiece * kPiece; p0 >= 0; p0 -= kPiece) {
        float P_in[kPiece][kSlots], mu_in[kPiece][kSlots];  // each token's incoming state
#pragma unroll
        for (int i = 0; i < kSlots; ++i) {
          const float2 s = piece_start_at((t0 + p0 - chunk_start) / kPiece, i);
          P[i] = s.x, mu[i] = s.y;
        }
#pragma unroll
        for (int s = 0; s < kPiece; ++s) {
#pragma unroll
          for (int i = 0; i < kSlots; ++i) P_in[s][i] = P[i], mu_in[s][i] = mu[i];
          if (p0 + s < count) f.step(stage, p0 + s, P, mu);
        }
#pragma unroll
        for (int s = kPiece - 1; s >= 0; --s) {
          const int ts = p0 + s;  // the token within the stage
          float dq[kSlots] = {}, dk[kSlots] = {}, dv = 0, dlv = 0;
          if (ts < count) {  // the same for the whole CTA
            float kt[kSlots], qt[kSlots], lvt, lvvt;
            f.evidence(stage, ts, kt, lvt, lvvt);
            read4(&stage.q[ts * kMaxSlots + f.n0], qt);
            const float vt = stage.v[ts * kChannels + f.channel], gy = stage.gy[ts * kChannels + f.channel],
                        gvar = kVariance ? stage.gvar[ts * kChannels + f.channel] : 0.f;
#pragma unroll
            for (int i = 0; i < kSlots; ++i) {
              const float phi = kt[i] * kt[i] * lvt, beta = kt[i] * lvvt;
              const float m = fmaf(f.a2[i], P_in[s][i], f.p[i]), r = reciprocal(fmaf(phi, m, 1.f));
              const float u = fmaf(beta, m, f.a[i] * mu_in[s][i]), P_out = m * r, mu_out = u * r;
              // Readouts y = Σ q μ', y_var = Σ q² P' add to the adjoints of the outgoing state.
              const float g_mu = fmaf(qt[i], gy, gmu[i]), g_P = kVariance ? fmaf(qt[i] * qt[i], gvar, gP[i]) : gP[i];
              dq[i] = kVariance ? fmaf(gy, mu_out, 2.f * qt[i] * gvar * P_out) : gy * mu_out;
              // Through P' = m r, μ' = u r, r = 1/(1 + φ m), u = ā μ + β m, m = ā² P + p̄.
              const float g_u = g_mu * r, g_r = fmaf(g_mu, u, g_P * m), g_s = -g_r * r * r;
              const float g_m = fmaf(g_P, r, fmaf(g_u, beta, g_s * phi));
              const float g_phi = g_s * m, g_beta = g_u * m;
              ga[i] += fmaf(g_u, mu_in[s][i], 2.f * f.a[i] * P_in[s][i] * g_m);
              gp[i] += g_m;
              gmu[i] = g_u * f.a[i];
              gP[i] = g_m * f.a2[i];
              dk[i] = fmaf(2.f * kt[i] * lvt, g_phi, lvvt * g_beta);
              dlv = fmaf(kt[i] * kt[i], g_phi, fmaf(kt[i] * vt, g_beta, dlv));
              dv = fmaf(kt[i] * lvt, g_beta, dv);
            }
          }
          const float mine = reduce_scatter_over_channels(dq, dk);
          if (ts < count) {
            float* target = f.channel < kSlots ? args.dq : args.dk;
            atomicAdd(target + at.slots(f.b, t0 + ts, f.h) + f.n0 + f.channel % kSlots, mine);
            park_channel_sum(dv, partial[0], ts);
            park_channel_sum(dlv, partial[1], ts);
          }
        }
      }
      __syncthreads();
      flush_channel_sums(partial[0], static_cast<T*>(args.dv), at, f.b, f.h, t0, count);
      flush_channel_sums(partial[1], static_cast<T*>(args.dlv), at, f.b, f.h, t0, count);
    }
  }
  if (!f.valid) return;
#pragma unroll
  for (int i = 0; i < kSlots; ++i) {
    // (P₀, μ₀) = (1/λ₀, η₀/λ₀).
    const int64_t st = at.state(f.b, f.h, f.n0 + i, f.d);
    const float l = args.lam0[st], e = args.eta0[st];
    args.dlam0[st] = -(gP[i] + gmu[i] * e) / (l * l);
    args.deta0[st] = gmu[i] / l;
    atomicAdd(args.da + at.filter(f.h, f.n0 + i, f.d), ga[i]);
    atomicAdd(args.dp + at.filter(f.h, f.n0 + i, f.d), gp[i]);
  }
}

Layout layout_of(const KalmanScanShape& s) { return {s.batch, s.time, s.heads, s.slots, s.channels}; }

dim3 grid_of(const KalmanScanShape& s) {
  return dim3(unsigned((s.channels + kChannels - 1) / kChannels), unsigned(s.heads), unsigned(s.batch));
}

// N is checked by the op (ops::kalman_scan): a multiple of 16 up to 128, so every warp is whole.
unsigned threads_of(const KalmanScanShape& s) { return unsigned(s.slots / kSlots * kChannels); }

// Calls f(T{}) for the per-token storage type: bf16 or f32 (the op admits no other).
template <class F> void visit_token_type(DType dtype, F&& f) {
  if (dtype == DType::BF16)
    f(__nv_bfloat16{});
  else
    f(float{});
}

}  // namespace

void kalman_scan_forward(const KalmanScanShape& s, DType dtype, const void* q, const void* k, const void* v,
                         const void* value_precision, const float* a_bar, const float* p_bar, const float* precision_in,
                         const float* info_mean_in, void* y, void* y_var, float* precision_out, float* info_mean_out,
                         float* checkpoints) {
  const unsigned threads = threads_of(s);
  if (s.batch == 0 || s.heads == 0 || s.channels == 0) return;
  const ForwardArgs args{layout_of(s),
                         q,
                         k,
                         v,
                         value_precision,
                         a_bar,
                         p_bar,
                         precision_in,
                         info_mean_in,
                         y,
                         y_var,
                         precision_out,
                         info_mean_out,
                         reinterpret_cast<float2*>(checkpoints)};
  visit_token_type(dtype, [&](auto tag) {
    using T = decltype(tag);
    if (y_var) {
      cuda::launch_dependent(forward_kernel<T, true>, grid_of(s), threads, 0, args);
    } else {
      cuda::launch_dependent(forward_kernel<T, false>, grid_of(s), threads, 0, args);
    }
  });
}

void kalman_scan_backward(const KalmanScanShape& s, DType dtype, const void* dy, const void* dy_var,
                          const float* dprecision_out, const float* dinfo_mean_out, const void* q, const void* k,
                          const void* v, const void* value_precision, const float* a_bar, const float* p_bar,
                          const float* precision_in, const float* info_mean_in, float* dq, float* dk, void* dv,
                          void* dvalue_precision, float* da_bar, float* dp_bar, float* dprecision_in,
                          float* dinfo_mean_in, float* checkpoints, bool checkpoints_kept) {
  const unsigned threads = threads_of(s);
  if (s.batch == 0 || s.heads == 0 || s.channels == 0) return;
  const BackwardArgs args{layout_of(s),
                          dy,
                          dy_var,
                          dprecision_out,
                          dinfo_mean_out,
                          q,
                          k,
                          v,
                          value_precision,
                          a_bar,
                          p_bar,
                          precision_in,
                          info_mean_in,
                          dq,
                          dk,
                          dv,
                          dvalue_precision,
                          da_bar,
                          dp_bar,
                          dprecision_in,
                          dinfo_mean_in,
                          reinterpret_cast<float2*>(checkpoints),
                          checkpoints_kept};
  const int smem = int(kPiecesPerChunk * threads * kSlots * sizeof(float2));
  constexpr int kMaxSmem = int(kPiecesPerChunk * kMaxThreads * kSlots * sizeof(float2));
  visit_token_type(dtype, [&](auto tag) {
    using T = decltype(tag);
    if (dy_var) {
      allow_dynamic_smem<backward_kernel<T, true>>(kMaxSmem);
      cuda::launch_dependent(backward_kernel<T, true>, grid_of(s), threads, smem, args);
    } else {
      allow_dynamic_smem<backward_kernel<T, false>>(kMaxSmem);
      cuda::launch_dependent(backward_kernel<T, false>, grid_of(s), threads, smem, args);
    }
  });
}

}  // namespace primer::ops::cuda_ops
