#include "core/cuda_runtime.h"
#include "core/ops/cuda/dependent_launch.cuh"
#include "core/ops/cuda/dynamic_smem.h"
#include "core/ops/cuda/gated_delta_rule2.h"
#include "core/ops/cuda/tile/device_types.cuh"

// Gated DeltaNet-2's recurrence on the GPU, token by token in f32:
//   S̄ = Diag(α_t) S,  ρ_t = w_t⊙v_t − S̄ᵀ(b_t⊙k_t),  S_t = S̄ + k_t ρ_tᵀ,  o_t = scale · S_tᵀ q_t
// The value columns of S evolve independently given the token's row vectors (α, b⊙k, k, q), so a warp owns kCols
// columns of one (b, h) with all K rows spread over its lanes (row i·32 + lane, R = ⌈K/32⌉ rows per lane). The two
// sums over rows a token needs per column (b⊙k·S̄ and q·S̄; o then adds ρ·(q·k)) meet in one butterfly that leaves
// each lane with one of the 2·kCols totals (log2 of them halving exchanges instead of a full reduction per total).
//
// This is the recurrent form, not the paper's chunked WY form: no tensor-core products, K·V·(4 FMA) per token and
// head. It is exact to f32 rounding and linear in T, and it is the first CUDA path of the mixer; the chunked kernels
// are the faster design (docs/mixers.md, "Left to do").
//
// The backward walks the tokens in reverse with the state gradient dS in registers. It needs each token's incoming
// state: a forward pass keeps ρ_t for every token and the state every kBlock tokens in a global scratch; then, block by
// block from the end, the block is stepped forward again (S_t = α_t S + k_t ρ_tᵀ, no sums once ρ is known) keeping the
// state every kPiece tokens in shared memory, and each piece once more keeping every token's incoming state, which the
// reverse walk reads; each piece's inputs are fetched into registers while the previous piece is computed. The sums
// over value columns (dq, dk, db, dg) span several warps and CTAs: each warp parks its sums per token in shared
// memory, the CTA adds them up once per piece and adds that into global f32 accumulators. (H100, B 4, T 4096, H 16,
// K = V = 128, f32: shared-memory f32 atomics from the four warps and one load latency per staged element had the
// backward at 38.9 ms; per-warp sums and batched loads 24.5 ms; the prefetch 19.3 ms.)
namespace primer::ops::cuda_ops {
namespace {

constexpr int kCols = 4;   // value columns per warp
constexpr int kWarps = 4;  // warps per CTA
constexpr int kThreads = 32 * kWarps;
constexpr int kCtaCols = kCols * kWarps;  // value columns per CTA
constexpr int kStage = 16;                // tokens per staged load of the forward
constexpr int kPiece = 8;                 // tokens per piece of the backward
constexpr int kBlock = int(kGatedDelta2CheckpointEvery);
constexpr int kPiecesPerBlock = kBlock / kPiece;
constexpr int kMaxRowsPerLane = 4;  // K ≤ 128
constexpr unsigned kFull = 0xffffffffu;
static_assert(kBlock % kPiece == 0, "pieces tile a block");
static_assert(kCtaCols == kGatedDelta2CtaColumns, "the scratch size (gated_delta_rule2.h) assumes these tiles");

struct Layout {
  int64_t B, T, H, K, V;
  __device__ int64_t key(int64_t b, int64_t t, int64_t h) const { return ((b * T + t) * H + h) * K; }
  __device__ int64_t value(int64_t b, int64_t t, int64_t h) const { return ((b * T + t) * H + h) * V; }
  __device__ int64_t state(int64_t b, int64_t h, int64_t r, int64_t c) const { return ((b * H + h) * K + r) * V + c; }
  __host__ __device__ int64_t blocks() const { return (T + kBlock - 1) / kBlock; }
};

// Where a thread sits: (b, h) from blockIdx.x, the warp's first value column from blockIdx.y.
struct Tile {
  int64_t b, h, col0;
  int warp, lane;
  __device__ explicit Tile(const Layout& at) {
    b = int64_t(blockIdx.x) / at.H, h = int64_t(blockIdx.x) % at.H;
    warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
    col0 = int64_t(blockIdx.y) * kCtaCols + warp * kCols;
  }
  __device__ int row(int i) const { return i * 32 + lane; }
  __device__ int cta_col(int j) const { return warp * kCols + j; }
};

template <int R> using StateRegs = float[R][kCols];

template <int R> __device__ void load_state(const Layout& at, const Tile& tl, const float* src, StateRegs<R>& s) {
#pragma unroll
  for (int i = 0; i < R; ++i)
#pragma unroll
    for (int j = 0; j < kCols; ++j) {
      const int64_t r = tl.row(i), c = tl.col0 + j;
      s[i][j] = src && r < at.K && c < at.V ? src[at.state(tl.b, tl.h, r, c)] : 0.f;
    }
}

template <int R> __device__ void store_state(const Layout& at, const Tile& tl, const StateRegs<R>& s, float* dst) {
#pragma unroll
  for (int i = 0; i < R; ++i)
#pragma unroll
    for (int j = 0; j < kCols; ++j) {
      const int64_t r = tl.row(i), c = tl.col0 + j;
      if (r < at.K && c < at.V) dst[at.state(tl.b, tl.h, r, c)] = s[i][j];
    }
}

// A warp's R × kCols state in "lane-native" order (lane fastest), for copies that only this lane reads back: the
// global checkpoints and the backward's shared-memory states. `tile` points at the warp's first float.
template <int R> __device__ void put_tile(float* tile, int lane, const StateRegs<R>& s) {
#pragma unroll
  for (int i = 0; i < R; ++i)
#pragma unroll
    for (int j = 0; j < kCols; ++j) tile[(i * kCols + j) * 32 + lane] = s[i][j];
}
template <int R> __device__ void get_tile(const float* tile, int lane, StateRegs<R>& s) {
#pragma unroll
  for (int i = 0; i < R; ++i)
#pragma unroll
    for (int j = 0; j < kCols; ++j) s[i][j] = tile[(i * kCols + j) * 32 + lane];
}
template <int R> constexpr int kTileFloats = R* kCols * 32;

// The global checkpoint of block `blk` for this thread's warp.
template <int R> __device__ int64_t checkpoint_offset(const Layout& at, const Tile& tl, int64_t blk) {
  const int64_t groups = int64_t(gridDim.y) * kWarps, group = int64_t(blockIdx.y) * kWarps + tl.warp;
  return ((int64_t(blockIdx.x) * at.blocks() + blk) * groups + group) * kTileFloats<R>;
}

// Sums N values over the warp so that lane l ends with the total of value l >> (5 − log2 N): each halving exchange
// sends the half the partner keeps (N/2 + N/4 + … shuffles instead of 5·N); v is consumed.
template <int N> __device__ __forceinline__ float reduce_scatter(float (&v)[N], int lane) {
  static_assert(N >= 1 && N <= 32 && (N & (N - 1)) == 0, "a power of two up to the warp size");
  int n = N;
#pragma unroll
  for (int offset = 16; offset >= 1; offset >>= 1) {
    if (n > 1) {
      const bool upper = lane & offset;
#pragma unroll
      for (int i = 0; i < N / 2; ++i)
        if (i < n / 2) {
          const float keep = upper ? v[i + n / 2] : v[i], send = upper ? v[i] : v[i + n / 2];
          v[i] = keep + __shfl_xor_sync(kFull, send, offset);
        }
      n /= 2;
    } else {
      v[0] += __shfl_xor_sync(kFull, v[0], offset);
    }
  }
  return v[0];
}
template <int N> constexpr int kScatterShift = N == 1 ? 5 : N == 2 ? 4 : N == 4 ? 3 : N == 8 ? 2 : N == 16 ? 1 : 0;

// The row vectors of `n` tokens (zero for the padding rows past K, whose state stays zero) and the CTA's value
// columns, copied to shared memory by all threads; the caller brackets the copy with barriers.
template <int R, int n> struct Rows { float q[n][32 * R], k[n][32 * R], b[n][32 * R], alpha[n][32 * R]; };

// kPer row elements per thread (element i = first + u·kThreads of the stage's [token][row] grid), fetched into
// registers and later stored to shared memory: every load is issued before the first store, so a stage waits out
// one memory latency instead of one per element.
template <int kPer> struct RowFetch {
  float q[kPer], k[kPer], b[kPer], g[kPer];

  template <class T> __device__ void fetch(const Layout& at, const Tile& tl, const T* q_, const T* k_, const float* g_,
                                           const float* b_, int64_t t0, int count, int padded, int first) {
#pragma unroll
    for (int u = 0; u < kPer; ++u) {
      const int i = first + u * kThreads, s = i / padded, r = i % padded;
      const bool valid = s < count && r < at.K;
      const int64_t at_r = valid ? at.key(tl.b, t0 + s, tl.h) + r : 0;
      q[u] = valid ? to_float(q_[at_r]) : 0.f;
      k[u] = valid ? to_float(k_[at_r]) : 0.f;
      b[u] = valid ? b_[at_r] : 0.f;
      g[u] = valid ? g_[at_r] : 0.f;  // α = 1 on the padding rows, whose state stays zero
    }
  }
  template <int R, int n> __device__ void store(Rows<R, n>& rows, int count, int first) const {
    constexpr int kPadded = 32 * R;
#pragma unroll
    for (int u = 0; u < kPer; ++u) {
      const int i = first + u * kThreads, s = i / kPadded, r = i % kPadded;
      if (s < count) {
        rows.q[s][r] = q[u];
        rows.k[s][r] = k[u];
        rows.b[s][r] = b[u];
        rows.alpha[s][r] = expf(g[u]);
      }
    }
  }
};

// The forward's stage, 8 elements per thread at a time (all 16 tokens' at once would take the registers of two of
// the four CTAs an SM holds).
template <class T, int R, int n> __device__ void load_rows(Rows<R, n>& rows, const Layout& at, const Tile& tl,
                                                           const T* q, const T* k, const float* g, const float* b,
                                                           int64_t t0, int count) {
  constexpr int kPadded = 32 * R, kBatch = 8;
  for (int first = int(threadIdx.x); first < count * kPadded; first += kBatch * kThreads) {
    RowFetch<kBatch> batch;
    batch.fetch(at, tl, q, k, g, b, t0, count, kPadded, first);
    batch.store(rows, count, first);
  }
}

// Value column c of the CTA for token t0 + s, or zero past V.
template <class T> __device__ float column(const T* x, const Layout& at, const Tile& tl, int64_t t0, int s, int c) {
  const int64_t col = int64_t(blockIdx.y) * kCtaCols + c;
  return col < at.V ? to_float(x[at.value(tl.b, t0 + s, tl.h) + col]) : 0.f;
}

// ---------------------------------------------------------------------------------------------------------------
// Forward

struct ForwardArgs {
  Layout at;
  const void *q, *k, *v;
  const float *g, *b, *w, *state_in;
  float scale;
  void* o;             // null: not written (the backward's own forward pass)
  float* state_out;    // may be null
  float* rho;          // kTrain: ρ [B, T, H, V]
  float* checkpoints;  // kTrain: the state at the start of every block
};

template <int R> struct ForwardStage {
  Rows<R, kStage> rows;
  float wv[kStage][kCtaCols];
  float qk[kStage];
};

// Four CTAs per SM (128 registers a thread): the recurrence hides its latency behind other warps.
template <class T, int R, bool kTrain> __global__ void __launch_bounds__(kThreads, 4)
    forward_kernel(const ForwardArgs a) {
  cuda::await_prior_grid();
  __shared__ ForwardStage<R> st;
  const Layout& at = a.at;
  const Tile tl(at);
  const T *q = static_cast<const T*>(a.q), *k = static_cast<const T*>(a.k), *v = static_cast<const T*>(a.v);
  float s[R][kCols];
  load_state<R>(at, tl, a.state_in, s);
  constexpr int kSums = 2 * kCols, kShift = kScatterShift<kSums>;
  const int idx = tl.lane >> kShift;  // the total this lane ends with
  const bool is_rho = idx < kCols;    // b⊙k·S̄ of column idx, else q·S̄ of column idx − kCols
  const int my_col = is_rho ? idx : idx - kCols;
  const bool leader = (tl.lane & ((1 << kShift) - 1)) == 0;  // one lane per total writes it
  const int64_t out_col = tl.col0 + my_col;

  for (int64_t t0 = 0; t0 < at.T; t0 += kStage) {
    const int count = int(min(int64_t(kStage), at.T - t0));
    __syncthreads();
    load_rows<T, R, kStage>(st.rows, at, tl, q, k, a.g, a.b, t0, count);
    for (int i = int(threadIdx.x); i < count * kCtaCols; i += kThreads) {
      const int s_ = i / kCtaCols, c = i % kCtaCols;
      st.wv[s_][c] = column(a.w, at, tl, t0, s_, c) * column(v, at, tl, t0, s_, c);
    }
    __syncthreads();
    for (int s_ = tl.warp; s_ < count; s_ += kWarps) {  // q·k of each token, for the readout
      float dot = 0.f;
      for (int r = tl.lane; r < 32 * R; r += 32) dot = fmaf(st.rows.q[s_][r], st.rows.k[s_][r], dot);
#pragma unroll
      for (int offset = 16; offset >= 1; offset >>= 1) dot += __shfl_xor_sync(kFull, dot, offset);
      if (tl.lane == 0) st.qk[s_] = dot;
    }
    __syncthreads();

    for (int ts = 0; ts < count; ++ts) {
      const int64_t t = t0 + ts;
      if constexpr (kTrain)
        if (t % kBlock == 0) put_tile<R>(a.checkpoints + checkpoint_offset<R>(at, tl, t / kBlock), tl.lane, s);
      float sums[kSums];
#pragma unroll
      for (int j = 0; j < kSums; ++j) sums[j] = 0.f;
      float kr[R];
#pragma unroll
      for (int i = 0; i < R; ++i) {
        const int r = tl.row(i);
        const float alpha = st.rows.alpha[ts][r], bk = st.rows.b[ts][r] * st.rows.k[ts][r], qr = st.rows.q[ts][r];
        kr[i] = st.rows.k[ts][r];
#pragma unroll
        for (int j = 0; j < kCols; ++j) {
          s[i][j] *= alpha;
          sums[j] = fmaf(bk, s[i][j], sums[j]);
          sums[kCols + j] = fmaf(qr, s[i][j], sums[kCols + j]);
        }
      }
      const float total = reduce_scatter<kSums>(sums, tl.lane);
      const float mine = is_rho ? st.wv[ts][tl.cta_col(my_col)] - total : total;
      float rho[kCols];
#pragma unroll
      for (int j = 0; j < kCols; ++j) rho[j] = __shfl_sync(kFull, mine, j << kShift);
      const float rho_of_mine = __shfl_sync(kFull, mine, (tl.lane - (kCols << kShift)) & 31);
      if (leader && out_col < at.V) {
        if (!is_rho && a.o)
          static_cast<T*>(a.o)[at.value(tl.b, t, tl.h) + out_col] =
              from_float<T>(a.scale * fmaf(rho_of_mine, st.qk[ts], total));
        if constexpr (kTrain)
          if (is_rho) a.rho[at.value(tl.b, t, tl.h) + out_col] = mine;
      }
#pragma unroll
      for (int i = 0; i < R; ++i)
#pragma unroll
        for (int j = 0; j < kCols; ++j) s[i][j] = fmaf(kr[i], rho[j], s[i][j]);
    }
  }
  if (a.state_out) store_state<R>(at, tl, s, a.state_out);
}

// ---------------------------------------------------------------------------------------------------------------
// Backward

struct BackwardArgs {
  Layout at;
  const void* dout;
  const float* dstate_out;
  const void *q, *k, *v;
  const float *g, *b, *w;
  float scale;
  float *dq, *dk;
  void* dv;
  float *dg, *db, *dw, *dstate_in;
  const float *rho, *checkpoints;
};

// The backward's shared memory, carved from the dynamic allocation.
template <int R> struct BackwardSmem {
  static constexpr int kPadded = 32 * R;
  static constexpr int kTile = kTileFloats<R>;
  Rows<R, kPiece>* rows;
  float (*v)[kCtaCols], (*w)[kCtaCols], (*rho)[kCtaCols], (*dout)[kCtaCols];
  float* sub;     // [piece][warp][tile]: the state at the start of each piece of the block (piece 0: the checkpoint)
  float* states;  // [token][warp][tile]: each token's incoming state within the piece
  float* partial;  // [warp][token][4][kPadded]: each warp's sums over its columns of S_t·do, dS·ρ, S̄·dρ, dS̄·S_{t−1}

  static constexpr int64_t floats() {
    return sizeof(Rows<R, kPiece>) / sizeof(float) + 4 * kPiece * kCtaCols +
           int64_t(kPiecesPerBlock + kPiece) * kWarps * kTile + int64_t(kWarps) * kPiece * 4 * kPadded;
  }
  __device__ explicit BackwardSmem(float* base) {
    rows = reinterpret_cast<Rows<R, kPiece>*>(base);
    float* p = base + sizeof(Rows<R, kPiece>) / sizeof(float);
    v = reinterpret_cast<float(*)[kCtaCols]>(p), p += kPiece * kCtaCols;
    w = reinterpret_cast<float(*)[kCtaCols]>(p), p += kPiece * kCtaCols;
    rho = reinterpret_cast<float(*)[kCtaCols]>(p), p += kPiece * kCtaCols;
    dout = reinterpret_cast<float(*)[kCtaCols]>(p), p += kPiece * kCtaCols;
    sub = p, p += kPiecesPerBlock * kWarps * kTile;
    states = p, p += kPiece * kWarps * kTile;
    partial = p;
  }
  __device__ float* sub_tile(int piece, int warp) const { return sub + (piece * kWarps + warp) * kTile; }
  __device__ float* state_tile(int token, int warp) const { return states + (token * kWarps + warp) * kTile; }
  __device__ float* partial_of(int warp, int token, int which) const {
    return partial + ((warp * kPiece + token) * 4 + which) * kPadded;
  }
};

// One piece's inputs in registers: fetched while the previous piece is computed, stored when it is done.
template <int R> struct PieceFetch {
  static constexpr int kRowsPerThread = kPiece * 32 * R / kThreads;
  static_assert(kPiece * 32 % kThreads == 0 && kPiece * kCtaCols == kThreads, "a whole number of elements per thread");
  RowFetch<kRowsPerThread> rows;
  float v, w, rho, dout;  // the thread's one value-column element of each
  int count;

  template <class T> __device__ void fetch(const BackwardArgs& a, const Tile& tl, int64_t t0, int count_) {
    const Layout& at = a.at;
    count = count_;
    rows.fetch(at, tl, static_cast<const T*>(a.q), static_cast<const T*>(a.k), a.g, a.b, t0, count, 32 * R,
               int(threadIdx.x));
    const int s = int(threadIdx.x) / kCtaCols, c = int(threadIdx.x) % kCtaCols;
    const bool valid = s < count;
    v = valid ? column(static_cast<const T*>(a.v), at, tl, t0, s, c) : 0.f;
    w = valid ? column(a.w, at, tl, t0, s, c) : 0.f;
    rho = valid ? column(a.rho, at, tl, t0, s, c) : 0.f;
    dout = valid ? column(static_cast<const T*>(a.dout), at, tl, t0, s, c) : 0.f;
  }
  __device__ void store(const BackwardSmem<R>& m) const {
    rows.store(*m.rows, count, int(threadIdx.x));
    const int s = int(threadIdx.x) / kCtaCols, c = int(threadIdx.x) % kCtaCols;
    m.v[s][c] = v, m.w[s][c] = w, m.rho[s][c] = rho, m.dout[s][c] = dout;
  }
};

// The backward visits each block from the last: forward through its pieces but the last (keeping the state at each
// piece's end), then every piece in reverse. A step is one piece of that order.
struct Step {
  int64_t block;  // −1: done
  int piece;
  bool reverse;
};
__device__ int pieces_of(const Layout& at, int64_t block) {
  return int((min(int64_t(kBlock), at.T - block * kBlock) + kPiece - 1) / kPiece);
}
__device__ Step first_step(const Layout& at, int64_t block) {
  return block < 0 ? Step{-1, 0, true} : Step{block, 0, pieces_of(at, block) == 1};
}
__device__ Step next_step(const Layout& at, const Step& st) {
  const int pieces = pieces_of(at, st.block);
  if (!st.reverse)
    return st.piece + 1 < pieces - 1 ? Step{st.block, st.piece + 1, false} : Step{st.block, pieces - 1, true};
  return st.piece > 0 ? Step{st.block, st.piece - 1, true} : first_step(at, st.block - 1);
}
__device__ int64_t start_of(const Step& st) { return st.block * kBlock + st.piece * kPiece; }
__device__ int count_of(const Layout& at, const Step& st) { return int(min(int64_t(kPiece), at.T - start_of(st))); }

// S ← Diag(α_s) S + k_s ρ_sᵀ for token s of the staged piece.
template <int R> __device__ void step_known_rho(const BackwardSmem<R>& m, const Tile& tl, int s, StateRegs<R>& st) {
#pragma unroll
  for (int i = 0; i < R; ++i) {
    const int r = tl.row(i);
    const float alpha = m.rows->alpha[s][r], kr = m.rows->k[s][r];
#pragma unroll
    for (int j = 0; j < kCols; ++j) st[i][j] = fmaf(kr, m.rho[s][tl.cta_col(j)], alpha * st[i][j]);
  }
}

// Adds the CTA's column sums of the piece (its warps' sums added up) into the global accumulators
// (dq = scale·Σ S_t do, dk = Σ dS ρ − b Σ S̄ dρ, db = −k Σ S̄ dρ, dg = α Σ dS̄ S_{t−1}).
template <int R>
__device__ void flush_partials(const BackwardSmem<R>& m, const BackwardArgs& a, const Tile& tl, int64_t t0, int count) {
  constexpr int kPadded = BackwardSmem<R>::kPadded;
  const Layout& at = a.at;
  for (int i = int(threadIdx.x); i < count * kPadded; i += kThreads) {
    const int s = i / kPadded, r = i % kPadded;
    float sum[4];
#pragma unroll
    for (int which = 0; which < 4; ++which) {
      sum[which] = 0.f;
#pragma unroll
      for (int warp = 0; warp < kWarps; ++warp) sum[which] += m.partial_of(warp, s, which)[r];
    }
    if (r >= at.K) continue;
    const int64_t off = at.key(tl.b, t0 + s, tl.h) + r;
    atomicAdd(a.dq + off, a.scale * sum[0]);
    atomicAdd(a.dk + off, fmaf(-m.rows->b[s][r], sum[2], sum[1]));
    atomicAdd(a.db + off, -m.rows->k[s][r] * sum[2]);
    atomicAdd(a.dg + off, m.rows->alpha[s][r] * sum[3]);
  }
}

// One CTA per SM at K = 128 (its shared memory), so it may take every register it wants.
template <class T, int R> __global__ void __launch_bounds__(kThreads, 1) backward_kernel(const BackwardArgs a) {
  cuda::await_prior_grid();
  extern __shared__ float smem[];
  const BackwardSmem<R> m(smem);
  const Layout& at = a.at;
  const Tile tl(at);
  constexpr int kShift = kScatterShift<kCols>;
  const int idx = tl.lane >> kShift;  // the column whose dρ this lane ends with
  const bool leader = (tl.lane & ((1 << kShift) - 1)) == 0;
  const int64_t my_col = tl.col0 + idx;

  float dS[R][kCols];  // ∂L/∂S_t of the token being walked
  load_state<R>(at, tl, a.dstate_out, dS);

  Step step = first_step(at, at.blocks() - 1);
  PieceFetch<R> next;
  if (step.block >= 0) next.template fetch<T>(a, tl, start_of(step), count_of(at, step));
  float s[R][kCols];
  while (step.block >= 0) {
    const int64_t t0 = start_of(step);
    const int count = count_of(at, step);
    __syncthreads();  // the previous piece's readers are done
    next.store(m);
    __syncthreads();
    const Step after = next_step(at, step);
    if (after.block >= 0) next.template fetch<T>(a, tl, start_of(after), count_of(at, after));  // in flight meanwhile
    const float* checkpoint = a.checkpoints + checkpoint_offset<R>(at, tl, step.block);
    if (!step.reverse) {  // the state at the next piece's start
      if (step.piece == 0) get_tile<R>(checkpoint, tl.lane, s);
      for (int ts = 0; ts < kPiece; ++ts) step_known_rho<R>(m, tl, ts, s);
      put_tile<R>(m.sub_tile(step.piece + 1, tl.warp), tl.lane, s);
    } else {
      get_tile<R>(step.piece == 0 ? checkpoint : m.sub_tile(step.piece, tl.warp), tl.lane, s);
      for (int ts = 0; ts < count; ++ts) {
        put_tile<R>(m.state_tile(ts, tl.warp), tl.lane, s);
        step_known_rho<R>(m, tl, ts, s);
      }
      for (int ts = count - 1; ts >= 0; --ts) {
        float prev[R][kCols], sbar[R][kCols];
        get_tile<R>(m.state_tile(ts, tl.warp), tl.lane, prev);
        float rho[kCols], dout[kCols];
#pragma unroll
        for (int j = 0; j < kCols; ++j) rho[j] = m.rho[ts][tl.cta_col(j)], dout[j] = m.dout[ts][tl.cta_col(j)];
        float p_out[R], p_write[R], dots[kCols];
#pragma unroll
        for (int j = 0; j < kCols; ++j) dots[j] = 0.f;
#pragma unroll
        for (int i = 0; i < R; ++i) {
          const int r = tl.row(i);
          const float alpha = m.rows->alpha[ts][r], kr = m.rows->k[ts][r], qs = a.scale * m.rows->q[ts][r];
          p_out[i] = 0.f, p_write[i] = 0.f;
#pragma unroll
          for (int j = 0; j < kCols; ++j) {
            sbar[i][j] = alpha * prev[i][j];
            p_out[i] = fmaf(fmaf(kr, rho[j], sbar[i][j]), dout[j], p_out[i]);  // S_t·do
            dS[i][j] = fmaf(qs, dout[j], dS[i][j]);                            // + ∂o/∂S_t
            p_write[i] = fmaf(dS[i][j], rho[j], p_write[i]);                   // dS·ρ
            dots[j] = fmaf(kr, dS[i][j], dots[j]);                             // dρ = dSᵀk
          }
        }
        const float drho_mine = reduce_scatter<kCols>(dots, tl.lane);
        if (leader && my_col < at.V) {
          const int c = tl.cta_col(idx);
          const int64_t off = at.value(tl.b, t0 + ts, tl.h) + my_col;
          static_cast<T*>(a.dv)[off] = from_float<T>(drho_mine * m.w[ts][c]);
          a.dw[off] = drho_mine * m.v[ts][c];
        }
        float drho[kCols];
#pragma unroll
        for (int j = 0; j < kCols; ++j) drho[j] = __shfl_sync(kFull, drho_mine, j << kShift);
#pragma unroll
        for (int i = 0; i < R; ++i) {
          const int r = tl.row(i);
          const float alpha = m.rows->alpha[ts][r], bk = m.rows->b[ts][r] * m.rows->k[ts][r];
          float p_erase = 0.f, p_decay = 0.f;
#pragma unroll
          for (int j = 0; j < kCols; ++j) {
            p_erase = fmaf(sbar[i][j], drho[j], p_erase);      // S̄·dρ
            const float dsbar = fmaf(-bk, drho[j], dS[i][j]);  // dS̄ = dS − (b⊙k) dρᵀ
            p_decay = fmaf(dsbar, prev[i][j], p_decay);        // dS̄·S_{t−1}
            dS[i][j] = alpha * dsbar;                          // ∂L/∂S_{t−1}
          }
          m.partial_of(tl.warp, ts, 0)[r] = p_out[i];
          m.partial_of(tl.warp, ts, 1)[r] = p_write[i];
          m.partial_of(tl.warp, ts, 2)[r] = p_erase;
          m.partial_of(tl.warp, ts, 3)[r] = p_decay;
        }
      }
      __syncthreads();
      flush_partials<R>(m, a, tl, t0, count);
    }
    step = after;
  }
  if (a.dstate_in) store_state<R>(at, tl, dS, a.dstate_in);
}

// ---------------------------------------------------------------------------------------------------------------
// Launchers

Layout layout_of(const GatedDelta2Shape& s) { return {s.batch, s.time, s.heads, s.key_dim, s.value_dim}; }
dim3 grid_of(const GatedDelta2Shape& s) {
  return dim3(unsigned(s.batch * s.heads), unsigned((s.value_dim + kCtaCols - 1) / kCtaCols));
}
int rows_per_lane(const GatedDelta2Shape& s) { return int((s.key_dim + 31) / 32); }

// Calls f(T{}, std::integral_constant<int, R>{}) for the token storage type (bf16 or f32) and R = ⌈K/32⌉ (the op
// admits K ≤ 128).
template <class F> void visit(DType dtype, int rows, F&& f) {
  const auto with_rows = [&](auto tag) {
    switch (rows) {
      case 1: f(tag, std::integral_constant<int, 1>{}); break;
      case 2: f(tag, std::integral_constant<int, 2>{}); break;
      case 3: f(tag, std::integral_constant<int, 3>{}); break;
      default: f(tag, std::integral_constant<int, kMaxRowsPerLane>{}); break;
    }
  };
  if (dtype == DType::BF16)
    with_rows(__nv_bfloat16{});
  else
    with_rows(float{});
}

int64_t rho_floats(const GatedDelta2Shape& s) { return s.batch * s.time * s.heads * s.value_dim; }

}  // namespace

void gated_delta_rule2_forward(const GatedDelta2Shape& s, DType dtype, const void* q, const void* k, const void* v,
                               const float* g, const float* b, const float* w, const float* state_in, float scale,
                               void* o, float* state_out) {
  if (s.batch == 0 || s.heads == 0 || s.value_dim == 0) return;
  const ForwardArgs args{layout_of(s), q, k, v, g, b, w, state_in, scale, o, state_out, nullptr, nullptr};
  visit(dtype, rows_per_lane(s), [&](auto tag, auto rows) {
    using T = decltype(tag);
    cuda::launch_dependent(forward_kernel<T, decltype(rows)::value, false>, grid_of(s), kThreads, 0, args);
  });
}

void gated_delta_rule2_backward(const GatedDelta2Shape& s, DType dtype, const void* dout, const float* dstate_out,
                                const void* q, const void* k, const void* v, const float* g, const float* b,
                                const float* w, const float* state_in, float scale, float* dq, float* dk, void* dv,
                                float* dg, float* db, float* dw, float* dstate_in, float* scratch) {
  if (s.batch == 0 || s.heads == 0 || s.value_dim == 0) return;
  float* rho = scratch;
  float* checkpoints = scratch + rho_floats(s);
  const ForwardArgs fwd{layout_of(s), q, k, v, g, b, w, state_in, scale, nullptr, nullptr, rho, checkpoints};
  const BackwardArgs bwd{layout_of(s), dout, dstate_out, q,  k,  v,  g,         b,   w,          scale,
                         dq,           dk,   dv,         dg, db, dw, dstate_in, rho, checkpoints};
  visit(dtype, rows_per_lane(s), [&](auto tag, auto rows) {
    using T = decltype(tag);
    constexpr int R = decltype(rows)::value;
    cuda::launch_dependent(forward_kernel<T, R, true>, grid_of(s), kThreads, 0, fwd);
    const int smem = int(BackwardSmem<R>::floats() * sizeof(float));
    allow_dynamic_smem<backward_kernel<T, R>>(smem);
    cuda::launch_dependent(backward_kernel<T, R>, grid_of(s), kThreads, smem, bwd);
  });
}

}  // namespace primer::ops::cuda_ops
