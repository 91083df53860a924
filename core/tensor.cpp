#include "core/tensor.h"

#include <algorithm>
#include <numeric>

#include "core/cuda_runtime.h"
#include "core/ops/cast.h"

namespace primer {

std::string shape_str(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

Shape contiguous_strides(const Shape& shape) {
  Shape st(shape.size());
  int64_t acc = 1;
  for (int i = int(shape.size()) - 1; i >= 0; --i) {
    st[i] = acc;
    acc *= std::max<int64_t>(shape[i], 1);
  }
  return st;
}

Tensor Tensor::contiguous_over(const Shape& shape, DType dtype, Device device, bool with_memory) {
  for (int64_t d : shape) PRIMER_CHECK(d >= 0, "negative dimension in shape {}", shape_str(shape));
  Tensor t;
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  t.dtype_ = dtype;
  t.device_ = device;
  const size_t bytes = size_t(shape_numel(shape)) * dtype_size(dtype);
  t.storage_ = with_memory ? allocate(device, bytes) : std::make_shared<Storage>(nullptr, bytes, device);
  return t;
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  return contiguous_over(shape, dtype, device, true);
}

Tensor Tensor::released(const Shape& shape, DType dtype, Device device) {
  return contiguous_over(shape, dtype, device, false);
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.zero_();
  return t;
}

Tensor Tensor::full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.fill_(value);
  return t;
}

int Tensor::wrap_dim(int d, int ndim) const {
  const int w = d < 0 ? d + ndim : d;
  PRIMER_CHECK(w >= 0 && w < ndim, "dimension {} out of range for {}", d, describe());
  return w;
}

int64_t Tensor::size(int d) const { return shape_[wrap_dim(d, dim())]; }
int64_t Tensor::stride(int d) const { return strides_[wrap_dim(d, dim())]; }

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (int i = dim() - 1; i >= 0; --i) {
    if (shape_[i] == 1) continue;
    if (strides_[i] != expected) return false;
    expected *= shape_[i];
  }
  return true;
}

void* Tensor::data_ptr() const {
  PRIMER_CHECK(defined(), "access to an undefined tensor");
  PRIMER_CHECK(storage_->resident(), "access to released memory ({}): a sharded parameter used outside its gather",
               describe());
  return static_cast<char*>(storage_->data()) + offset_ * int64_t(dtype_size(dtype_));
}

Tensor Tensor::view(const Shape& shape) const {
  PRIMER_CHECK(is_contiguous(), "view {} of non-contiguous {}: call contiguous() or reshape()", shape_str(shape),
               describe());
  Shape s = shape;
  int infer = -1;
  int64_t known = 1;
  for (int i = 0; i < int(s.size()); ++i) {
    if (s[i] == -1) {
      PRIMER_CHECK(infer < 0, "view {}: only one dimension may be -1", shape_str(shape));
      infer = i;
    } else {
      known *= s[i];
    }
  }
  if (infer >= 0) {
    PRIMER_CHECK(known > 0 && numel() % known == 0, "view {} does not fit {}", shape_str(shape), describe());
    s[infer] = numel() / known;
  }
  PRIMER_CHECK(shape_numel(s) == numel(), "view {} has {} elements but {} has {}", shape_str(s), shape_numel(s),
               describe(), numel());
  Tensor t = *this;
  t.shape_ = s;
  t.strides_ = contiguous_strides(s);
  return t;
}

Tensor Tensor::reshape(const Shape& shape) const { return is_contiguous() ? view(shape) : contiguous().view(shape); }

Tensor Tensor::slice(int d, int64_t start, int64_t end) const {
  d = wrap_dim(d, dim());
  PRIMER_CHECK(0 <= start && start <= end && end <= shape_[d], "slice [{}, {}) of dim {} of {}", start, end, d,
               describe());
  Tensor t = *this;
  t.offset_ += start * strides_[d];
  t.shape_[d] = end - start;
  return t;
}

Tensor Tensor::select(int d, int64_t index) const {
  d = wrap_dim(d, dim());
  PRIMER_CHECK(0 <= index && index < shape_[d], "select index {} of dim {} of {}", index, d, describe());
  Tensor t = *this;
  t.offset_ += index * strides_[d];
  t.shape_.erase(t.shape_.begin() + d);
  t.strides_.erase(t.strides_.begin() + d);
  return t;
}

Tensor Tensor::transpose(int d0, int d1) const {
  d0 = wrap_dim(d0, dim());
  d1 = wrap_dim(d1, dim());
  Tensor t = *this;
  std::swap(t.shape_[d0], t.shape_[d1]);
  std::swap(t.strides_[d0], t.strides_[d1]);
  return t;
}

Tensor Tensor::permute(const std::vector<int>& order) const {
  PRIMER_CHECK(int(order.size()) == dim(), "permute with {} axes of {}", order.size(), describe());
  std::vector<bool> seen(dim(), false);
  Tensor t = *this;
  for (int i = 0; i < dim(); ++i) {
    const int src = wrap_dim(order[i], dim());
    PRIMER_CHECK(!seen[src], "permute: axis {} repeated", src);
    seen[src] = true;
    t.shape_[i] = shape_[src];
    t.strides_[i] = strides_[src];
  }
  return t;
}

Tensor Tensor::unsqueeze(int d) const {
  d = wrap_dim(d, dim() + 1);
  Tensor t = *this;
  const int64_t st = d < dim() ? strides_[d] * shape_[d] : 1;
  t.shape_.insert(t.shape_.begin() + d, 1);
  t.strides_.insert(t.strides_.begin() + d, st);
  return t;
}

Tensor Tensor::flatten_to_2d() const {
  PRIMER_CHECK(dim() >= 1, "flatten_to_2d of a scalar");
  return view({numel() / std::max<int64_t>(size(-1), 1), size(-1)});
}

Tensor Tensor::contiguous() const { return is_contiguous() ? *this : clone(); }

Tensor Tensor::clone() const {
  Tensor out = empty(shape_, dtype_, device_);
  out.copy_from(*this);
  return out;
}

Tensor Tensor::to(Device device) const {
  if (device == device_) return *this;
  Tensor out = empty(shape_, dtype_, device);
  out.copy_from(*this);
  return out;
}

Tensor Tensor::to(DType dtype) const { return dtype == dtype_ ? *this : ops::cast(*this, dtype); }

void Tensor::copy_from(const Tensor& src) const {
  PRIMER_CHECK(src.shape() == shape_, "copy of {} into {}: shapes differ", src.describe(), describe());
  if (src.device() == device_) {
    ops::copy(*this, src);
    return;
  }
  // Across devices: move the dense bytes in src's dtype, then convert/scatter on this device.
  Tensor dense = src.contiguous();
  Tensor staged = (is_contiguous() && dtype_ == src.dtype()) ? *this : empty(shape_, src.dtype(), device_);
  const auto kind = src.is_cpu() ? cuda::CopyKind::HostToDevice
                    : is_cpu()   ? cuda::CopyKind::DeviceToHost
                                 : cuda::CopyKind::DeviceToDevice;
  cuda::copy(staged.data_ptr(), dense.data_ptr(), dense.nbytes(), kind);
  if (staged.data_ptr() != data_ptr()) ops::copy(*this, staged);
}

void Tensor::zero_() const {
  if (is_contiguous() && is_cuda()) {
    cuda::memset_zero(data_ptr(), nbytes());
  } else {
    ops::fill(*this, 0.0);
  }
}

void Tensor::fill_(double value) const { ops::fill(*this, value); }

double Tensor::item() const {
  PRIMER_CHECK(numel() == 1, "item() of {} which has {} elements", describe(), numel());
  return to_vector<double>()[0];
}

std::string Tensor::describe() const {
  if (!defined()) return "<undefined tensor>";
  return fmt::format("{}{} ({})", dtype_name(dtype_), shape_str(shape_), device_.str());
}

}  // namespace primer
