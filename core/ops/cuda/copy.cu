#include "core/cuda_runtime.h"
#include "core/ops/cuda/copy.h"
#include "core/ops/cuda/tile/device_types.cuh"

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
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t so = src_dense ? i : offset_of(sl, i);
    const int64_t d_o = dst_dense ? i : offset_of(dl, i);
    dst[d_o] = from_double<D>(to_double(src[so]));
  }
}

template <class D> __global__ void fill_kernel(D* dst, Layout dl, bool dense, D value, int64_t n) {
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
      copy_kernel<S, D><<<grid_for(n, 256), 256, 0, cuda::stream()>>>(static_cast<D*>(dst.data), layout_of(dst),
                                                                      dst.contiguous, static_cast<const S*>(src.data),
                                                                      layout_of(src), src.contiguous, n);
      PRIMER_CUDA_CHECK_LAUNCH();
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
    fill_kernel<D>
        <<<grid_for(n, 256), 256, 0, cuda::stream()>>>(static_cast<D*>(dst.data), layout_of(dst), dst.contiguous, v, n);
    PRIMER_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace primer::ops::cuda_ops
