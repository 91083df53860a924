// Shared test support: fresh random inputs, comparisons with dtype-justified tolerances, output poisoning,
// the finite-difference gradient check, and the skip rule for CUDA tests on machines without a GPU.
#pragma once
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "core/cuda_runtime.h"
#include "core/parameters.h"
#include "core/tensor.h"

namespace primer::test {

// A new seed for every call (from std::random_device), so each run draws fresh inputs. Tests print it with
// SCOPED_TRACE so a failure can be replayed with PRIMER_TEST_SEED=<seed>.
uint64_t fresh_seed();

// Normal(0, std) values, never all zero; `dtype` and `device` as given.
Tensor randn(const Shape& shape, uint64_t seed, DType dtype = DType::F64, Device device = Device::cpu(),
             double std = 1.0);
Tensor rand_uniform(const Shape& shape, uint64_t seed, double lo, double hi, DType dtype = DType::F64,
                    Device device = Device::cpu());
Tensor rand_ints(const Shape& shape, uint64_t seed, int64_t lo, int64_t hi, DType dtype = DType::I32,
                 Device device = Device::cpu());

// Fills with NaN (floating) or a sentinel (integers) so that elements a kernel fails to write are caught.
void poison(const Tensor& t);

// The id of a process that has exited (a forked child, reaped): a pid no live process has, for stale-file tests.
int64_t dead_pid();

// Runs fn and expects a primer::Error whose message contains every one of `fragments`.
void expect_error(const std::function<void()>& fn, std::initializer_list<std::string> fragments);

struct Diff {
  double rel_l2 = 0;   // ||a - b|| / ||b||
  double max_abs = 0;  // max |a - b|
  int64_t nonfinite = 0;
};
Diff compare(const Tensor& actual, const Tensor& expected);  // any dtypes/devices; compared in f64

// Expects rel_l2 <= rel_tol and max_abs <= abs_tol and no NaN/inf in `actual`.
void expect_close(const Tensor& actual, const Tensor& expected, double rel_tol, double abs_tol,
                  const std::string& what);

// Central finite differences in f64. `forward` maps inputs to outputs; `backward` maps (inputs, output grads) to
// one gradient per input (undefined for inputs without a gradient). The scalar checked is sum_j <out_j, R_j>
// with fixed random R_j. Every element of every differentiable input is perturbed: keep shapes small.
struct GradCheck {
  std::vector<Tensor> inputs;  // f64, CPU
  std::vector<std::string> names;
  std::function<std::vector<Tensor>(const std::vector<Tensor>&)> forward;
  std::function<std::vector<Tensor>(const std::vector<Tensor>&, const std::vector<Tensor>&)> backward;
  // The five-point stencil errs by ~h^4 |f^(5)| / 30 (truncation) plus ~1.5 eps_f / h (rounding of f: ~1e-16 |f|
  // times the depth of the computation). At h = 1e-5 (relative to |x|) truncation stays negligible even where the
  // function curves sharply (the plain central difference's h^2 |f'''| / 6 reached 1e-6 relative there) and
  // rounding stays near 1e-10, so a correct gradient lands well under the tolerance even through a whole model.
  // An input that still disagrees is judged again at step / 3 (truncation falls 81-fold, a wrong gradient's error
  // does not); an error within the stencil's rounding floor (from Σ|out·R|, the objective's scale) passes.
  double step = 1e-5;
  double tolerance = 1e-6;  // on ||analytic - numeric|| / max(||numeric||, 1e-12)
};
void run_gradcheck(const GradCheck& check, uint64_t seed);

// Gradient check of every parameter of a model in f64: `loss(grad_scale)` must record the model's scalar loss
// whose backward yields gradients of grad_scale * loss (as the fused cross-entropy does). Parameter values are
// first redrawn as N(0, 0.5²) so that constant-initialised ones (norm weights, biases) are exercised too.
void run_model_gradcheck(ParameterRegistry& params, const std::function<ag::Var(double grad_scale)>& loss,
                         uint64_t seed);

}  // namespace primer::test

// For tests labelled `cuda`: skip with a message when no GPU is usable.
#define PRIMER_REQUIRE_CUDA()                                                         \
  do {                                                                                \
    if (!::primer::cuda::available()) GTEST_SKIP() << "no CUDA device: test skipped"; \
  } while (0)
