// Attention over two key sources in one softmax (ops::merged_attention: B'MOJO-F's in-context window (p − W, p]
// and fading window (p − 2W, p − W]) on CUDA — on Hopper the fused two-source kernels, elsewhere two attentions and
// the merge — against the f64 CPU path on the same bf16-rounded inputs: out, lse and every gradient, shared and own
// queries, head_dim 64 and 128, MHA and GQA, at T = 1, odd T, windows off and on the tile size, a window longer than
// the sequence (the fading source sees nothing), and queries after a halo of cached keys (sequence parallelism,
// decoding). Bounds are those of one attention (tests/cuda/test_attention_cuda.cpp): the softmax is one softmax over
// the union, so the errors are of the same kind and count.
#include <gtest/gtest.h>

#include <cmath>

#include "core/ops/attention.h"
#include "tests/cuda/parity_util.h"

namespace primer {
namespace {

struct Case {
  int64_t T, W, Hq, Hkv, Dh;
  bool own_queries;  // untied B'MOJO-F: the fading source has its own queries
  int64_t halo = 0;  // keys before the queries (q_offset = halo), as after a chunk's predecessor or a cache
};

const Case kCases[] = {
    {1, 16, 8, 2, 128, false, 20},    // one token after 20: the fading window partly visible
    {63, 128, 8, 8, 64, true},        // W > T: no fading key at all
    {257, 100, 8, 2, 64, true},       // odd T, window not a tile multiple
    {640, 256, 8, 2, 128, false},     // windows on tile boundaries
    {1000, 300, 8, 8, 128, true},     // both sources over many tiles
    {200, 50, 8, 2, 128, false, 99},  // after a halo of 2W − 1 keys (sequence parallelism)
    {1, 40, 8, 2, 64, true, 79},      // a decode step after a cache of 2W − 1 tokens
};

std::string describe(const Case& c) {
  return fmt::format("T {} W {} H {}/{} Dh {} {} queries halo {}", c.T, c.W, c.Hq, c.Hkv, c.Dh,
                     c.own_queries ? "own" : "shared", c.halo);
}

TEST(MergedAttentionCuda, MatchesTheF64Reference) {
  PRIMER_REQUIRE_CUDA();
  const uint64_t seed = test::fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  constexpr int64_t B = 2;
  for (const Case& c : kCases) {
    const std::string what = describe(c);
    SCOPED_TRACE(what);
    const int64_t Tk = c.halo + c.T;
    auto gpu = [&](const Shape& shape, uint64_t s) { return test::random_on_cuda(shape, seed + s, DType::BF16); };
    const Tensor q = gpu({B, c.T, c.Hq, c.Dh}, 0), q_f = c.own_queries ? gpu({B, c.T, c.Hq, c.Dh}, 1) : Tensor();
    const Tensor k = gpu({B, Tk, c.Hkv, c.Dh}, 2), v = gpu({B, Tk, c.Hkv, c.Dh}, 3);
    const Tensor k_f = gpu({B, Tk, c.Hkv, c.Dh}, 4), v_f = gpu({B, Tk, c.Hkv, c.Dh}, 5);
    const Tensor dout = gpu({B, c.T, c.Hq, c.Dh}, 6);
    // As B'MOJO-F's windows(): the fading keys W positions later under the same window.
    ops::AttentionOptions here;
    here.window = c.W;
    here.q_offset = c.halo;
    ops::AttentionOptions fading = here;
    fading.k_offset = c.W;
    const ops::AttentionSource a{q, k, v, here}, b{q_f, k_f, v_f, fading};
    auto f64 = [](const Tensor& t) { return t.defined() ? test::cpu_f64(t) : Tensor(); };
    const ops::AttentionSource ra{f64(q), f64(k), f64(v), here}, rb{f64(q_f), f64(k_f), f64(v_f), fading};

    Tensor lse, rlse;
    test::poison(Tensor::empty(q.shape(), DType::BF16, Device::cuda()));  // the op's output takes this memory
    const Tensor out = ops::merged_attention(a, b, &lse);
    const Tensor rout = ops::merged_attention(ra, rb, &rlse);
    test::expect_close(out, rout, 1e-2, 1e-2 * test::max_abs(rout) + 1e-6, "out " + what);
    const auto lv = lse.to_vector<double>(), rl = rlse.to_vector<double>();
    ASSERT_EQ(lse.shape(), rlse.shape());
    int64_t lse_mismatches = 0;
    for (size_t i = 0; i < lv.size(); ++i)
      if (!(std::abs(lv[i] - rl[i]) <= 1e-3) && ++lse_mismatches <= 3)
        ADD_FAILURE() << "lse[" << i << "] = " << lv[i] << ", expected " << rl[i];
    EXPECT_EQ(lse_mismatches, 0);

    ops::AttentionSourceGrads ga, gb, rga, rgb;
    test::poison(Tensor::empty(k.shape(), DType::BF16, Device::cuda()));
    ops::merged_attention_backward(dout, a, b, out, lse, &ga, &gb);
    ops::merged_attention_backward(test::cpu_f64(dout), ra, rb, rout, rlse, &rga, &rgb);
    EXPECT_EQ(gb.dq.defined(), c.own_queries) << "shared queries return one dq, in source a's gradients";
    std::vector<std::tuple<Tensor, Tensor, std::string>> grads = {{ga.dq, rga.dq, "dq"},
                                                                  {ga.dk, rga.dk, "dk"},
                                                                  {ga.dv, rga.dv, "dv"},
                                                                  {gb.dk, rgb.dk, "dk_f"},
                                                                  {gb.dv, rgb.dv, "dv_f"}};
    if (c.own_queries) grads.push_back({gb.dq, rgb.dq, "dq_f"});
    for (const auto& [g, r, name] : grads) {
      ASSERT_TRUE(g.defined() && r.defined()) << name;
      test::expect_close(g, r, 1e-2, 2e-2 * test::max_abs(r) + 1e-6, name + " " + what);
    }
  }
}

}  // namespace
}  // namespace primer
