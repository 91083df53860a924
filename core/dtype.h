// Element types of tensors and the host-side 16-bit float formats.
// bf16/f16 are stored as raw bits on the host; arithmetic always widens to float.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>

namespace primer {

enum class DType : uint8_t { F32, F64, BF16, F16, I32, I64, U8 };

size_t dtype_size(DType t);
const char* dtype_name(DType t);
DType dtype_from_name(const std::string& name);  // "f32", "bf16", "float32", "bfloat16", ...
inline bool is_floating(DType t) { return t == DType::F32 || t == DType::F64 || t == DType::BF16 || t == DType::F16; }

// Host bf16: top 16 bits of an IEEE float, rounded to nearest even (NaN stays NaN).
struct bf16 {
  uint16_t bits = 0;
  bf16() = default;
  explicit bf16(float f) : bits(from_float(f)) {}
  explicit operator float() const {
    uint32_t u = uint32_t(bits) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  static uint16_t from_float(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return uint16_t(u >> 16);
  }
};

// Host IEEE half precision with round-to-nearest-even, subnormals and inf/NaN.
struct f16 {
  uint16_t bits = 0;
  f16() = default;
  explicit f16(float f) : bits(from_float(f)) {}
  explicit operator float() const { return to_float(bits); }
  static uint16_t from_float(float f);
  static float to_float(uint16_t h);
};

template <class T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::F32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::F64; };
template <> struct dtype_of<bf16> { static constexpr DType value = DType::BF16; };
template <> struct dtype_of<f16> { static constexpr DType value = DType::F16; };
template <> struct dtype_of<int32_t> { static constexpr DType value = DType::I32; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::I64; };
template <> struct dtype_of<uint8_t> { static constexpr DType value = DType::U8; };

}  // namespace primer
