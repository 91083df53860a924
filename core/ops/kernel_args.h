// Plain descriptors that cross from C++ dispatch code into CUDA launchers (nvcc never sees Tensor).
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace primer::ops {

constexpr int kMaxDims = 8;

struct StridedDesc {
  void* data = nullptr;
  DType dtype = DType::F32;
  int ndim = 0;
  int64_t shape[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};  // in elements
  bool contiguous = false;
};

inline int64_t numel(const StridedDesc& d) {
  int64_t n = 1;
  for (int i = 0; i < d.ndim; ++i) n *= d.shape[i];
  return n;
}

}  // namespace primer::ops
