// Where a tensor lives: the host or a numbered CUDA device.
#pragma once
#include <string>

namespace primer {

struct Device {
  enum class Kind : unsigned char { CPU, CUDA };
  Kind kind = Kind::CPU;
  int index = 0;

  static Device cpu() { return {Kind::CPU, 0}; }
  static Device cuda(int i = 0) { return {Kind::CUDA, i}; }
  bool is_cpu() const { return kind == Kind::CPU; }
  bool is_cuda() const { return kind == Kind::CUDA; }
  bool operator==(const Device& o) const { return kind == o.kind && (kind == Kind::CPU || index == o.index); }
  bool operator!=(const Device& o) const { return !(*this == o); }
  std::string str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }
};

}  // namespace primer
