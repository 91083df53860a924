// Generation speed: a random-weight Qwen3-shaped model (optionally a hybrid) prefills a batch of prompts of
// `--context` tokens, each prompt alone, then decodes the rows together greedily one token per step from carried
// state (layers::DecodeState), as `primer generate` does, never stopping early. Prints prefill time, the median decode
// time per token, tokens/s (batch / decode time) and peak memory as one Markdown table row; a configuration whose
// key/value caches and weights exceed --memory-gib (default 79: an 80 GB H100) prints the estimate instead of running.
// tools/bench/hf_generate_peer.py is the peer (Hugging Face transformers' generate on weights exported with
// --weights-out). Usage: bench_generate [--shape 0.6b|1.7b|4b|8b|tiny] [--layers L] [--pattern '*-GKA'] [--batch B]
// [--context T]
//          [--new-tokens N] [--device cuda|cpu] [--memory-gib G] [--weights-out DIR]
// The pattern repeats to the layer count ('*-GKA' is a 50% GKA hybrid). CUDA computes in bf16 (as `primer generate`),
// the CPU in f32; `--shape tiny` (4 layers, hidden 128) is for smoke runs.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>

#include "core/cuda_runtime.h"
#include "core/ops/gemm.h"
#include "core/rng.h"
#include "core/storage.h"
#include "layers/decoder_lm.h"
#include "layers/hf_checkpoint.h"
#include "layers/hybrid_config.h"
#include "recipes/token_sampler.h"
#include "tools/bench/common/bench_args.h"
#include "tools/bench/common/bench_util.h"

using namespace primer;

namespace {

struct Options {
  std::string shape = "0.6b", pattern, device = "cuda", weights_out;
  int64_t layers = 0, batch = 1, context = 1024, new_tokens = 64;
  double memory_gib = 79;  // the device's memory: an 80 GB H100's usable part
};

Options parse(int argc, char** argv) {
  Options o;
  CLI::App app{"bench_generate: decoding tokens/s of a Qwen3-shaped model or hybrid after a prompt"};
  app.add_option("--shape", o.shape, "a Qwen3 shape: 0.6b, 1.7b, 4b, 8b")->capture_default_str();
  app.add_option("--layers", o.layers, "layers (0: the shape's)")->capture_default_str();
  app.add_option("--pattern", o.pattern, "a hybrid_override_pattern (empty: the Transformer)");
  app.add_option("--batch", o.batch, "prompts decoded together")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--context", o.context, "prompt tokens")->capture_default_str()->check(CLI::PositiveNumber);
  // Two warm-up steps and at least one timed one.
  app.add_option("--new-tokens", o.new_tokens, "tokens generated")
      ->capture_default_str()
      ->check(CLI::Range(4, 1 << 20));
  app.add_option("--device", o.device, "cpu or cuda")->capture_default_str();
  app.add_option("--memory-gib", o.memory_gib, "the device memory the run may plan for")->capture_default_str();
  app.add_option("--weights-out", o.weights_out, "also write the weights (for the transformers peer) here");
  bench::parse_or_exit(app, argc, argv);
  return o;
}

ModelConfig model_config(const Options& o) {
  ModelConfig c;
  if (o.shape == "tiny") {
    c.model_type = "qwen3";
    c.vocab_size = 512;
    c.hidden_size = 128;
    c.intermediate_size = 256;
    c.num_hidden_layers = o.layers > 0 ? o.layers : 4;
    c.num_attention_heads = 2;
    c.num_key_value_heads = 1;
    c.head_dim = 64;  // the smallest the CUDA kernels take
    c.qk_norm = true;
    c.tie_word_embeddings = true;
    c.max_position_embeddings = 40960;
  } else {
    c = bench::qwen3_shape(o.shape, o.layers);
  }
  bench::apply_pattern(c, o.pattern);
  c.validate("bench_generate");
  return c;
}

// Bytes the full-attention layers' key/value caches hold after the prefill: layers::KvCache's first append (the
// prompt) reserves an eighth more (at least 64 tokens), so the decoded tokens fit without a copy. Sliding windows and
// B'MOJO-F's window are ignored (bounded by their windows).
double kv_cache_bytes(const ModelConfig& c, int64_t batch, int64_t context, double dtype_bytes) {
  int64_t attention = 0;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    attention += c.layer_types.empty() || c.layer_types[size_t(l)] == MixerKind::Attention;
  const double reserved = double(context + std::max<int64_t>(64, context / 8));
  return double(attention) * double(batch) * 2.0 * reserved * double(c.num_key_value_heads) * double(c.head_dim) *
         dtype_bytes;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  const Device device = o.device == "cpu" ? Device::cpu() : Device::cuda();
  if (device.is_cuda() && !cuda::available()) {
    std::puts("bench_generate: no CUDA device");
    return 0;
  }
  const ModelConfig config = model_config(o);
  const std::string model = "primer Qwen3-" + o.shape + (o.pattern.empty() ? "" : " '" + o.pattern + "'");
  const std::vector<std::string> header{"model",           "batch",    "context",    "prefill ms",
                                        "decode ms/token", "tokens/s", "peak memory"};
  auto row = [&](std::vector<std::string> measured) {
    std::vector<std::string> cells{model, std::to_string(o.batch), std::to_string(o.context)};
    cells.insert(cells.end(), measured.begin(), measured.end());
    bench::print_table(header, {{cells}});
  };
  std::printf("# bench_generate — %s, %s, %s, %ld new tokens, %s\n", model.c_str(), device.is_cuda() ? "bf16" : "f32",
              device.is_cuda() ? bench::device_name().c_str() : "CPU", long(o.new_tokens), bench::today().c_str());

  ParameterRegistry params;
  layers::DecoderLM lm(config, params);
  const DType compute = device.is_cuda() ? DType::BF16 : DType::F32;
  // As `primer generate` loads a Hugging Face model: the compute copies, one parameter's f32 value in flight while
  // loading (ParameterRegistry::materialize_compute_copies), then the KV caches beside the compute copies.
  int64_t largest = 0;
  for (Parameter* p : params.all()) largest = std::max(largest, shape_numel(p->shape));
  const double loading_bytes =
      double(params.count()) * double(dtype_size(compute)) + double(largest) * (4.0 + double(dtype_size(compute)));
  const double weight_bytes = double(params.count()) * double(dtype_size(compute));
  const double kv_bytes = kv_cache_bytes(config, o.batch, o.context, double(dtype_size(compute)));
  const double gib = double(int64_t(1) << 30);
  if (std::max(loading_bytes, weight_bytes + kv_bytes) > o.memory_gib * gib) {
    row({"-", "-", "-",
         "does not fit: " + bench::fixed(std::max(loading_bytes, weight_bytes + kv_bytes) / gib, 0) + " GiB > " +
             bench::fixed(o.memory_gib, 0) + " GiB (KV caches " + bench::fixed(kv_bytes / gib, 0) + " GiB, weights " +
             bench::fixed(weight_bytes / gib, 1) + ")"});
    return 0;
  }
  params.materialize_compute_copies(device, compute, initial_values(0));
  if (!o.weights_out.empty()) layers::export_hf(o.weights_out, config, params, DType::BF16);

  std::vector<int32_t> host(size_t(o.batch * o.context));
  for (size_t i = 0; i < host.size(); ++i) host[i] = int32_t(uniform01(7, i) * double(config.vocab_size));
  const Tensor prompt = Tensor::from_vector(host, {o.batch, o.context}, DType::I32, device);
  recipes::TokenSampler greedy({});
  layers::DecodeState state;
  Tensor logits;
  // Each prompt alone (its activations are then one row's, not the batch's), the rows' states stacked after.
  auto prefill = [&] {
    state = {};  // the previous repetition's caches go before this one's are written
    std::vector<layers::DecodeState> rows(size_t(o.batch));
    logits = Tensor::empty({o.batch, config.vocab_size}, DType::F32, device);
    for (int64_t r = 0; r < o.batch; ++r)
      logits.slice(0, r, r + 1).copy_from(lm.decode(prompt.slice(0, r, r + 1), rows[size_t(r)]));
    state = layers::stack_rows(rows);
    if (device.is_cuda()) cuda::synchronize();
  };
  // One token per row from the last logits, as recipes::generate (the host reads them), then the next step.
  auto step = [&] {
    logits = lm.decode(Tensor::from_vector(greedy.next(logits), {o.batch, 1}, DType::I32, device), state);
  };
  try {
    ops::set_gemm_autotune(true);  // the warm-up picks each GEMM's fastest algorithm
    prefill();
    step();
    ops::set_gemm_autotune(false);
    reset_peak_memory(device);
    const double prefill_ms = bench::median_ms_on(device, prefill, 0, 3);
    // The first new token comes from the prefill's logits; each of the other new_tokens - 1 is a decode step.
    const double decode_ms = bench::median_ms_on(device, step, 2, int(o.new_tokens) - 3);
    row({bench::fixed(prefill_ms, 1), bench::fixed(decode_ms, 2), bench::fixed(double(o.batch) / (decode_ms * 1e-3), 0),
         bench::fixed(double(memory_stats(device).peak) / gib, 1) + " GiB"});
  } catch (const std::exception& e) {
    row({"-", "-", "-", std::string("failed: ") + e.what()});
    return 1;
  }
  return 0;
}
