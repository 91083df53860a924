#include "tests/support/test_util.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>

#include "core/rng.h"

namespace primer::test {

uint64_t fresh_seed() {
  if (const char* env = std::getenv("PRIMER_TEST_SEED")) return std::strtoull(env, nullptr, 10);
  static std::random_device rd;
  return (uint64_t(rd()) << 32) ^ rd();
}

Tensor randn(const Shape& shape, uint64_t seed, DType dtype, Device device, double std) {
  Tensor t = Tensor::empty(shape, dtype, device);
  fill_normal(t, seed, 0.0, std);
  return t;
}

Tensor rand_uniform(const Shape& shape, uint64_t seed, double lo, double hi, DType dtype, Device device) {
  Tensor t = Tensor::empty(shape, dtype, device);
  fill_uniform(t, seed, lo, hi);
  return t;
}

Tensor rand_ints(const Shape& shape, uint64_t seed, int64_t lo, int64_t hi, DType dtype, Device device) {
  std::vector<int64_t> v(size_t(shape_numel(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = lo + int64_t(uniform01(seed, i) * double(hi - lo)) % (hi - lo);
  return Tensor::from_vector(v, shape, dtype, device);
}

void poison(const Tensor& t) { t.fill_(is_floating(t.dtype()) ? std::numeric_limits<double>::quiet_NaN() : -12345.0); }

int64_t dead_pid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);
  return child;
}

void expect_error(const std::function<void()>& fn, std::initializer_list<std::string> fragments) {
  try {
    fn();
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    for (const std::string& f : fragments) EXPECT_NE(std::string(e.what()).find(f), std::string::npos) << e.what();
  }
}

Diff compare(const Tensor& actual, const Tensor& expected) {
  EXPECT_EQ(actual.shape(), expected.shape()) << actual.describe() << " vs " << expected.describe();
  const auto a = actual.to_vector<double>();
  const auto b = expected.to_vector<double>();
  Diff d;
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (!std::isfinite(a[i])) {
      ++d.nonfinite;
      continue;
    }
    const double e = a[i] - b[i];
    num += e * e;
    den += b[i] * b[i];
    d.max_abs = std::max(d.max_abs, std::abs(e));
  }
  d.rel_l2 = std::sqrt(num) / std::max(std::sqrt(den), 1e-300);
  return d;
}

void expect_close(const Tensor& actual, const Tensor& expected, double rel_tol, double abs_tol,
                  const std::string& what) {
  const Diff d = compare(actual, expected);
  EXPECT_EQ(d.nonfinite, 0) << what << ": non-finite or unwritten elements in " << actual.describe();
  EXPECT_LE(d.rel_l2, rel_tol) << what << ": relative L2 error " << d.rel_l2 << " (max abs " << d.max_abs << ")";
  EXPECT_LE(d.max_abs, abs_tol) << what << ": max abs error " << d.max_abs << " (relative L2 " << d.rel_l2 << ")";
}

void run_gradcheck(const GradCheck& c, uint64_t seed) {
  const std::vector<Tensor> outs = c.forward(c.inputs);
  std::vector<Tensor> weights;
  for (size_t j = 0; j < outs.size(); ++j) weights.push_back(randn(outs[j].shape(), seed + 7919 * (j + 1)));

  // Σ|out·R| at the inputs: the scale of the objective's rounding, which the differences divide by h.
  double objective_scale = 0;
  for (size_t j = 0; j < outs.size(); ++j) {
    const auto a = outs[j].to_vector<double>(), w = weights[j].to_vector<double>();
    for (size_t i = 0; i < a.size(); ++i) objective_scale += std::abs(a[i] * w[i]);
  }

  auto objective = [&](const std::vector<Tensor>& ins) {
    const std::vector<Tensor> o = c.forward(ins);
    double s = 0;
    for (size_t j = 0; j < o.size(); ++j) {
      const auto a = o[j].to_vector<double>(), w = weights[j].to_vector<double>();
      for (size_t i = 0; i < a.size(); ++i) s += a[i] * w[i];
    }
    return s;
  };

  const std::vector<Tensor> grads = c.backward(c.inputs, weights);
  ASSERT_EQ(grads.size(), c.inputs.size()) << "backward must return one gradient per input";
  for (size_t k = 0; k < c.inputs.size(); ++k) {
    if (!grads[k].defined()) continue;
    const std::string name = k < c.names.size() ? c.names[k] : "input " + std::to_string(k);
    ASSERT_EQ(grads[k].shape(), c.inputs[k].shape()) << "gradient shape of " << name;
    std::vector<Tensor> ins;
    for (const Tensor& t : c.inputs) ins.push_back(t.clone());
    Tensor x = ins[k];
    ASSERT_EQ(x.dtype(), DType::F64) << name << " must be f64 for a gradient check";
    double* p = x.data<double>();
    const auto analytic = grads[k].to_vector<double>();
    // The five-point stencil at `step` (relative to |x|), element by element.
    auto numeric_at = [&](double step) {
      std::vector<double> numeric(size_t(x.numel()));
      for (int64_t i = 0; i < x.numel(); ++i) {
        const double orig = p[i];
        const double h = step * std::max(1.0, std::abs(orig));
        auto difference = [&](double d) {  // f(x + d) - f(x - d)
          p[i] = orig + d;
          const double fp = objective(ins);
          p[i] = orig - d;
          const double fm = objective(ins);
          p[i] = orig;
          return fp - fm;
        };
        // Five-point stencil: truncation error O(h^4) instead of the central difference's O(h^2), which through
        // sharply curved spots (an RMSNorm of a near-zero head vector) reached 1e-6 relative at h = 1e-5.
        numeric[size_t(i)] = (8 * difference(h) - difference(2 * h)) / (12 * h);
      }
      return numeric;
    };
    // ||a - b|| / max(||b||, 1e-12), and max |a - b|.
    auto relative = [](const std::vector<double>& a, const std::vector<double>& b, double* max_abs) {
      double err2 = 0, norm2 = 0;
      *max_abs = 0;
      for (size_t i = 0; i < a.size(); ++i) {
        const double e = a[i] - b[i];
        err2 += e * e;
        norm2 += b[i] * b[i];
        *max_abs = std::max(*max_abs, std::abs(e));
      }
      return std::sqrt(err2) / std::max(std::sqrt(norm2), 1e-12);
    };
    // The rounding floor of the stencil at `step`: each evaluation of f errs by about ε·Σ|out·R| (a few roundings
    // per output before the weighted sum: kRoundingsPerOutput), and (8·2 + 2)/12 = 1.5 of those per unit of h reach
    // the estimate. Relative to the numeric gradient, over all elements.
    constexpr double kRoundingsPerOutput = 4;
    // The first step's floor holds for either step's error: the finer stencil rounds 3 times worse, so a gradient
    // passed on its floor alone would let errors three times larger through.
    auto rounding_floor = [&] {
      double floor2 = 0;
      for (int64_t i = 0; i < x.numel(); ++i) {
        const double h = c.step * std::max(1.0, std::abs(p[i]));
        const double e = 1.5 * kRoundingsPerOutput * std::numeric_limits<double>::epsilon() * objective_scale / h;
        floor2 += e * e;
      }
      return std::sqrt(floor2);
    };
    const std::vector<double> numeric = numeric_at(c.step);
    double max_abs = 0;
    double err = relative(analytic, numeric, &max_abs);
    double numeric_norm = 0;
    for (const double v : numeric) numeric_norm += v * v;
    numeric_norm = std::max(std::sqrt(numeric_norm), 1e-12);
    const double floor = rounding_floor() / numeric_norm;
    // A random input now and then lands near such a spot even for the five-point stencil (a B'MOJO-F state whose
    // readout nearly cancels: 4e-6 at h = 1e-5, 4e-10 at h = 1e-6). Truncation falls as h^4 and a wrong gradient's
    // error does not, so a disagreement is judged again at a third of the step before it counts. Where rounding of
    // f limits what the differences resolve (a gradient ~1e-4 of the objective's scale: 1.4e-6 for a fused SWA
    // q_proj, the same with either step), an error within the stencil's rounding floor, or within twice the two
    // stencils' disagreement, passes. The disagreement alone is no bound: the two stencils' rounding errors can
    // nearly coincide (3.5e-5 apart while both were 8e-5 off a correct gradient), hence the explicit floor.
    double resolution = 0;
    if (err > std::max(c.tolerance, floor)) {
      const std::vector<double> finer_numeric = numeric_at(c.step / 3);
      double finer_max_abs = 0, unused = 0;
      const double finer = relative(analytic, finer_numeric, &finer_max_abs);
      resolution = relative(finer_numeric, numeric, &unused);
      if (finer < err) err = finer, max_abs = finer_max_abs;
    }
    int64_t nonfinite = 0;
    for (const double a : analytic)
      if (!std::isfinite(a)) ++nonfinite;
    EXPECT_EQ(nonfinite, 0) << "gradient of " << name << " has non-finite values";
    EXPECT_LE(err, std::max({c.tolerance, floor, 2 * resolution}))
        << "gradient of " << name << ": relative error " << err << " (max abs " << max_abs
        << ") against central differences, whose rounding floor is " << floor
        << " and which disagree between steps h and h/3 by " << resolution;
  }
}

void run_model_gradcheck(ParameterRegistry& params, const std::function<ag::Var(double)>& loss, uint64_t seed) {
  const std::vector<Parameter*> all = params.all();
  GradCheck check;
  for (Parameter* p : all) {
    p->var->value = randn(p->shape, seed ^ std::hash<std::string>{}(p->name), DType::F64, Device::cpu(), 0.5);
    check.inputs.push_back(p->var->value);
    check.names.push_back(p->name);
  }
  auto set_values = [&](const std::vector<Tensor>& ins) {
    for (size_t k = 0; k < all.size(); ++k) all[k]->var->value = ins[k];
  };
  check.forward = [&](const std::vector<Tensor>& ins) {
    set_values(ins);
    ag::NoGrad no_grad;
    return std::vector<Tensor>{loss(1.0)->value};
  };
  check.backward = [&](const std::vector<Tensor>& ins, const std::vector<Tensor>& gout) {
    set_values(ins);
    for (Parameter* p : all) p->var->grad = Tensor();
    ag::backward(loss(gout[0].item()));  // the checked objective's weight enters as grad_scale
    std::vector<Tensor> grads;
    for (Parameter* p : all) grads.push_back(p->var->grad);
    return grads;
  };
  run_gradcheck(check, seed + 3);
}

}  // namespace primer::test
