// The B'MOJO-F mixer (BMF) on the CPU: the layer equals the sublayer computed token by token in f64 from its
// equations (the reference implementation's two windows merged by log-sum-exp), for each SSM (GKA, GDN, Mamba-2),
// tied and untied fading projections, with and without QK-norm; whole-layer finite differences (input, every
// parameter, the SSM's initial state, a final-state gradient); one call equals two calls through the carried state,
// and decoding token by token (1e-11: GKA's solve, as tests/cpu/test_gka_mixer.cpp) equals the full forward (from
// nothing, from an SSM state, from a prefix's whole state); bmojo_config (and the SSM's block) round-trips through
// config.json, the weights through an export in the reference's layout; hybrid_learnable_params selects the sublayer; a
// "*-BMF" decoder trains.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>

#include "core/autograd/functions.h"
#include "core/io/safetensors.h"
#include "layers/bmf_mixer.h"
#include "layers/decoder_lm.h"
#include "layers/hf_checkpoint.h"
#include "tests/support/mixer_checks.h"
#include "tests/support/test_util.h"

namespace primer {
namespace {

struct Variant {
  const char* name;
  const char* ssm;
  bool tied, qk_norm;
};
const Variant kVariants[] = {
    {"gka_tied", "gka", true, true},         {"gka_untied", "gated_kalmanet", false, true},
    {"gdn_tied", "gdn", true, true},         {"gdn_untied", "gated_deltanet", false, true},
    {"m2_tied", "mamba2", true, true},       {"m2_untied", "mamba2", false, true},
    {"gdn_no_qk_norm", "gdn", false, false},
};

constexpr int64_t kWindow = 3;

ModelConfig tiny(const Variant& v) {
  ModelConfig c = test::tiny_mixer_config(4, 2);
  c.qk_norm = v.qk_norm;
  c.bmojo.ssm_mixer = v.ssm;
  c.bmojo.tie_attn_weights = v.tied;
  c.bmojo.window_size = kWindow;
  c.gka.conv_size = c.gdn.conv_size = c.mamba2.conv_size = 3;
  c.mamba2.use_qk_norm = v.qk_norm;
  return c;
}

layers::MixerContext context(const ModelConfig& c, int64_t B, int64_t T, int64_t first) {
  std::vector<int32_t> pos(size_t(B * T));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) pos[size_t(b * T + t)] = int32_t(first + t);
  layers::MixerContext ctx;
  ctx.positions = Tensor::from_vector(pos, {B, T}, DType::I32);
  ctx.inv_freq = rope_inv_freq_for(c);
  return ctx;
}

// ---- The sublayer token by token in f64 ----

using Vec = std::vector<double>;

struct Weights {
  ParameterRegistry& params;
  std::string prefix;
  Vec get(const std::string& leaf) const { return params.get(prefix + leaf).var->value.to_vector<double>(); }
};

// W [rows, cols] · x.
Vec matvec(const Vec& W, const Vec& x) {
  Vec y(W.size() / x.size(), 0.0);
  for (size_t r = 0; r < y.size(); ++r)
    for (size_t c = 0; c < x.size(); ++c) y[r] += W[r * x.size() + c] * x[c];
  return y;
}

// Head h of a projected token: RMSNorm with weight w (if given), then RoPE at position p (if rotate).
Vec head(const Vec& proj, int64_t h, int64_t D, const Vec* w, double eps, const Vec* inv_freq, double p) {
  Vec x(proj.begin() + h * D, proj.begin() + (h + 1) * D);
  if (w) {
    double ms = 0;
    for (double e : x) ms += e * e / double(D);
    for (int64_t i = 0; i < D; ++i) x[size_t(i)] *= (*w)[size_t(i)] / std::sqrt(ms + eps);
  }
  if (!inv_freq) return x;
  Vec y(x);
  for (int64_t i = 0; i < D / 2; ++i) {
    const double a = p * (*inv_freq)[size_t(i)], x1 = x[size_t(i)], x2 = x[size_t(i + D / 2)];
    y[size_t(i)] = x1 * std::cos(a) - x2 * std::sin(a);
    y[size_t(i + D / 2)] = x2 * std::cos(a) + x1 * std::sin(a);
  }
  return y;
}

struct Softmax {
  double lse = -std::numeric_limits<double>::infinity();
  Vec out;
};

// Softmax attention of q over keys[j], values[j] for j in [lo, hi] (empty when hi < lo: lse −inf, out 0).
Softmax attend(const Vec& q, const std::vector<Vec>& keys, const std::vector<Vec>& values, int64_t lo, int64_t hi,
               double scale) {
  Softmax s;
  s.out.assign(q.size(), 0.0);
  if (hi < lo) return s;
  Vec scores;
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t j = lo; j <= hi; ++j) {
    double d = 0;
    for (size_t i = 0; i < q.size(); ++i) d += q[i] * keys[size_t(j)][i];
    scores.push_back(scale * d);
    m = std::max(m, scale * d);
  }
  double z = 0;
  for (double e : scores) z += std::exp(e - m);
  s.lse = m + std::log(z);
  for (int64_t j = lo; j <= hi; ++j)
    for (size_t i = 0; i < q.size(); ++i) s.out[i] += std::exp(scores[size_t(j - lo)] - s.lse) * values[size_t(j)][i];
  return s;
}

// The sublayer on x [B, T, d] given the SSM's output `fading` [B, T, d] (the SSM is checked against its own
// reference in its tests), tokens at RoPE positions first + t, with the masks of a call without a cache.
Tensor bmf_reference(const ModelConfig& c, const Weights& w, const Tensor& x, const Tensor& fading, int64_t first) {
  const int64_t B = x.size(0), T = x.size(1), d = c.hidden_size, D = c.head_dim, Hq = c.num_attention_heads,
                Hkv = c.num_key_value_heads, W = c.bmojo.window_size;
  const std::string s = c.bmojo.tie_attn_weights ? "" : "_";
  const Vec inv_freq = rope_inv_freq_for(c).to_vector<double>();
  const Vec wq = w.get("bmojo_attn.q_proj.weight"), wk = w.get("bmojo_attn.k_proj.weight"),
            wv = w.get("bmojo_attn.v_proj.weight"), wo = w.get("bmojo_attn.o_proj.weight");
  const Vec wq_f = w.get("bmojo_attn.q_proj" + s + ".weight"), wk_f = w.get("bmojo_attn.k_proj" + s + ".weight"),
            wv_f = w.get("bmojo_attn.v_proj" + s + ".weight");
  Vec qn, kn, qn_f, kn_f;
  if (c.qk_norm) {
    qn = w.get("bmojo_attn.q_norm.weight"), kn = w.get("bmojo_attn.k_norm.weight");
    qn_f = w.get("bmojo_attn.q_norm" + s + ".weight"), kn_f = w.get("bmojo_attn.k_norm" + s + ".weight");
  }
  const double scale = 1.0 / std::sqrt(double(c.qk_norm ? D : d / Hq));
  const Vec xs = x.to_vector<double>(), fs = fading.to_vector<double>();
  Vec y(size_t(B * T * d), 0.0);
  for (int64_t b = 0; b < B; ++b) {
    auto row = [&](const Vec& a, int64_t t) {
      return Vec(a.begin() + (b * T + t) * d, a.begin() + (b * T + t + 1) * d);
    };
    // Per kv head: the in-context and fading keys and values of every token.
    std::vector<std::vector<Vec>> k(static_cast<size_t>(Hkv)), v(k), k_f(k), v_f(k);
    for (int64_t t = 0; t < T; ++t) {
      const double p = double(first + t);
      const Vec xk = matvec(wk, row(xs, t)), xv = matvec(wv, row(xs, t));
      const Vec fk = matvec(wk_f, row(fs, t)), fv = matvec(wv_f, row(fs, t));
      for (int64_t g = 0; g < Hkv; ++g) {
        k[size_t(g)].push_back(head(xk, g, D, c.qk_norm ? &kn : nullptr, c.rms_norm_eps, &inv_freq, p));
        v[size_t(g)].push_back(head(xv, g, D, nullptr, 0, nullptr, 0));
        k_f[size_t(g)].push_back(head(fk, g, D, c.qk_norm ? &kn_f : nullptr, c.rms_norm_eps, &inv_freq, p));
        v_f[size_t(g)].push_back(head(fv, g, D, nullptr, 0, nullptr, 0));
      }
    }
    for (int64_t t = 0; t < T; ++t) {
      const double p = double(first + t);
      const Vec xq = matvec(wq, row(xs, t)), xq_f = matvec(wq_f, row(xs, t));
      Vec o(size_t(Hq * D));
      for (int64_t h = 0; h < Hq; ++h) {
        const size_t g = size_t(h / (Hq / Hkv));
        const Vec q = head(xq, h, D, c.qk_norm ? &qn : nullptr, c.rms_norm_eps, &inv_freq, p);
        const Vec q_f = head(xq_f, h, D, c.qk_norm ? &qn_f : nullptr, c.rms_norm_eps, &inv_freq, p);
        // In-context keys [t − W + 1, t]; fading keys [t − 2W + 1, t − W].
        const Softmax sc = attend(q, k[g], v[g], std::max<int64_t>(0, t - W + 1), t, scale);
        const Softmax sf = attend(q_f, k_f[g], v_f[g], std::max<int64_t>(0, t - 2 * W + 1), t - W, scale);
        // The reference's merge: max-shifted exponentials of the two lse.
        const double m = std::max(sc.lse, sf.lse), ec = std::exp(sc.lse - m), ef = std::exp(sf.lse - m);
        for (int64_t i = 0; i < D; ++i)
          o[size_t(h * D + i)] = (sc.out[size_t(i)] * ec + sf.out[size_t(i)] * ef) / (ec + ef);
      }
      const Vec yt = matvec(wo, o);
      std::copy(yt.begin(), yt.end(), y.begin() + (b * T + t) * d);
    }
  }
  return Tensor::from_vector(y, x.shape(), DType::F64);
}

// The SSM's part of the state after a random prefix of `T` tokens (conv and recurrent entries, no key cache).
layers::MixerState ssm_state(layers::BmfMixer& mixer, const ModelConfig& c, int64_t B, int64_t T, uint64_t seed) {
  ag::NoGrad no_grad;
  layers::MixerState full, s;
  mixer.forward(ag::constant(test::randn({B, T, c.hidden_size}, seed)), context(c, B, T, 0), nullptr, &full);
  for (const ag::Var& v : full.conv) s.conv.push_back(ag::constant(v->value));
  for (const ag::Var& v : full.recurrent) s.recurrent.push_back(ag::constant(v->value));
  return s;
}

class BmfMixerVariants : public ::testing::TestWithParam<Variant> {};

TEST_P(BmfMixerVariants, LayerEqualsTheSublayerTokenByToken) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const ModelConfig c = tiny(GetParam());
  ParameterRegistry params;
  layers::BmfMixer mixer(c, "bmojo_f", params);
  params.materialize(Device::cpu(), DType::F64, seed);
  for (Parameter* p : params.all())  // the norms' weights away from 1
    p->var->value.copy_from(
        test::randn(p->shape, seed ^ std::hash<std::string>{}(p->name), DType::F64, Device::cpu(), 0.5));
  const int64_t B = 2, T = 3 * kWindow + 2, first = 5;  // tokens with no, some and a full fading window
  const Tensor x = test::randn({B, T, c.hidden_size}, seed + 1);
  ag::NoGrad no_grad;
  const layers::MixerContext ctx = context(c, B, T, first);
  const Tensor fading = mixer.ssm().forward(ag::constant(x), ctx)->value;
  const Tensor y = mixer.forward(ag::constant(x), ctx)->value;
  test::expect_close(y, bmf_reference(c, {params, "bmojo_f."}, x, fading, first), 1e-12, 1e-12, "y");
}

TEST_P(BmfMixerVariants, LayerGradientsMatchFiniteDifferences) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  ModelConfig c = tiny(GetParam());
  // GKA's backward is the exact ridge regression's gradient: converge the solve (as tests/cpu/test_gka_mixer.cpp).
  c.gka.ridge_strength = 0.75;
  c.gka.num_iter = 40;
  ParameterRegistry params;
  layers::BmfMixer mixer(c, "bmojo_f", params);
  params.materialize(Device::cpu(), DType::F64, seed);
  const int64_t B = 2, T = 2 * kWindow + 2;
  test::run_mixer_gradcheck(mixer, params, test::randn({B, T, c.hidden_size}, seed + 2),
                            ssm_state(mixer, c, B, 4, seed + 1), context(c, B, T, 2), seed);
}

TEST_P(BmfMixerVariants, TwoCallsThroughTheCarriedStateEqualOne) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const ModelConfig c = tiny(GetParam());
  ParameterRegistry params;
  layers::BmfMixer mixer(c, "bmojo_f", params);
  params.materialize(Device::cpu(), DType::F64, seed);
  const int64_t B = 2, T = 11;
  const Tensor x = test::randn({B, T, c.hidden_size}, seed + 1);
  ag::NoGrad no_grad;
  const Tensor whole = mixer.forward(ag::constant(x), context(c, B, T, 0))->value;
  for (const int64_t cut : {1, 4, 8}) {
    SCOPED_TRACE("cut at " + std::to_string(cut));
    layers::MixerState s;
    const Tensor y1 =
        mixer.forward(ag::constant(x.slice(1, 0, cut).contiguous()), context(c, B, cut, 0), nullptr, &s)->value;
    const Tensor y2 =
        mixer.forward(ag::constant(x.slice(1, cut, T).contiguous()), context(c, B, T - cut, cut), &s)->value;
    test::expect_close(y1, whole.slice(1, 0, cut), 1e-11, 1e-11, "first call");
    test::expect_close(y2, whole.slice(1, cut, T), 1e-11, 1e-11, "second call");
    ASSERT_EQ(int64_t(s.kv.size()), B);
    EXPECT_EQ(s.kv[0].size(), std::min<int64_t>(cut, 2 * kWindow - 1));
    EXPECT_EQ(s.kv[0].keys().size(2), 2 * c.num_key_value_heads);
  }
}

TEST_P(BmfMixerVariants, DecodingTokenByTokenReproducesTheFullForward) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const ModelConfig c = tiny(GetParam());
  ParameterRegistry params;
  layers::BmfMixer mixer(c, "bmojo_f", params);
  params.materialize(Device::cpu(), DType::F64, seed);
  const int64_t B = 2, T = 9, prefix = 4;
  const Tensor x = test::randn({B, T, c.hidden_size}, seed + 1);
  {
    SCOPED_TRACE("from nothing");
    test::expect_decoding_matches_forward(mixer, x, {}, context(c, B, T, 0), 1e-11);
  }
  {
    SCOPED_TRACE("from an SSM state");
    test::expect_decoding_matches_forward(mixer, x, ssm_state(mixer, c, B, 3, seed + 2), context(c, B, T, 0), 1e-11);
  }
  {
    SCOPED_TRACE("after a prefix (SSM state and key cache)");
    layers::MixerState s;
    {
      ag::NoGrad no_grad;
      mixer.forward(ag::constant(test::randn({B, prefix, c.hidden_size}, seed + 3)), context(c, B, prefix, 0), nullptr,
                    &s);
    }
    test::expect_decoding_matches_forward(mixer, x, s, context(c, B, T, prefix), 1e-11);
  }
}

INSTANTIATE_TEST_SUITE_P(Ssms, BmfMixerVariants, ::testing::ValuesIn(kVariants),
                         [](const auto& i) { return std::string(i.param.name); });

ModelConfig tiny_hybrid(const Variant& v) {
  ModelConfig c = tiny(v);
  c.layer_types = parse_hybrid_pattern("*-BMF", "test");
  c.validate("test");
  return c;
}

TEST(BmfMixer, RegistersTheReferencesParameterNames) {
  for (const bool tied : {true, false}) {
    SCOPED_TRACE(tied ? "tied" : "untied");
    ParameterRegistry params;
    layers::DecoderLM model(tiny_hybrid({"", "gka", tied, true}), params);
    const std::string p = "model.layers.1.bmojo_f.";
    std::vector<std::pair<std::string, Shape>> expected = {
        {"gka.q_proj.weight", {16, 8}},        {"gka.o_proj.weight", {8, 16}},
        {"bmojo_attn.q_proj.weight", {16, 8}}, {"bmojo_attn.k_proj.weight", {8, 8}},
        {"bmojo_attn.v_proj.weight", {8, 8}},  {"bmojo_attn.o_proj.weight", {8, 16}},
        {"bmojo_attn.q_norm.weight", {4}},     {"bmojo_attn.k_norm.weight", {4}}};
    const std::vector<std::string> untied = {"bmojo_attn.q_proj_.weight", "bmojo_attn.k_proj_.weight",
                                             "bmojo_attn.v_proj_.weight", "bmojo_attn.q_norm_.weight",
                                             "bmojo_attn.k_norm_.weight"};
    test::expect_parameter_shapes(params, p, expected, false);
    for (const std::string& name : untied) EXPECT_EQ(params.contains(p + name), !tied) << name;
    EXPECT_FALSE(params.contains(p + "bmojo_attn.o_proj_.weight"));
  }
}

TEST(BmfMixer, ConfigJsonRoundTripsWithTheSsmsBlock) {
  ModelConfig c = tiny_hybrid(kVariants[1]);
  c.gka.num_iter = 7;
  const json::Value j = to_hf_json(c);
  const json::Value* block = j.as_object().find("bmojo_config");
  ASSERT_NE(block, nullptr);
  EXPECT_EQ(block->as_object().find("ssm_mixer")->as_string(), "gated_kalmanet");
  EXPECT_EQ(block->as_object().find("num_heads")->as_int(), 4);
  ASSERT_NE(j.as_object().find("gka_config"), nullptr);  // the SSM's options, as the reference writes them
  EXPECT_EQ(j.as_object().find("mamba2_config"), nullptr);
  const ModelConfig back = from_hf_json(json::parse(json::dump(j, 2), "written"), "written");
  EXPECT_EQ(back.layer_types, c.layer_types);
  EXPECT_EQ(back.bmojo, c.bmojo);
  EXPECT_EQ(back.gka, c.gka);

  std::string text = json::dump(j, 2);
  text.replace(text.find("\"gated_kalmanet\""), 16, "\"rwkv\"");
  test::expect_error([&] { from_hf_json(json::parse(text, "bad"), "bad"); },
                     {"ssm_mixer", "'rwkv'", "mamba2, gdn, gated_deltanet, gka, gated_kalmanet"});
}

TEST(BmfMixer, ExportImportRoundTripsInTheReferencesLayout) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const ModelConfig c = tiny_hybrid(kVariants[3]);  // GDN, untied
  const std::string dir = testing::TempDir() + "/primer-bmf-" + std::to_string(seed);
  ParameterRegistry params;
  layers::DecoderLM model(c, params);
  params.materialize(Device::cpu(), DType::F32, seed);
  layers::export_hf(dir, c, params, DType::F32);
  const io::SafetensorsCheckpoint ckpt(dir);
  for (const char* name :
       {"model.layers.1.bmojo_f.gdn.q_proj.weight", "model.layers.1.bmojo_f.gdn.gk_proj.weight",
        "model.layers.1.bmojo_f.bmojo_attn.o_proj.weight", "model.layers.1.bmojo_f.bmojo_attn.k_proj_.weight",
        "model.layers.1.bmojo_f.bmojo_attn.k_norm_.weight"})
    EXPECT_TRUE(ckpt.contains(name)) << name;
  const ModelConfig back = load_hf_config(dir + "/config.json");
  EXPECT_EQ(back.bmojo, c.bmojo);
  ParameterRegistry loaded;
  layers::DecoderLM model2(back, loaded);
  loaded.materialize(Device::cpu(), DType::F32, seed + 1);
  layers::load_hf_weights(dir, loaded);
  const Tensor ids = test::rand_ints({2, 9}, seed + 2, 0, c.vocab_size);
  test::expect_close(model2.logits(ids), model.logits(ids), 0, 0, "logits");
  std::filesystem::remove_all(dir);
}

TEST(BmfMixer, LearnableParamsSelectTheSublayer) {
  const uint64_t seed = test::fresh_seed();
  ParameterRegistry params;
  layers::DecoderLM model(tiny_hybrid(kVariants[0]), params);
  params.materialize(Device::cpu(), DType::F32, seed);
  params.set_trainable({"bmojo_f"});
  const Tensor ids = test::rand_ints({2, 8}, seed + 1, 0, 13), targets = test::rand_ints({2, 8}, seed + 2, 0, 13);
  ag::backward(model.loss(ids, targets, 1.0));
  size_t trained = 0;
  for (Parameter* p : params.all()) {
    const bool in_sublayer = p->name.find(".bmojo_f.") != std::string::npos;
    EXPECT_EQ(p->trainable, in_sublayer) << p->name;
    EXPECT_EQ(p->var->grad.defined(), in_sublayer) << p->name;
    trained += in_sublayer;
  }
  EXPECT_GT(trained, 10u);  // the SSM's and the attention's
}

TEST(BmfMixer, HybridDecoderTrains) {
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (const Variant& v : {kVariants[0], kVariants[5]}) {
    SCOPED_TRACE(v.name);
    ModelConfig c = tiny_hybrid(v);
    c.bmojo.window_size = 5;
    test::expect_hybrid_decoder_learns(test::small_hybrid(c), 0.7, seed);
  }
}

}  // namespace
}  // namespace primer
