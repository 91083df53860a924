#include <cmath>

#include "core/check.h"
#include "recipes/inspect_parts.h"

namespace primer::recipes::inspect {

void Verification::run(const std::function<void()>& check) {
  try {
    check();
  } catch (const std::exception& e) {  // primer::Error, and whatever a library throws on bad bytes
    problem(e.what());
  }
}

void Verification::count(const std::string& what, int64_t n) {
  json::Value& c = counts_[what];
  c = (c.is_null() ? 0 : c.as_int()) + n;
}

void Verification::count_nonfinite(const std::string& name, const Tensor& values) {
  PRIMER_CHECK(values.dtype() == DType::F32 && values.device().is_cpu() && values.is_contiguous(),
               "count_nonfinite: expected a contiguous f32 CPU tensor for '{}'", name);
  const float* v = values.data<float>();
  int64_t n = 0;
  for (int64_t i = 0; i < values.numel(); ++i) n += !std::isfinite(v[i]);
  count("tensors scanned for NaN/inf");
  if (n == 0) return;
  nonfinite_ += n;
  problem(fmt::format("'{}' holds {} non-finite value{} (NaN/inf) of {}", name, n, n == 1 ? "" : "s", values.numel()));
}

json::Value Verification::to_json() const {
  json::Value v;
  v["checked"] = counts_;
  v["nonfinite_values"] = nonfinite_;
  v["problems"] = problems_;
  return v;
}

}  // namespace primer::recipes::inspect
