// What the gated delta rule's CUDA kernels share: the chunk size, the scratch tensors one call carves out of its
// workspace, the kernels' arguments and the forward-pass launchers the backward reuses (it recomputes the
// forward's chunk quantities and states instead of saving them).
//
// Per (batch, head) and chunk of 64 tokens (rows r; the last chunk zero-padded: k = v = q = 0, g = β = 0, which
// leaves the state untouched), with G the in-chunk cumulative log decay stored in log2 units (G2 = G·log2 e, so
// e^{G_r − G_j} = exp2(G2_r − G2_j)):
//   chunk prep:  L = strictly-lower(diag(β)(K Kᵀ ⊙ D)), A = (I + L)⁻¹, W = A diag(βγ) K, u = A diag(β) V,
//                P = scale · (Q Kᵀ ⊙ D) on and below the diagonal
//   state pass:  U = u − W S;  o = scale·diag(γ) Q S + P U;  S ← γ_last S + Kᵀ diag(D_{last,·}) U
// The backward adds a reverse state pass (∂L/∂U and ∂L/∂S per chunk, parallel over value columns) and one
// per-chunk gradient kernel; docs/mixers.md derives the formulas.
#pragma once
#include <cuda_bf16.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "core/cuda_runtime.h"
#include "core/ops/cuda/dynamic_smem.h"
#include "core/ops/cuda/sm_count.h"
#include "core/ops/cuda/tile/mma.cuh"
#include "core/ops/cuda/wgmma_available.h"
#include "core/ops/gated_delta_rule_dims.h"

namespace primer::ops::cuda_ops::gdr {

using bf16 = __nv_bfloat16;

constexpr int kChunk = 64;
constexpr int kThreads = 256;  // 8 warps in every kernel
constexpr float kLog2e = 1.4426950408889634f;

// Scratch of one call, [BH, Tp, ·] with Tp = chunks · 64 (padded rows hold the zero-padding's values).
struct Scratch {
  float* G2 = nullptr;      // [BH, Tp] in-chunk cumulative log decay, log2 units
  bf16* P = nullptr;        // [BH, Tp, 64] scale · (Q Kᵀ ⊙ D), lower triangle with the diagonal
  bf16* A = nullptr;        // [BH, Tp, 64] (I + L)⁻¹ (backward only)
  bf16* W = nullptr;        // [BH, Tp, K]
  bf16* u = nullptr;        // [BH, Tp, V]
  bf16* U = nullptr;        // [BH, Tp, V] corrected values u − W S (backward only)
  bf16* dU = nullptr;       // [BH, Tp, V] ∂L/∂U (backward only)
  bf16* states = nullptr;   // [BH, chunks, K, V] state at each chunk's start (backward only)
  bf16* dstates = nullptr;  // [BH, chunks, K, V] ∂L/∂(state at each chunk's end) (backward only)
  // Raw keys (GatedDeltaConfig::raw_key_eps, Kaczmarz's step) only: the prep's k̂ = r·k and v̂ = r·v in the inputs'
  // layout [B, T, H, K|V], which every later kernel reads instead of k and v, and r = 1/sqrt(‖k‖² + ε) [B, T, H].
  bf16* k_hat = nullptr;
  bf16* v_hat = nullptr;
  float* key_scale = nullptr;
  float* piece_state = nullptr;  // [B, H, K, V] the state between two pieces of a forward (ForwardPieces)
};

inline int64_t chunks_of(const GatedDeltaDims& d) { return (d.time + kChunk - 1) / kChunk; }

// The state passes' loads run two chunks ahead (three stages) where that fits and each block has a multiprocessor of
// its own: a sequential pass then waits less for its next tiles (H200, B 1, T 16384: the output pass 0.537 -> 0.517
// ms, the reverse pass 0.511 -> 0.484). Where two blocks would share a multiprocessor, a third stage's shared memory
// would cost the second one its place (value block 32 at B 4: the storing pass 0.145 -> 0.165 ms).
inline bool takes_three_stages(size_t bytes, const dim3& grid) {
  return bytes <= max_dynamic_smem() && int64_t(grid.x) * grid.y * grid.z <= sm_count();
}
// The most dynamic shared memory a block may opt in to on any device primer builds for (sm_90's 227 KB).
constexpr size_t kLargestDynamicSmem = 227 * 1024;
// launch(std::integral_constant<int, 3>{}) where takes_three_stages allows it, else launch(…<int, 2>{}); a
// three-stage kernel that no device could hold is never instantiated.
template <size_t kThreeStageBytes, class Launch> void launch_with_stages(const dim3& grid, Launch&& launch) {
  if constexpr (kThreeStageBytes <= kLargestDynamicSmem)
    if (takes_three_stages(kThreeStageBytes, grid)) return launch(std::integral_constant<int, 3>{});
  launch(std::integral_constant<int, 2>{});
}

// Lays the scratch out from `base` (null: only counts); returns the bytes used.
size_t carve_scratch(const GatedDeltaDims& d, bool backward, bool raw_keys, void* base, Scratch* s);

// The inputs every kernel reads.
struct Inputs {
  const bf16 *q, *k, *v;  // q [B, T, H, K]; k, v [B, T, H / kv_group, K|V]
  const float *g, *beta;  // [B, T, H]
  // The heads that share a key/value head (grouped-query attention's groups): head h reads k's and v's head
  // h / kv_group where a layer would otherwise copy each of them kv_group times.
  int kv_group = 1;
};

// Chunks [begin, end) of the sequence. The forward may run its prep and state pass in pieces: the prep of the first,
// then each piece's state pass beside the next piece's prep on a second stream (cuda::run_beside), since a pass (a
// CTA per value block, head and sequence) can leave most SMs idle (GatedDeltaConfig::forward_pieces).
struct ChunkRange {
  int begin, end;
};
inline ChunkRange all_chunks(const GatedDeltaDims& d) { return {0, int(chunks_of(d))}; }
// The pieces of a forward, consecutive and nearly equal: `requested` of them, or where that is 0, four where the
// state pass leaves half the SMs idle and there are at least 8 chunks, else one.
std::vector<ChunkRange> forward_pieces(const GatedDeltaDims& d, int value_block, int requested);

// Sizes the kernels index with (int: T·H·D fits easily; products that may not are taken in int64), and the chunks
// the prep and the forward's state pass walk (all of them unless a launcher passes a piece).
struct Sizes {
  int T, H, chunks;
  float scale;
  int chunk_begin, chunk_end;
};
inline Sizes sizes_of(const GatedDeltaDims& d, ChunkRange piece) {
  return {int(d.time), int(d.heads), int(chunks_of(d)), float(d.scale), piece.begin, piece.end};
}
inline Sizes sizes_of(const GatedDeltaDims& d) { return sizes_of(d, all_chunks(d)); }

// Where the key/value row of (sequence b, token t, head h) starts in k or v (head dim `dim`), and the step from one
// token's row to the next.
__host__ __device__ inline int64_t kv_offset(const Sizes& sz, const Inputs& in, int b, int t, int h, int dim) {
  return ((int64_t(b) * sz.T + t) * (sz.H / in.kv_group) + h / in.kv_group) * dim;
}
__host__ __device__ inline int64_t kv_stride(const Sizes& sz, const Inputs& in, int dim) {
  return int64_t(sz.H / in.kv_group) * dim;
}

// Copies 64 floats (16-byte aligned) into shared memory with 16 threads (part of the caller's cp.async group).
__device__ __forceinline__ void load_row_async(float* smem, const float* global) {
  if (threadIdx.x < 16) tile::cp_async_16(smem + 4 * threadIdx.x, global + 4 * threadIdx.x, true);
}

// Chunk prep for every chunk of `piece` (writes G2, P, W, u, and A when s.A is set). With s.k_hat set, k and v are
// raw: the prep scales each token's pair by r = 1/sqrt(‖k‖² + raw_key_eps) and writes k̂, v̂ and r to the scratch.
void launch_chunk_prep(const GatedDeltaDims& d, const Inputs& in, const Scratch& s, float raw_key_eps,
                       ChunkRange piece);
// What the kernels after the prep read: the inputs, with k and v replaced by the prep's k̂ and v̂ for raw keys.
inline Inputs scaled_inputs(const Inputs& in, const Scratch& s) {
  return s.k_hat ? Inputs{in.q, s.k_hat, s.v_hat, in.g, in.beta, 1} : in;  // k̂, v̂ have every head
}
// The sequential state pass over the chunks of `piece`, each CTA owning `value_block` (32, 64 or 128) value columns,
// from state_in (the state at the piece's start; null: zeros) to state_out (at its end; nullable). Forward: o (bf16
// [B, T, H, V]). Backward recompute (o null): the chunk-start states and U into the scratch; `store` (with o) writes
// those too, for a backward that keeps the forward's scratch.
void launch_state_pass(const GatedDeltaDims& d, const Inputs& in, const Scratch& s, const float* state_in, bf16* o,
                       float* state_out, int value_block, bool store, ChunkRange piece);
// The sequential passes on Hopper's warpgroup MMA, where passes_take_wgmma: key dim 128, value blocks of 32 or 64, and
// wgmma_available(). launch_state_pass takes the first (gated_delta_rule_state_pass_wgmma.cu) there; the backward
// takes the reverse pass (gated_delta_rule_reverse_pass_wgmma.cu; the mma.sync one is in gated_delta_rule_backward.cu).
bool passes_take_wgmma(const GatedDeltaDims& d, int value_block);
void launch_state_pass_wgmma(const GatedDeltaDims& d, const Inputs& in, const Scratch& s, const float* state_in,
                             bf16* o, float* state_out, int value_block, bool store, ChunkRange piece);
void launch_reverse_pass_wgmma(const GatedDeltaDims& d, const Inputs& in, const bf16* dout, const Scratch& s,
                               const float* dstate_out, float* dstate_in, int value_block);

}  // namespace primer::ops::cuda_ops::gdr
