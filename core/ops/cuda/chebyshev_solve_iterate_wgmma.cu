// The Chebyshev iteration of chebyshev_solve_iterate.cu (its header says what a chunk's matvec computes) on Hopper's
// warpgroup MMA (sm_90a). There, each warp's ldmatrix traffic (every warp loads K and both halves of H_0 for every
// matvec), not the tensor work, bounded the kernel; here the tensor cores read the operands from shared memory
// themselves. D/64 warpgroups share a chunk: group g keeps the iterate's columns [64g, 64g + 64) of the chunk's 64
// rows in registers (warp w of the group rows 16w .. 16w + 15, in the accumulator layout of tile/mma.cuh, so the
// per-row steps are chebyshev_solve_iterate.cuh's) and forms the whole masked product P = (X Kᵀ) ⊙ Mᵀ itself,
// which then enters P K as the register operand: no shared-memory round trip and no second barrier, for repeating
// that 64 x 64 x D product in the second group of D = 128 (a sixth of a precise matvec's products). The staged
// iterate alternates between two buffers, so the one barrier of an iteration also orders each write after the
// other group's last read of that buffer (two iterations back). Registers are what the design runs short of (the
// iterate, its predecessor, the decay mask, the products' accumulators and P's operand fragments): the right-hand
// side waits in shared memory.
#include <cstdint>

#include "core/cuda_runtime.h"
#include "core/ops/cuda/chebyshev_solve_iterate.cuh"
#include "core/ops/cuda/chebyshev_solve_kernels.h"
#include "core/ops/cuda/dynamic_smem.h"
#include "core/ops/cuda/tile/block_reduce.cuh"
#include "core/ops/cuda/tile/warp_mma.cuh"
#include "core/ops/cuda/tile/wgmma.cuh"

namespace primer::ops::cuda_ops::cheb {
namespace {

constexpr int kNT = 8;  // a warp's 64 columns as n-tiles of 8
using Acc = float[kNT][4];
using FlatAcc = float[4 * kNT];  // the same registers as wgmma's m64n64 accumulator
__device__ __forceinline__ FlatAcc& flat(Acc& v) { return reinterpret_cast<FlatAcc&>(v); }

template <int D> struct Layout {
  static constexpr int kGroups = D / 64, kThreads = 128 * kGroups;
  using States = wgmma::Sw128Tile<D, D>;
  using Rows = wgmma::Sw128Tile<kC, D>;  // K and the staged iterate
};

// Shared memory: H_0 hi + lo, K, two iterate buffers (hi, and lo when split), the 1024-byte aligned tiles; then the
// right-hand side (Rhs) and the per-row scalars.
template <int D, bool kSplit> struct IterateSmem {
  static constexpr int kTileElems = 2 * D * D + kC * D + (kSplit ? 4 : 2) * kC * D;
  static constexpr int kRhsFloats = 4 * kNT * Layout<D>::kThreads;
  static constexpr int kBytes =
      1024 + kTileElems * int(sizeof(bf16)) + (kRhsFloats + RowScalars::kFloats) * int(sizeof(float));
};

// The right-hand side across the iterations, in shared memory (the registers are full): one float4 per n-tile,
// the threads side by side (conflict-free).
template <int kThreads> struct Rhs {
  float4* at;
  __device__ __forceinline__ void set(const Acc& r) const {
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
      at[nt * kThreads + threadIdx.x] = make_float4(r[nt][0], r[nt][1], r[nt][2], r[nt][3]);
  }
  __device__ __forceinline__ void get(Acc& r) const {
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
      const float4 f = at[nt * kThreads + threadIdx.x];
      r[nt][0] = f.x, r[nt][1] = f.y, r[nt][2] = f.z, r[nt][3] = f.w;
    }
  }
};

// Warp (w, g) = (warp % 4, warp / 4) owns rows 16w .. +16 and columns 64g .. +64.
struct GroupTile {
  int lane, m0, ncol0;
  __device__ static GroupTile of_thread() {
    const int warp = int(threadIdx.x >> 5);
    return {int(threadIdx.x & 31), 16 * (warp & 3), 64 * (warp >> 2)};
  }
  __device__ int row(int half) const { return m0 + (lane >> 2) + 8 * half; }  // of accumulator element 2·half
};

template <int D> struct Tiles : GroupTile {
  const bf16 *h_hi, *h_lo, *k;
  bf16 *x[2], *x_lo[2];
  int buffer;  // the iterate buffer the next matvec stages into
};

#ifdef PRIMER_WGMMA
// The descriptors of one matvec's operands, made where they are used: a descriptor per k-block, hoisted out of the
// iteration loop by the compiler, would hold some 60 registers the iterate needs. Each operand's k-blocks are its
// base descriptor plus a constant (shared-memory addresses fit the descriptor's 14-bit field, so no carry leaves it),
// and each base passes through an empty asm so that it, not its sums, is what lives across the loop.
struct Operand {
  uint64_t base;
  __device__ __forceinline__ explicit Operand(uint64_t d) : base(d) { asm volatile("" : "+l"(base)); }
  __device__ __forceinline__ uint64_t at(int elems) const { return base + uint64_t((elems * 2) >> 4); }
};
// The k-block of 16 reduction columns from k0 of a K-major Sw128Tile with kRows rows, as an element offset.
template <int kRows> __device__ __forceinline__ constexpr int k_block(int k0) {
  return (k0 >> 6) * kRows * 64 + (k0 & 63);
}

// Issues P = A Kᵀ (the whole 64 x 64) and then Y = A H_0ᵀ (this group's 64 columns, H_0 as hi + lo) as two commit
// groups, for a staged [64][D] tile A, and A_lo with it when kLo (the lo x H_0-lo product, 2^-18 of the result, is
// left out).
template <int D, bool kLo>
__device__ __forceinline__ void issue_products(Acc& p, Acc& y, const bf16* A, const bf16* A_lo, const Tiles<D>& s) {
  using wgmma::k_major;
  const Operand a(k_major<kC, D>(A, 0, 0)), k(k_major<kC, D>(s.k, 0, 0));
  const Operand a_lo(kLo ? k_major<kC, D>(A_lo, 0, 0) : 0);
  wgmma::fence();
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    wgmma::wgmma_ss<0, 0>(flat(p), a.at(k_block<kC>(16 * kk)), k.at(k_block<kC>(16 * kk)), kk > 0);
    if constexpr (kLo) wgmma::wgmma_ss<0, 0>(flat(p), a_lo.at(k_block<kC>(16 * kk)), k.at(k_block<kC>(16 * kk)), 1);
  }
  wgmma::commit();
  const Operand h_hi(k_major<D, D>(s.h_hi, s.ncol0, 0)), h_lo(k_major<D, D>(s.h_lo, s.ncol0, 0));
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    const int at = k_block<kC>(16 * kk), h_at = k_block<D>(16 * kk);
    wgmma::wgmma_ss<0, 0>(flat(y), a.at(at), h_hi.at(h_at), kk > 0);
    wgmma::wgmma_ss<0, 0>(flat(y), a.at(at), h_lo.at(h_at), 1);
    if constexpr (kLo) wgmma::wgmma_ss<0, 0>(flat(y), a_lo.at(at), h_hi.at(h_at), 1);
  }
  wgmma::commit();
}

// Y = H_c X_c for this group's columns of the chunk's 64 rows; X in this thread's registers. One barrier; every
// thread must call it.
template <int D, bool kSplit> __device__ __forceinline__ void chunk_matvec(Acc& Y, const Acc& X, const Acc& mask,
                                                                           const float (&zeta)[2], Tiles<D>& s) {
  using Rows = typename Layout<D>::Rows;
  bf16* x = s.buffer ? s.x[1] : s.x[0];  // (a select: indexing by a variable would put the array in local memory)
  bf16* x_lo = s.buffer ? s.x_lo[1] : s.x_lo[0];
  s.buffer ^= 1;
  tile::for_each_pair(X, s.m0, s.ncol0, s.lane, [&](int r, int c, float v0, float v1) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(v0, v1);
    *reinterpret_cast<__nv_bfloat162*>(x + Rows::offset(r, c)) = h;
    if constexpr (kSplit)
      *reinterpret_cast<uint32_t*>(x_lo + Rows::offset(r, c)) =
          tile::pack_bf16(v0 - __low2float(h), v1 - __high2float(h));
  });
  wgmma::fence_shared_for_async();
  __syncthreads();

  Acc p;
  issue_products<D, kSplit>(p, Y, x, x_lo, s);
  wgmma::wait<1>();  // P is ready; X H_0ᵀ may still run
  wgmma::pin(flat(p));
  // P ⊙ Mᵀ as the A operand of P K (k-block kk: tokens 16kk .. +16), hi and, when split, lo.
  uint32_t a[kC / 16][4], a_lo[kC / 16][4];
#pragma unroll
  for (int kk = 0; kk < kC / 16; ++kk)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int nt = 2 * kk + (i >> 1), e = 2 * (i & 1);
      const float v0 = p[nt][e] * mask[nt][e], v1 = p[nt][e + 1] * mask[nt][e + 1];
      const __nv_bfloat162 h = __floats2bfloat162_rn(v0, v1);
      a[kk][i] = reinterpret_cast<const uint32_t&>(h);
      a_lo[kk][i] = kSplit ? tile::pack_bf16(v0 - __low2float(h), v1 - __high2float(h)) : 0u;
    }
  wgmma::wait<0>();
  wgmma::pin(flat(Y));
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) Y[nt][e] *= zeta[e >> 1];
  const Operand k(wgmma::mn_major<kC, D>(s.k, 0, s.ncol0));
  wgmma::fence();
#pragma unroll
  for (int kk = 0; kk < kC / 16; ++kk) {  // + ((X Kᵀ) ⊙ Mᵀ) K, K as the [token][column] (MN-major) operand
    wgmma::wgmma_rs<1>(flat(Y), a[kk], k.at(16 * kk * 64), 1);
    if constexpr (kSplit) wgmma::wgmma_rs<1>(flat(Y), a_lo[kk], k.at(16 * kk * 64), 1);
  }
  wgmma::commit();
  wgmma::wait<0>();
  wgmma::pin(flat(Y));
  wgmma::pin(a);
  wgmma::pin(a_lo);
}
#endif  // PRIMER_WGMMA

template <int D, class T, bool kBackward, bool kSplit> __global__ void __launch_bounds__(Layout<D>::kThreads, 1)
    iterate_wgmma_kernel(IterateArgs a) {
#ifdef PRIMER_WGMMA
  using L = Layout<D>;
  extern __shared__ unsigned char smem_raw[];
  bf16* base = reinterpret_cast<bf16*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  Tiles<D> s;
  static_cast<GroupTile&>(s) = GroupTile::of_thread();
  bf16* h_hi = base;
  bf16* h_lo = h_hi + D * D;
  bf16* k_tile = h_lo + D * D;
  s.h_hi = h_hi;
  s.h_lo = h_lo;
  s.k = k_tile;
  s.x[0] = k_tile + kC * D;
  s.x[1] = s.x[0] + kC * D;
  s.x_lo[0] = kSplit ? s.x[1] + kC * D : nullptr;
  s.x_lo[1] = kSplit ? s.x_lo[0] + kC * D : nullptr;
  s.buffer = 0;
  using Smem = IterateSmem<D, kSplit>;
  float4* rhs_smem = reinterpret_cast<float4*>(base + Smem::kTileElems);
  const RowScalars sc(reinterpret_cast<float*>(rhs_smem) + Smem::kRhsFloats);

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t bh = blockIdx.y;
  const ChunkRef c = a.geo.chunk(bh, blockIdx.x, D);

  // Stage K and H_0 for the tensor cores; ‖H_0‖² and the chunk's log-decays on the way.
  stage_rows<T, D, L::kThreads, typename L::Rows>(k_tile, nullptr, static_cast<const T*>(a.k) + c.row0, c.row_stride, 0,
                                                  c.len, nullptr);
  const float h0_sq =
      warp_sum(stage_matrix<D, L::kThreads, typename L::States>(h_hi, h_lo, a.states + a.geo.state(bh, blockIdx.x, D)));
  if (lane == 0) sc.warp[warp] = h0_sq;
  chunk_log_decays(sc.g, a.gk, c);
  if (threadIdx.x < kC)
    sc.quad[threadIdx.x] = sc.fresh[threadIdx.x] = sc.dot1[threadIdx.x] = sc.dot2[threadIdx.x] = 0.f;
  wgmma::fence_shared_for_async();
  __syncthreads();

  // Eq. (5)'s per-row ingredients: k_jᵀH_0k_j from K H_0ᵀ, and the Gram terms of the in-chunk part from K Kᵀ.
  Acc mask;
  chunk_mask(mask, sc.g, c.len, 0, s);
  {
    Acc p, z, kk;
    issue_products<D, false>(p, z, s.k, nullptr, s);
    wgmma::wait<0>();
    wgmma::pin(flat(p));
    wgmma::pin(flat(z));
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const __nv_bfloat162 pair = *reinterpret_cast<const __nv_bfloat162*>(
            s.k + L::Rows::offset(s.row(half), s.ncol0 + 8 * nt + 2 * (lane & 3)));
        kk[nt][2 * half] = __low2float(pair);
        kk[nt][2 * half + 1] = __high2float(pair);
      }
    add_row_dots(sc.quad, z, kk, s);
    if (s.ncol0 == 0) add_fresh_terms(sc.fresh, mask, p, 0, s);  // every group holds all of P: the first adds it
  }
  __syncthreads();
  if (warp == 0) {
    float h0 = 0.f;
#pragma unroll
    for (int w = 0; w < L::kThreads / 32; ++w) h0 += sc.warp[w];
    chunk_row_norms(sc.norm, sc.g, sc.quad, sc.fresh, h0, c.len);
  }
  __syncthreads();

  const RowConstants rc(sc.g, sc.norm, a.ridge, s);
  const Rhs<L::kThreads> rhs{rhs_smem};
  Acc X, Xp;
  {
    Acc R;
    load_rows<T>(R, static_cast<const T*>(a.rhs), c, s);
    rhs.set(R);
    chebyshev_start(X, Xp, R, rc);
  }
  ChebyshevWeights weights(a.ridge);
  for (int it = 0; it < a.num_iter; ++it) {
    const float omega = weights.next();
    Acc Y, R;
    chunk_matvec<D, kSplit>(Y, X, mask, rc.zeta, s);
    rhs.get(R);
    chebyshev_update(X, Xp, Y, R, rc, omega);
  }
  store_rows<T>(static_cast<T*>(a.out), X, c, s);

  if constexpr (kBackward) {
    // X is the adjoint s: the per-row weights of the gate gradient need x·s and s·(H x).
    Acc xf, Y;
    load_rows<T>(xf, static_cast<const T*>(a.x), c, s);
    add_row_dots(sc.dot1, xf, X, s);
    chunk_matvec<D, kSplit>(Y, xf, mask, rc.zeta, s);  // its barrier also publishes sc.dot1
    add_row_dots(sc.dot2, X, Y, s);
    __syncthreads();
    if (warp == 0) adjoint_row_weights(a, bh, blockIdx.x, sc.g, sc.norm, sc.dot1, sc.dot2, c.len);
  }
#else
  __trap();  // launched only where wgmma_available()
#endif
}

template <int D, class T, bool kBackward, bool kSplit> void launch(const IterateArgs& a, const ChebyshevDims& d) {
  constexpr auto kernel = iterate_wgmma_kernel<D, T, kBackward, kSplit>;
  constexpr int kBytes = IterateSmem<D, kSplit>::kBytes;
  allow_dynamic_smem<kernel>(kBytes);
  const dim3 grid(unsigned(d.chunks()), unsigned(d.heads_total()));
  kernel<<<grid, Layout<D>::kThreads, kBytes, cuda::stream()>>>(a);
  PRIMER_CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_iterate_wgmma(const IterateArgs& a, const ChebyshevDims& d, DType dtype) {
  with_iterate_variant(d, dtype, a.x != nullptr, [&](auto dim, auto tag, auto backward, auto split) {
    launch<decltype(dim)::value, decltype(tag), decltype(backward)::value, decltype(split)::value>(a, d);
  });
}

}  // namespace primer::ops::cuda_ops::cheb
