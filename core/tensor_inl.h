// Template members of Tensor.
#pragma once
#include "core/check.h"
#include "core/ops/cast.h"

namespace primer {

template <class T> T* Tensor::data() const {
  PRIMER_CHECK(dtype_of<T>::value == dtype_, "tensor is {} but was read as {}", describe(),
               dtype_name(dtype_of<T>::value));
  return static_cast<T*>(data_ptr());
}

template <class T>
Tensor Tensor::from_vector(const std::vector<T>& values, const Shape& shape, DType dtype, Device device) {
  PRIMER_CHECK(int64_t(values.size()) == shape_numel(shape), "from_vector: {} values for shape {}", values.size(),
               shape_str(shape));
  Tensor host = empty(shape, dtype_of<T>::value, Device::cpu());
  std::copy(values.begin(), values.end(), host.data<T>());
  return host.to(dtype).to(device);
}

template <class T> std::vector<T> Tensor::to_vector() const {
  Tensor host = to(Device::cpu()).to(dtype_of<T>::value).contiguous();
  const T* p = host.data<T>();
  return std::vector<T>(p, p + host.numel());
}

}  // namespace primer
