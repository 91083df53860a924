#include "core/ops/cpu/copy.h"

#include <cstring>

#include "core/ops/cpu/element_access.h"
#include "core/tensor.h"

namespace primer::ops::cpu {

void copy(const StridedDesc& dst, const StridedDesc& src) {
  const int64_t n = numel(dst);
  if (dst.dtype == src.dtype && dst.contiguous && src.contiguous) {
    std::memmove(dst.data, src.data, size_t(n) * dtype_size(dst.dtype));
    return;
  }
  visit_dtype(src.dtype, [&](auto s) {
    using S = decltype(s);
    visit_dtype(dst.dtype, [&](auto d) {
      using D = decltype(d);
      if (dst.contiguous && src.contiguous) {
#pragma omp parallel for schedule(static) if (n > (1 << 16))
        for (int64_t i = 0; i < n; ++i) store_from_double<D>(dst.data, i, load_as_double<S>(src.data, i));
      } else {
#pragma omp parallel for schedule(static) if (n > (1 << 16))
        for (int64_t i = 0; i < n; ++i)
          store_from_double<D>(dst.data, strided_offset(dst, i), load_as_double<S>(src.data, strided_offset(src, i)));
      }
    });
  });
}

void fill(const StridedDesc& dst, double value) {
  const int64_t n = numel(dst);
  visit_dtype(dst.dtype, [&](auto d) {
    using D = decltype(d);
#pragma omp parallel for schedule(static) if (n > (1 << 16))
    for (int64_t i = 0; i < n; ++i) store_from_double<D>(dst.data, dst.contiguous ? i : strided_offset(dst, i), value);
  });
}

}  // namespace primer::ops::cpu
