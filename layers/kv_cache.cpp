#include "layers/kv_cache.h"

#include "core/check.h"

namespace primer::layers {

Tensor append_rows(const Tensor& cache, const Tensor& rows) {
  PRIMER_CHECK(cache.size(0) == rows.size(0) && cache.size(2) == rows.size(2) && cache.size(3) == rows.size(3) &&
                   cache.dtype() == rows.dtype(),
               "the key/value cache {} does not fit the new tokens' {}", cache.describe(), rows.describe());
  const int64_t T1 = cache.size(1), T2 = rows.size(1);
  Tensor out = Tensor::empty({rows.size(0), T1 + T2, rows.size(2), rows.size(3)}, rows.dtype(), rows.device());
  out.slice(1, 0, T1).copy_from(cache);
  out.slice(1, T1, T1 + T2).copy_from(rows);
  return out;
}

}  // namespace primer::layers
