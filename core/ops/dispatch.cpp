#include "core/ops/dispatch.h"

namespace primer::ops {

void fail_no_cuda() { PRIMER_FAIL("a CUDA tensor reached an op in a primer built without CUDA (-DPRIMER_CUDA=OFF)"); }

StridedDesc strided_desc(const Tensor& t) {
  PRIMER_CHECK(t.dim() <= kMaxDims, "{} has more than {} dimensions", t.describe(), kMaxDims);
  StridedDesc d;
  d.data = t.data_ptr();
  d.dtype = t.dtype();
  d.ndim = t.dim();
  for (int i = 0; i < t.dim(); ++i) {
    d.shape[i] = t.shape()[i];
    d.strides[i] = t.strides()[i];
  }
  d.contiguous = t.is_contiguous();
  return d;
}

void expect(const Tensor& t, const char* op, const char* arg, Device device, std::initializer_list<DType> dtypes) {
  PRIMER_CHECK(t.defined(), "{}: argument '{}' is undefined", op, arg);
  PRIMER_CHECK(t.device() == device, "{}: argument '{}' is {}, expected it on {}", op, arg, t.describe(), device.str());
  bool ok = false;
  std::string names;
  for (DType d : dtypes) {
    ok |= (d == t.dtype());
    names += std::string(names.empty() ? "" : "/") + dtype_name(d);
  }
  PRIMER_CHECK(ok, "{}: argument '{}' is {}, expected dtype {}", op, arg, t.describe(), names);
}

void expect_shape(const Tensor& t, const char* op, const char* arg, const Shape& shape) {
  PRIMER_CHECK(t.shape() == shape, "{}: argument '{}' is {}, expected shape {}", op, arg, t.describe(),
               shape_str(shape));
}

}  // namespace primer::ops
