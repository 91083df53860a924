#include "core/ops/cpu/elementwise.h"

#include "core/ops/cpu/element_access.h"
#include "core/ops/dispatch.h"

namespace primer::ops::cpu {
namespace {

constexpr int64_t kParallelMin = 1 << 15;  // below this, threads cost more than they save

template <class T, class F> void map_dense(T* out, int64_t n, F&& f) {
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < n; ++i) out[i] = f(i);
}

}  // namespace

void binary(Binary op, const StridedDesc& out, const StridedDesc& a, const StridedDesc& b) {
  dispatch_cpu_float(out.dtype, "binary", [&](auto t) {
    using T = decltype(t);
    const T* pa = static_cast<const T*>(a.data);
    const T* pb = static_cast<const T*>(b.data);
    if (a.contiguous && b.contiguous) {
      map_dense(static_cast<T*>(out.data), numel(out), [&](int64_t i) { return math::binary(op, pa[i], pb[i]); });
    } else {
      map_dense(static_cast<T*>(out.data), numel(out),
                [&](int64_t i) { return math::binary(op, pa[strided_offset(a, i)], pb[strided_offset(b, i)]); });
    }
  });
}

void scale(void* out, const void* x, int64_t n, DType dtype, double s) {
  dispatch_cpu_float(dtype, "scale", [&](auto t) {
    using T = decltype(t);
    const T* px = static_cast<const T*>(x);
    map_dense(static_cast<T*>(out), n, [&](int64_t i) { return T(px[i] * s); });
  });
}

void add_inplace(void* dst, DType dst_dtype, const void* src, DType src_dtype, int64_t n, double alpha) {
  PRIMER_CHECK(dst_dtype == src_dtype, "add_: the CPU path needs dst and src of one dtype, got {} and {}",
               dtype_name(dst_dtype), dtype_name(src_dtype));
  dispatch_cpu_float(dst_dtype, "add_", [&](auto t) {
    using T = decltype(t);
    T* pd = static_cast<T*>(dst);
    const T* ps = static_cast<const T*>(src);
    map_dense(pd, n, [&](int64_t i) { return T(pd[i] + alpha * ps[i]); });
  });
}

void unary(Unary op, void* y, const void* x, int64_t n, DType dtype) {
  dispatch_cpu_float(dtype, "unary", [&](auto t) {
    using T = decltype(t);
    const T* px = static_cast<const T*>(x);
    map_dense(static_cast<T*>(y), n, [&](int64_t i) { return math::unary(op, px[i]); });
  });
}

void unary_backward(Unary op, void* dx, const void* x, const void* dy, int64_t n, DType dtype) {
  dispatch_cpu_float(dtype, "unary_backward", [&](auto t) {
    using T = decltype(t);
    const T* px = static_cast<const T*>(x);
    const T* pdy = static_cast<const T*>(dy);
    map_dense(static_cast<T*>(dx), n, [&](int64_t i) { return pdy[i] * math::unary_derivative(op, px[i]); });
  });
}

}  // namespace primer::ops::cpu
