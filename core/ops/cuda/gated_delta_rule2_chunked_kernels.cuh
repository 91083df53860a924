// What Gated DeltaNet-2's chunked CUDA kernels share: the scratch one call carves out of its workspace, the kernels'
// arguments, the in-chunk cumulative decay and the forward launchers the backward reuses.
//
// Per (batch, head) and chunk of 64 tokens (rows r; the last chunk zero-padded: q = k = v = 0, g = b = w = 0), with
// G_r the in-chunk cumulative log decay per key channel (stored in log2 units, G2 = G·log2 e) and G_c its last row:
//   chunk prep:  T_rs = Σ_i b_ri k_ri k_si e^{G_ri − G_si} (s < r),  A = (I + T)⁻¹,
//                Y = A (e^G ⊙ b ⊙ k),  Ū = A (w ⊙ v),  P_rs = scale Σ_i q_ri k_si e^{G_ri − G_si} (s ≤ r),
//                Q̃ = scale·e^G ⊙ q,  K̃ = e^{G_c − G} ⊙ k
//   state pass:  R = Ū − Y S;  o = Q̃ S + P R;  S ← Diag(e^{G_c}) S + K̃ᵀ R
// (the paper's chunkwise form, App. A, in the ratio form of the CPU path: no factor above 1 is ever formed). T and P
// mix key channels under per-channel decay ratios, so they cannot be a masked product as GDN's are: each block of 16
// rows is one product of operands scaled to a reference row inside the block (below: kRefRow, block_fits), and a
// block whose decay range would leave bf16's range is summed exactly per pair. The backward
// (gated_delta_rule2_chunked_backward.cu) adds a reverse state pass and per-chunk gradients.
#pragma once
#include <cuda_bf16.h>

#include <cstddef>
#include <cstdint>

#include "core/cuda_runtime.h"
#include "core/ops/cuda/gated_delta_rule2.h"
#include "core/ops/cuda/tile/mma.cuh"

namespace primer::ops::cuda_ops::gdr2 {

using bf16 = __nv_bfloat16;

constexpr int kChunk = 64;
constexpr int kBlock = 16;  // rows per sub-chunk of T and P
constexpr int kBlocks = kChunk / kBlock;
constexpr int kThreads = 256;  // 8 warps in every kernel
constexpr float kLog2e = 1.4426950408889634f;

// Scratch of one call, [BH, Tp, ·] with Tp = chunks · 64 (padded rows hold the zero-padding's values).
struct Scratch {
  bf16* Qs = nullptr;       // [BH, Tp, D] scale·e^G ⊙ q
  bf16* Ks = nullptr;       // [BH, Tp, D] e^{G_c − G} ⊙ k
  bf16* Y = nullptr;        // [BH, Tp, D] A (e^G ⊙ b ⊙ k)
  bf16* Ub = nullptr;       // [BH, Tp, D] A (w ⊙ v)
  bf16* P = nullptr;        // [BH, Tp, 64]
  float* decay = nullptr;   // [BH, chunks, D] e^{G_c}
  bf16* A = nullptr;        // [BH, Tp, 64] (I + T)⁻¹ (backward only)
  bf16* R = nullptr;        // [BH, Tp, D] Ū − Y S (backward only)
  bf16* dR = nullptr;       // [BH, Tp, D] ∂L/∂R (backward only)
  bf16* states = nullptr;   // [BH, chunks, D, D] the state at each chunk's start (backward only)
  bf16* dstates = nullptr;  // [BH, chunks, D, D] ∂L/∂(the state at each chunk's end) (backward only)
};

inline int64_t chunks_of(const GatedDelta2Shape& d) { return (d.time + kChunk - 1) / kChunk; }

// Lays the scratch out from `base` (null: only counts); returns the bytes used.
size_t carve_scratch(const GatedDelta2Shape& d, bool backward, void* base, Scratch* s);

struct Inputs {
  const bf16 *q, *k, *v;   // [B, T, H, D]
  const float *g, *b, *w;  // [B, T, H, D]
};

struct Sizes {
  int T, H, chunks;
  float scale;
};
inline Sizes sizes_of(const GatedDelta2Shape& d, float scale) {
  return {int(d.time), int(d.heads), int(chunks_of(d)), scale};
}

// The in-chunk cumulative log decay in log2 units into G[r · kGStride + i] (rows past `valid` repeat the last valid
// row: their g is 0), in two steps around the caller's cp.async wait and barrier: load_decay_async stages g's 64 rows
// (zeros past `valid`; `g_row` points at g of (b, t0, h, channel 0)), scan_decay runs down each channel's column.
template <int D, int kGStride, int kThreads>
__device__ __forceinline__ void load_decay_async(float* G, const float* g_row, int64_t row_stride, int valid) {
  static_assert(kGStride % 4 == 0, "rows of 16-byte chunks");
  constexpr int kChunksPerRow = D / 4;
  for (int c = threadIdx.x; c < kChunk * kChunksPerRow; c += kThreads) {
    const int row = c / kChunksPerRow, col = (c % kChunksPerRow) * 4;
    const bool in_range = row < valid;
    tile::cp_async_16(G + row * kGStride + col, in_range ? g_row + row * row_stride + col : g_row, in_range);
  }
}
template <int D, int kGStride> __device__ __forceinline__ void scan_decay(float* G) {
  for (int i = threadIdx.x; i < D; i += blockDim.x) {
    float acc = 0.f;
#pragma unroll 8
    for (int r = 0; r < kChunk; ++r) {
      acc += G[r * kGStride + i] * kLog2e;
      G[r * kGStride + i] = acc;
    }
  }
}

// T, P and their VJPs by 16-row blocks: block m's rows r and every key s ≤ r meet through a reference row inside the
// block, e^{G_r − G_s} = 2^{G2_r − G2_ref} · 2^{G2_ref − G2_s}, so each block is one bf16 product of scaled operands.
// The factors stay within [2^-kSafeRange, 2^kSafeRange] on the block's own rows (and only shrink toward earlier
// keys), far inside bf16's normal range, whenever the decay across the block allows it on every channel; a block
// that does not (only at extreme decays) is summed exactly per pair instead.
constexpr int kRefRow = 7;          // the reference row's place in its block
constexpr float kSafeRange = 96.f;  // log2 units
__device__ __forceinline__ int ref_row(int m) { return kBlock * m + kRefRow; }
// Keys scaled to block m's reference cover rows [0, 16m + 16), stored one block after another from key_offset(m).
constexpr int kKeyRows = kBlock * kBlocks * (kBlocks + 1) / 2;
__device__ __forceinline__ int key_offset(int m) { return kBlock * m * (m + 1) / 2; }

// Warp-collective: whether block m fits the reference scaling (every lane gets the answer).
template <int D, int kGStride> __device__ __forceinline__ bool block_fits(const float* G, int m, int lane) {
  const float* first = G + kBlock * m * kGStride;
  const float* ref = G + ref_row(m) * kGStride;
  const float* last = G + (kBlock * m + kBlock - 1) * kGStride;
  float worst = 0.f;
  for (int c = lane; c < D; c += 32) worst = fmaxf(worst, fmaxf(first[c] - ref[c], ref[c] - last[c]));
#pragma unroll
  for (int offset = 16; offset >= 1; offset >>= 1) worst = fmaxf(worst, __shfl_xor_sync(0xffffffffu, worst, offset));
  return worst <= kSafeRange;
}

// Stores (x, y) (elements v) at a swizzled offset of two bf16 tiles as hi = bf16(v) and lo = bf16(v − hi).
__device__ __forceinline__ void put_split(bf16* hi, bf16* lo, int offset, float x, float y) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(x, y);
  *reinterpret_cast<__nv_bfloat162*>(hi + offset) = h;
  *reinterpret_cast<__nv_bfloat162*>(lo + offset) = __floats2bfloat162_rn(x - __low2float(h), y - __high2float(h));
}

// Copies D floats (16-byte aligned) into shared memory (part of the caller's cp.async group).
template <int D> __device__ __forceinline__ void load_floats_async(float* smem, const float* global) {
  if (threadIdx.x < D / 4) tile::cp_async_16(smem + 4 * threadIdx.x, global + 4 * threadIdx.x, true);
}

// A call over no tokens, forward or backward: `to` (nullable) receives `from` (null: zeros) — the state, or its
// gradient, passes through unchanged.
inline void pass_state_through(const GatedDelta2Shape& d, const float* from, float* to) {
  if (!to) return;
  const size_t bytes = size_t(d.batch * d.heads * d.key_dim * d.value_dim) * sizeof(float);
  if (from)
    PRIMER_CUDA_CHECK(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToDevice, cuda::stream()));
  else
    PRIMER_CUDA_CHECK(cudaMemsetAsync(to, 0, bytes, cuda::stream()));
}

// Chunk prep for every chunk (Qs, Ks, Y, Ub, P, decay, and A when s.A is set).
void launch_chunk_prep(const GatedDelta2Shape& d, const Inputs& in, float scale, const Scratch& s);
// The sequential state pass, each CTA owning 64 value columns. Forward: o and state_out (nullable). With `store`, the
// chunk-start states and R go to the scratch for the backward (o may then be null).
void launch_state_pass(const GatedDelta2Shape& d, float scale, const Scratch& s, const float* state_in, bf16* o,
                       float* state_out, bool store);

}  // namespace primer::ops::cuda_ops::gdr2
