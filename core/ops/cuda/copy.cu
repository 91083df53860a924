#include <type_traits>

#include "core/cuda_runtime.h"
#include "core/ops/cuda/copy.h"
#include "core/ops/cuda/dependent_launch.cuh"
#include "core/ops/cuda/tile/device_types.cuh"
#include "core/ops/cuda/tile/vector_io.cuh"

namespace primer::ops::cuda_ops {
namespace {

struct Layout {  // shape and strides by value in kernel parameters
  int ndim;
  int64_t shape[kMaxDims];
  int64_t strides[kMaxDims];
};

Layout layout_of(const StridedDesc& d) {
  Layout l{};
  l.ndim = d.ndim;
  for (int i = 0; i < d.ndim; ++i) {
    l.shape[i] = d.shape[i];
    l.strides[i] = d.strides[i];
  }
  return l;
}

__device__ __forceinline__ int64_t offset_of(const Layout& l, int64_t n) {
  int64_t off = 0;
  for (int i = l.ndim - 1; i >= 0; --i) {
    off += (n % l.shape[i]) * l.strides[i];
    n /= l.shape[i];
  }
  return off;
}

// Doubles would lose nothing, but f32 math suffices for every float pair except those touching f64/i64.
template <class S, class D>
__global__ void copy_kernel(D* dst, Layout dl, bool dst_dense, const S* src, Layout sl, bool src_dense, int64_t n) {
  cuda::await_prior_grid();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t so = src_dense ? i : offset_of(sl, i);
    const int64_t d_o = dst_dense ? i : offset_of(dl, i);
    dst[d_o] = from_double<D>(to_double(src[so]));
  }
}

template <class S, class D> __device__ __forceinline__ D convert(S x) {
  if constexpr (std::is_same_v<S, D>)
    return x;
  else
    return from_double<D>(to_double(x));
}

// The same copy when both layouts step by 1 along the last dim and every row start is pack-aligned: packs of V along
// it, one vector load and store each, the row's offsets computed once per pack instead of per element (slices of a
// projection's output, transposes of [.., H, D] head tensors: the strided copies the layers make).
template <int V, class S, class D>
__global__ void copy_packs_kernel(D* dst, Layout dl, const S* src, Layout sl, int64_t packs_per_row, int64_t packs) {
  cuda::await_prior_grid();
  const int last = dl.ndim - 1;
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < packs; p += int64_t(gridDim.x) * blockDim.x) {
    int64_t row = p / packs_per_row;
    const int64_t c = (p - row * packs_per_row) * V;
    int64_t so = c, d_o = c;
    for (int d = last - 1; d >= 0; --d) {
      const int64_t i = row % dl.shape[d];
      row /= dl.shape[d];
      so += i * sl.strides[d];
      d_o += i * dl.strides[d];
    }
    const Pack<S, V> in = load_pack<V>(src + so, 0);
    Pack<D, V> out;
#pragma unroll
    for (int k = 0; k < V; ++k) out.v[k] = convert<S, D>(in.v[k]);
    store_pack<V>(dst + d_o, 0, out);
  }
}

// Rows of the last dim fit packs of V elements of `elem` bytes: stride 1 along it, a multiple of V long, and every
// row start V-aligned (dims of extent 1 have no say).
bool rows_in_packs(const StridedDesc& d, int V, size_t elem) {
  const int last = d.ndim - 1;
  if (last < 0 || d.strides[last] != 1 || d.shape[last] % V != 0) return false;
  if (reinterpret_cast<uintptr_t>(d.data) % (size_t(V) * elem) != 0) return false;
  for (int i = 0; i < last; ++i)
    if (d.shape[i] > 1 && d.strides[i] % V != 0) return false;
  return true;
}

template <class T> constexpr bool kFloatFamily =
    std::is_same_v<T, float> || std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>;

// Dense conversions among f32, bf16 and f16 (the casts around mixed-precision kernels): packs of V elements with one
// or two 16-byte loads and one vector store each, through float (exact for these types), no index arithmetic; the
// last n % V elements one by one: 87-89% of the copy bandwidth on an H200 for f32 to bf16, where the strided pack
// kernel (its index divisions per pack) took ~80 µs for what now takes 55.
template <int V, class S, class D> __global__ void convert_dense_kernel(D* dst, const S* src, int64_t n) {
  cuda::await_prior_grid();
  const int64_t packs = n / V;
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < packs; p += int64_t(gridDim.x) * blockDim.x) {
    float v[V];
    load_floats<S, V>(src + p * V, v);
    store_floats<D, V>(dst + p * V, v);
  }
  for (int64_t i = packs * V + blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = from_float<D>(to_float(src[i]));
}

template <class D> __global__ void fill_kernel(D* dst, Layout dl, bool dense, D value, int64_t n) {
  cuda::await_prior_grid();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[dense ? i : offset_of(dl, i)] = value;
}

}  // namespace

void copy(const StridedDesc& dst, const StridedDesc& src) {
  const int64_t n = numel(dst);
  if (dst.dtype == src.dtype && dst.contiguous && src.contiguous) {
    PRIMER_CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, size_t(n) * dtype_size(dst.dtype), cudaMemcpyDeviceToDevice,
                                      cuda::stream()));
    return;
  }
  visit_dtype(src.dtype, [&](auto s) {
    using S = decltype(s);
    visit_dtype(dst.dtype, [&](auto d) {
      using D = decltype(d);
      if constexpr (kFloatFamily<S> && kFloatFamily<D>) {
        constexpr int kV = kPack<D>;  // one 16-byte store a pack
        if (dst.contiguous && src.contiguous && n > 0 && aligned16(dst.data) && aligned16(src.data)) {
          cuda::launch_dependent(convert_dense_kernel<kV, S, D>, grid_for((n + kV - 1) / kV, 256), 256, 0,
                                 static_cast<D*>(dst.data), static_cast<const S*>(src.data), n);
          return;
        }
      }
      constexpr int V = kPack<S> < kPack<D> ? kPack<S> : kPack<D>;
      if (V > 1 && n > 0 && rows_in_packs(dst, V, sizeof(D)) && rows_in_packs(src, V, sizeof(S))) {
        const int64_t packs = n / V;
        cuda::launch_dependent(copy_packs_kernel<V, S, D>, grid_for(packs, 256), 256, 0, static_cast<D*>(dst.data),
                               layout_of(dst), static_cast<const S*>(src.data), layout_of(src),
                               dst.shape[dst.ndim - 1] / V, packs);
        return;
      }
      cuda::launch_dependent(copy_kernel<S, D>, grid_for(n, 256), 256, 0, static_cast<D*>(dst.data), layout_of(dst),
                             dst.contiguous, static_cast<const S*>(src.data), layout_of(src), src.contiguous, n);
    });
  });
}

void fill(const StridedDesc& dst, double value) {
  const int64_t n = numel(dst);
  visit_dtype(dst.dtype, [&](auto d) {
    using D = decltype(d);
    D v;
    if constexpr (std::is_same_v<D, __nv_bfloat16>)
      v = __float2bfloat16_rn(float(value));
    else if constexpr (std::is_same_v<D, __half>)
      v = __float2half_rn(float(value));
    else
      v = static_cast<D>(value);
    cuda::launch_dependent(fill_kernel<D>, grid_for(n, 256), 256, 0, static_cast<D*>(dst.data), layout_of(dst),
                           dst.contiguous, v, n);
  });
}

namespace {

// Packs of 8 where x, hi and lo are 16-byte aligned: two 16-byte loads, two 16-byte stores; the rest one by one.
__global__ void split_bf16_kernel(bool aligned, const float* x, __nv_bfloat16* hi, __nv_bfloat16* lo, int64_t n) {
  cuda::await_prior_grid();
  constexpr int V = 8;
  const int64_t packs = aligned ? n / V : 0;
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < packs; p += int64_t(gridDim.x) * blockDim.x) {
    float v[V], h[V], l[V];
    load_floats<float, V>(x + p * V, v);
    split_floats_bf16<V>(v, h, l);
    store_floats<__nv_bfloat16, V>(hi + p * V, h);
    store_floats<__nv_bfloat16, V>(lo + p * V, l);
  }
  for (int64_t i = packs * V + blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    float h[1], l[1];
    split_floats_bf16<1>({x[i]}, h, l);
    store_floats<__nv_bfloat16, 1>(hi + i, h);
    store_floats<__nv_bfloat16, 1>(lo + i, l);
  }
}

}  // namespace

void split_bf16(const float* x, void* hi, void* lo, int64_t n) {
  if (n == 0) return;
  const bool packs = aligned16(x) && aligned16(hi) && aligned16(lo);
  cuda::launch_dependent(  // whole tensors from the allocator are
      split_bf16_kernel, grid_for((n + 7) / 8, 256), 256, 0, packs, x, static_cast<__nv_bfloat16*>(hi),
      static_cast<__nv_bfloat16*>(lo), n);
}

}  // namespace primer::ops::cuda_ops
