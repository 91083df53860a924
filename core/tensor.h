// Tensor: a strided view (shape, strides in elements, offset) of shared Storage, with a dtype and a device.
// Views (slice, transpose, view) share storage and cost nothing; ops that need dense memory call contiguous().
// A Tensor holds no autograd state: autograd lives in core/autograd/ on top of plain tensors.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/storage.h"

namespace primer {

using Shape = std::vector<int64_t>;
std::string shape_str(const Shape& s);
int64_t shape_numel(const Shape& s);

class Tensor {
 public:
  Tensor() = default;

  // Factories. Memory from empty() is uninitialised.
  static Tensor empty(const Shape& shape, DType dtype, Device device = Device::cpu());
  static Tensor zeros(const Shape& shape, DType dtype, Device device = Device::cpu());
  static Tensor full(const Shape& shape, double value, DType dtype, Device device = Device::cpu());
  // A tensor whose storage holds no memory until Storage::restore_memory() (FSDP's buffers that live released).
  static Tensor released(const Shape& shape, DType dtype, Device device = Device::cpu());
  // Copies host values (converted to `dtype`) into a new tensor on `device`.
  template <class T> static Tensor from_vector(const std::vector<T>& values, const Shape& shape, DType dtype,
                                               Device device = Device::cpu());

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int dim() const { return int(shape_.size()); }
  int64_t size(int d) const;  // negative d counts from the end
  int64_t stride(int d) const;
  int64_t numel() const { return shape_numel(shape_); }
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  bool is_cpu() const { return device_.is_cpu(); }
  bool is_cuda() const { return device_.is_cuda(); }
  bool is_contiguous() const;
  int64_t offset() const { return offset_; }
  const std::shared_ptr<Storage>& storage() const { return storage_; }

  void* data_ptr() const;
  template <class T> T* data() const;  // checks dtype; pointer to the first element of this view

  // Views.
  Tensor view(const Shape& shape) const;     // requires contiguous; one dim may be -1
  Tensor reshape(const Shape& shape) const;  // view when contiguous, else a contiguous copy
  Tensor slice(int dim, int64_t start, int64_t end) const;
  Tensor select(int dim, int64_t index) const;  // drops `dim`
  Tensor transpose(int d0, int d1) const;
  Tensor permute(const std::vector<int>& order) const;
  Tensor unsqueeze(int dim) const;
  Tensor flatten_to_2d() const;  // [prod(leading), last]; requires contiguous

  // Copies.
  Tensor contiguous() const;       // self if already contiguous
  Tensor clone() const;            // always a fresh contiguous copy
  Tensor to(Device device) const;  // self if already there
  Tensor to(DType dtype) const;    // self if already that dtype
  void copy_from(const Tensor& src)
      const;  // mutate the data, not the view: const like a pointer  // same shape; any devices, dtypes and strides
  void zero_() const;
  void fill_(double value) const;

  // Reads the values (any dtype/device/strides) into host memory, converted to T, in row-major order.
  template <class T> std::vector<T> to_vector() const;
  double item() const;  // single-element tensors

  std::string describe() const;  // e.g. "bf16[4, 128] (cuda:0)"

 private:
  std::shared_ptr<Storage> storage_;
  int64_t offset_ = 0;  // in elements
  Shape shape_, strides_;
  DType dtype_ = DType::F32;
  Device device_;

  int wrap_dim(int d, int ndim) const;
  // A contiguous tensor over a new storage, with its memory or released (Storage::release_memory's state).
  static Tensor contiguous_over(const Shape& shape, DType dtype, Device device, bool with_memory);
};

Shape contiguous_strides(const Shape& shape);

}  // namespace primer

#include "core/tensor_inl.h"
