#include "recipes/default_run.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "core/autograd/variable.h"
#include "core/check.h"
#include "core/cuda_runtime.h"
#include "data/byte_corpus.h"
#include "layers/short_conv_lm.h"
#include "optim/adamw.h"
#include "optim/schedule.h"
#include "recipes/trainer.h"

namespace primer::recipes {
namespace {

// Real English text that every Debian/Ubuntu machine ships (base-files: ~200 KB of license texts), else the README.
std::string default_corpus() {
  for (const char* p : {"/usr/share/common-licenses", "README.md"})
    if (std::filesystem::exists(p)) return p;
  PRIMER_FAIL("no built-in corpus found: pass --corpus FILE");
}

double heldout_loss(layers::ShortConvLM& model, const data::ByteCorpus& corpus, int64_t batch, int64_t seq,
                    Device device) {
  ag::NoGrad no_grad;
  std::vector<int32_t> ids, targets;
  const int64_t n = std::min<int64_t>(corpus.heldout_batches(batch, seq), 16);
  PRIMER_CHECK(n > 0, "held-out part too small for one [{}, {}] batch", batch, seq);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    corpus.heldout_batch(i, batch, seq, ids, targets);
    const Tensor x = Tensor::from_vector(ids, {batch, seq}, DType::I32, device);
    const Tensor y = Tensor::from_vector(targets, {batch, seq}, DType::I32, device);
    sum += model.loss(x, y, 1.0)->value.item();
  }
  return sum / double(n * batch * seq);
}

}  // namespace

int run_default(const DefaultRunOptions& o) {
  const Device device = pick_device(o.device);
  const std::string corpus_path = o.corpus.empty() ? default_corpus() : o.corpus;
  const data::ByteCorpus corpus(corpus_path, 0.1);
  std::filesystem::create_directories(o.out_dir);
  std::ofstream metrics(o.out_dir + "/metrics.jsonl");
  PRIMER_CHECK(metrics.good(), "cannot write '{}/metrics.jsonl'", o.out_dir);

  layers::ShortConvLMConfig cfg;
  cfg.hidden = o.hidden;
  cfg.layers = o.layers;
  cfg.ffn = 3 * o.hidden;
  cfg.recompute = o.recompute;
  ParameterRegistry params;
  layers::ShortConvLM model(cfg, params);
  const DType compute = device.is_cuda() ? DType::BF16 : DType::F32;
  params.materialize(device, compute, o.seed);
  optim::AdamW adamw(params, {});
  optim::Schedule schedule{optim::Schedule::Kind::Cosine, o.lr, o.lr * 0.1, o.steps / 10, o.steps};

  fmt::print("primer default run: ShortConvLM {} layers, hidden {}, {:.2f}M parameters, {} on {} ({})\n", cfg.layers,
             cfg.hidden, double(params.count()) / 1e6, dtype_name(compute), device.str(), corpus_path);
  fmt::print("corpus: {} training bytes, {} held-out bytes; batch {}x{}; {} steps\n", corpus.train_bytes(),
             corpus.heldout_bytes(), o.batch, o.seq, o.steps);
  const double initial = heldout_loss(model, corpus, o.batch, o.seq, device);
  fmt::print("held-out loss before training: {:.4f} nats/byte\n", initial);

  std::vector<int32_t> ids, targets;
  const double tokens = double(o.batch * o.seq);
  auto window_start = std::chrono::steady_clock::now();
  for (int64_t step = 0; step < o.steps; ++step) {
    corpus.train_rows(o.seed, step * o.batch, o.batch, o.seq, ids, targets);
    const Tensor x = Tensor::from_vector(ids, {o.batch, o.seq}, DType::I32, device);
    const Tensor y = Tensor::from_vector(targets, {o.batch, o.seq}, DType::I32, device);
    params.zero_grads();
    ag::Var loss = model.loss(x, y, 1.0 / tokens);
    ag::backward(loss);
    const double lr = schedule.lr(step);
    adamw.step(lr);
    if ((step + 1) % o.log_every == 0 || step + 1 == o.steps) {
      const double loss_value = loss->value.item() / tokens;  // host sync only at log points
      PRIMER_CHECK(std::isfinite(loss_value), "loss became {} at step {}", loss_value, step + 1);
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - window_start).count();
      const int64_t steps_in_window = (step + 1) % o.log_every == 0 ? o.log_every : (step + 1) % o.log_every;
      const double tok_s = tokens * double(steps_in_window) / secs;
      const double peak_gb = double(memory_stats(device).peak) / 1e9;
      fmt::print("step {:5d} | loss {:.4f} | lr {:.2e} | grad norm {:.3f} | {:.0f} tok/s | peak mem {:.3f} GB\n",
                 step + 1, loss_value, lr, adamw.grad_norm(), tok_s, peak_gb);
      metrics << fmt::format(
          "{{\"step\": {}, \"loss\": {:.6f}, \"lr\": {:.6e}, \"grad_norm\": {:.6f}, \"tokens_per_s\": {:.1f}, "
          "\"model_tflops\": {:.3f}, \"peak_mem_gb\": {:.4f}}}\n",
          step + 1, loss_value, lr, adamw.grad_norm(), tok_s, tok_s * model.flops_per_token() / 1e12, peak_gb);
      metrics.flush();
      window_start = std::chrono::steady_clock::now();
    }
  }
  const double final_loss = heldout_loss(model, corpus, o.batch, o.seq, device);
  fmt::print("held-out loss after training: {:.4f} nats/byte (was {:.4f}); perplexity {:.2f} per byte\n", final_loss,
             initial, std::exp(final_loss));
  fmt::print("metrics written to {}/metrics.jsonl\n", o.out_dir);
  return final_loss < initial ? 0 : 1;
}

}  // namespace primer::recipes
