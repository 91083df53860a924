#include "recipes/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "core/autograd/functions.h"
#include "core/autograd/variable.h"
#include "core/check.h"
#include "core/cuda_runtime.h"
#include "core/io/atomic_file.h"
#include "core/io/json.h"
#include "core/ops/elementwise.h"
#include "layers/decoder_lm.h"
#include "layers/hf_checkpoint.h"
#include "optim/adamw.h"
#include "optim/schedule.h"
#include "recipes/checkpoint.h"
#include "core/config/config.h"
#include "recipes/model_files.h"
#include "recipes/train_data.h"
#include "recipes/train_schema.h"

namespace primer::recipes {
namespace {

using Clock = std::chrono::steady_clock;

// Applies config_overrides_json ({"a.b": value}: dotted keys descend into objects) to a config.json document.
void apply_overrides(json::Value& doc, const json::Value& overrides) {
  for (const auto& [key, value] : overrides.as_object()) {
    json::Value* node = &doc;
    size_t start = 0;
    for (size_t dot; (dot = key.find('.', start)) != std::string::npos; start = dot + 1)
      node = &(*node)[key.substr(start, dot - start)];
    (*node)[key.substr(start)] = value;
  }
}

struct Metrics {
  std::ofstream file;
  void write(const json::Value& record) {
    file << json::dump(record) << "\n";
    file.flush();
  }
};

Tensor ids_of(const data::Batch& b, Device device) { return Tensor::from_vector(b.ids, {b.rows, b.seq}, DType::I32, device); }
Tensor targets_of(const data::Batch& b, Device device) {
  return Tensor::from_vector(b.targets, {b.rows, b.seq}, DType::I32, device);
}

// Mean held-out distillation loss of a fused model (the Stage 1 objective) over `batches` batches.
double evaluate_distillation(layers::DecoderLM& model, const layers::DistillOptions& options, const TrainData& source,
                             int64_t batches, Device device) {
  ag::NoGrad no_grad;
  data::Batch batch;
  const int64_t n = std::min(batches, source.heldout_batches());
  Tensor sum = Tensor::zeros({1}, DType::F32, device);
  for (int64_t i = 0; i < n; ++i) {
    source.heldout_batch(i, batch);
    ops::add_(sum, model.distill_loss(ids_of(batch, device), options)->value.to(DType::F32));
  }
  return sum.item() / double(n);
}

// "qwen3", or "hybrid qwen3 *-GKA-*-GKA" (fused tokens for a Stage 0/1 model), for the log.
std::string model_name(const ModelConfig& c) {
  if (c.layer_types.empty()) return c.model_type;
  return "hybrid " + c.model_type + " " + format_hybrid_pattern(HybridPattern{c.layer_types, c.fused});
}

// Stage 1's memory against a separate teacher and student (Priming §9.1): the fused model holds the weights the two
// share once. Counts every parameter's f32 master plus its compute copy (bf16 under mixed precision).
void report_fused_memory(const ModelConfig& c, ParameterRegistry& params, DType compute) {
  int64_t teacher_only = 0, student_only = 0, shared = 0;
  for (Parameter* p : params.all()) {
    bool teacher = false, student = false;
    for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
      if (c.mixer(i) == MixerKind::Attention) continue;
      const std::string layer = "model.layers." + std::to_string(i) + ".";
      teacher |= p->name.starts_with(layer + "self_attn.");
      student |= p->name.starts_with(layer + mixer_module(c.mixer(i)) + ".");
    }
    (teacher ? teacher_only : student ? student_only : shared) += shape_numel(p->shape);
  }
  const double bytes = compute == DType::BF16 ? 6.0 : 4.0;
  const double fused = double(shared + teacher_only + student_only), separate = fused + double(shared);
  fmt::print("stage 1 memory: the fused model holds {:.2f}M parameters ({:.2f} GB of weights); a separate teacher and "
             "student would hold {:.2f}M ({:.2f} GB): {:.2f} GB saved by sharing {:.2f}M weights\n",
             fused / 1e6, fused * bytes / 1e9, separate / 1e6, separate * bytes / 1e9, double(shared) * bytes / 1e9,
             double(shared) / 1e6);
}

}  // namespace

ModelConfig model_config_from(const config::Config& cfg) {
  json::Value doc;
  std::string source;
  if (cfg.has("model_config")) {
    source = cfg.where("model_config") + " (model_config)";
    doc = json::parse(cfg.get_map_json("model_config"), source);
  } else {
    source = cfg.get_string("model_name_or_path") + "/config.json";
    doc = json::parse_file(source);
  }
  if (cfg.has("config_overrides_json")) {
    apply_overrides(doc, json::parse(cfg.get_map_json("config_overrides_json"), "config_overrides_json"));
    source += " with config_overrides_json";
  }
  return from_hf_json(doc, source);
}

double heldout_loss(layers::DecoderLM& model, const TrainData& source, int64_t batches, Device device) {
  ag::NoGrad no_grad;
  data::Batch batch;
  const int64_t n = std::min(batches, source.heldout_batches());
  PRIMER_CHECK(n > 0, "the held-out part of the data is smaller than one batch (raise val_size or lower the batch)");
  Tensor sum = Tensor::zeros({1}, DType::F32, device);
  int64_t targets = 0;
  for (int64_t i = 0; i < n; ++i) {
    source.heldout_batch(i, batch);
    targets += std::count_if(batch.targets.begin(), batch.targets.end(), [](int32_t t) { return t >= 0; });
    ops::add_(sum, model.loss(ids_of(batch, device), targets_of(batch, device), 1.0)->value.to(DType::F32));
  }
  PRIMER_CHECK(targets > 0, "the held-out batches hold no target token (every loss mask is 0)");
  return sum.item() / double(targets);
}

Device pick_device(const std::string& name) {
  if (name == "cpu") return Device::cpu();
  if (name == "cuda") {
    PRIMER_CHECK(cuda::available(), "device: cuda requested but no CUDA device is usable");
    return Device::cuda(0);
  }
  PRIMER_CHECK(name == "auto", "device '{}': expected auto, cpu or cuda", name);
  return cuda::available() ? Device::cuda(0) : Device::cpu();
}

double peak_bf16_flops() {
#ifdef PRIMER_WITH_CUDA
  if (!cuda::available()) return 0;
  cudaDeviceProp p{};
  PRIMER_CUDA_CHECK(cudaGetDeviceProperties(&p, cuda::current_device()));
  const std::string name = p.name;
  if (name.find("H100") != std::string::npos || name.find("H200") != std::string::npos) return 989e12;
  if (name.find("A100") != std::string::npos) return 312e12;
#endif
  return 0;
}

int run_train(const std::string& recipe, const std::vector<std::string>& overrides) {
  const config::Config cfg = config::load_config(recipe, train_schema(), overrides);
  const std::string out_dir = cfg.get_string("output_dir");
  std::filesystem::create_directories(out_dir);
  io::write_file_atomic(out_dir + "/resolved_config.yaml", cfg.resolved_yaml());
  PRIMER_CHECK(cfg.get_int("sequence_parallel_size") == 1, "{}: sequence parallelism arrives with parallel/",
               cfg.where("sequence_parallel_size"));
  PRIMER_CHECK(!cfg.get_bool("neat_packing"),
               "{}: neat_packing needs attention and mixers that reset at document starts; the loader provides "
               "positions and segments, the model does not consume them yet",
               cfg.where("neat_packing"));
  if (cfg.has("tokenized_path") && cfg.has("dataset"))
    fmt::print("note: {} sets both dataset and tokenized_path; training reads the tokenized data\n", recipe);

  const Device device = pick_device(cfg.get_string("device"));
  if (device.is_cuda()) cuda::set_device(device.index);
  const ModelConfig model_config = model_config_from(cfg);
  const bool distill = cfg.get_string("stage") == "hkd";
  PRIMER_CHECK(!distill || model_config.fused,
               "{}: stage hkd (Priming Stage 1) trains a fused teacher-student checkpoint (written by `primer "
               "prime-init`); this model's pattern is '{}'",
               cfg.where("stage"), format_hybrid_pattern(model_config.layer_types));
  const layers::DistillOptions distill_options{cfg.get_bool("hybrid_distill_pre_lm_head"),
                                               cfg.get_string("hybrid_lw_distill_target") == "decoder"};
  const int64_t B = cfg.get_int("per_device_train_batch_size"), T = cfg.get_int("cutoff_len");
  const std::unique_ptr<TrainData> train_data = make_train_data(cfg, B, T);
  PRIMER_CHECK(model_config.vocab_size >= train_data->vocab_size(),
               "the model's vocab_size {} is smaller than the data's vocabulary {} ({})", model_config.vocab_size,
               train_data->vocab_size(), train_data->describe());
  const DType compute = device.is_cuda() && cfg.get_bool("bf16") ? DType::BF16 : DType::F32;
  const uint64_t seed = uint64_t(cfg.get_int("seed"));

  ParameterRegistry params;
  layers::DecoderLM model(model_config, params, {!cfg.get_bool("disable_gradient_checkpointing")});
  params.materialize(device, compute, seed);
  if (cfg.has("model_name_or_path")) layers::load_hf_weights(cfg.get_string("model_name_or_path"), params);
  params.set_trainable(cfg.has("hybrid_learnable_params") ? cfg.get_list("hybrid_learnable_params")
                                                         : std::vector<std::string>{});

  optim::AdamWConfig adam;
  adam.beta1 = cfg.get_float("adam_beta1");
  adam.beta2 = cfg.get_float("adam_beta2");
  adam.eps = cfg.get_float("adam_epsilon");
  adam.weight_decay = cfg.get_float("weight_decay");
  adam.max_grad_norm = cfg.get_float("max_grad_norm");
  adam.check_finite = true;
  optim::AdamW optimizer(params, adam);

  const int64_t max_steps = cfg.get_int("max_steps");
  optim::Schedule schedule;
  schedule.kind = optim::Schedule::parse(cfg.get_string("lr_scheduler_type"));
  schedule.peak_lr = cfg.get_float("learning_rate");
  schedule.total_steps = max_steps;
  schedule.warmup_steps = cfg.has("warmup_steps") ? cfg.get_int("warmup_steps")
                          : cfg.has("warmup_ratio") ? int64_t(std::ceil(cfg.get_float("warmup_ratio") * double(max_steps)))
                                                    : 0;

  const int64_t accumulation = cfg.get_int("gradient_accumulation_steps");
  const double tokens_per_step = double(B * T * accumulation);

  CheckpointManager checkpoints(out_dir, cfg.has("save_total_limit") ? int(cfg.get_int("save_total_limit")) : 0);
  TrainingState state;
  state.seed = seed;
  state.resolved_config = cfg.resolved_yaml();
  if (const auto from = checkpoints.resolve(cfg.has("resume_from_checkpoint") ? cfg.get_string("resume_from_checkpoint") : "")) {
    state = checkpoints.load(*from, params, optimizer);
    PRIMER_CHECK(state.seed == seed, "checkpoint '{}' was trained with seed {}, the recipe says {}", *from, state.seed, seed);
    train_data->restore(state.data_cursor, *from + " (data cursor)");
    fmt::print("resumed from {} at step {}\n", *from, state.step);
  }

  Metrics metrics;
  const std::string metrics_path = cfg.has("metrics_file") ? cfg.get_string("metrics_file") : out_dir + "/metrics.jsonl";
  metrics.file.open(metrics_path, std::ios::app);
  PRIMER_CHECK(metrics.file.good(), "cannot write metrics file '{}'", metrics_path);

  const double flops_per_token = model.flops_per_token(T);
  const double peak = device.is_cuda() ? peak_bf16_flops() : 0;
  fmt::print("primer train {}: {} with {} layers, hidden {}, {:.2f}M parameters ({:.2f}M trainable), {} on {}\n", recipe,
             model_name(model_config), model_config.num_hidden_layers, model_config.hidden_size,
             double(params.count()) / 1e6, double(params.count(true)) / 1e6, dtype_name(compute), device.str());
  if (distill) report_fused_memory(model_config, params, compute);
  fmt::print("data: {}; {} x {} tokens x {} micro-steps per step; {} steps\n", train_data->describe(), B, T, accumulation,
             max_steps);

  const int64_t eval_steps = cfg.get_int("eval_steps"), eval_batches = cfg.get_int("eval_batches");
  const int64_t log_steps = cfg.get_int("logging_steps"), save_steps = cfg.get_int("save_steps");
  auto log_eval = [&](int64_t step) {
    const double loss = heldout_loss(model, *train_data, eval_batches, device);
    json::Value r;
    r["step"] = step;
    r["eval_loss"] = loss;
    r["eval_perplexity"] = std::exp(loss);
    std::string distill_text;
    if (distill) {
      const double mse = evaluate_distillation(model, distill_options, *train_data, eval_batches, device);
      r["eval_distill_mse"] = mse;
      distill_text = fmt::format(" | distillation MSE {:.5f}", mse);
    }
    fmt::print("eval  step {:6d} | held-out loss {:.4f} | perplexity {:.3f}{}\n", step, loss, std::exp(loss),
               distill_text);
    metrics.write(r);
    return loss;
  };
  const double initial_eval = log_eval(state.step);

  reset_peak_memory(device);
  Tensor loss_sum = Tensor::zeros({1}, DType::F32, device);
  auto window_start = Clock::now();
  int64_t window_steps = 0, window_targets = 0;  // hkd: window_targets counts micro-steps (the MSE is a mean)
  while (state.step < max_steps) {
    params.zero_grads();
    // The gradient is that of the mean loss over the step's target tokens (masked positions do not count).
    std::vector<data::Batch> micro_batches(static_cast<size_t>(accumulation));
    int64_t step_targets = 0;
    for (data::Batch& b : micro_batches) {
      train_data->next(b);
      step_targets += std::count_if(b.targets.begin(), b.targets.end(), [](int32_t t) { return t >= 0; });
    }
    for (const data::Batch& b : micro_batches) {
      if (distill) {
        // The mean of the micro-steps' MSEs, as the reference divides by gradient_accumulation_steps.
        const ag::Var mse = model.distill_loss(ids_of(b, device), distill_options);
        ag::backward(ag::scale(mse, 1.0 / double(accumulation)));
        ops::add_(loss_sum, mse->value.to(DType::F32));
      } else {
        ag::Var loss =
            model.loss(ids_of(b, device), targets_of(b, device), 1.0 / double(std::max<int64_t>(step_targets, 1)));
        ag::backward(loss);
        ops::add_(loss_sum, loss->value.to(DType::F32));
      }
    }
    window_targets += distill ? accumulation : step_targets;
    const double lr = schedule.lr(state.step);
    optimizer.step(lr);
    ++state.step;
    ++window_steps;
    state.data_cursor = train_data->cursor();

    if (state.step % log_steps == 0 || state.step == max_steps) {
      const double loss = loss_sum.item() / double(std::max<int64_t>(window_targets, 1));  // host sync at log points only
      const double secs = std::chrono::duration<double>(Clock::now() - window_start).count();
      const double tok_s = tokens_per_step * double(window_steps) / secs;
      const double mfu = peak > 0 ? tok_s * flops_per_token / peak : 0;
      const double peak_gb = double(memory_stats(device).peak) / 1e9;
      fmt::print("train step {:6d} | loss {:.4f} | lr {:.3e} | grad norm {:.3f} | {:.0f} tok/s | MFU {} | peak mem {:.2f} GB\n",
                 state.step, loss, lr, optimizer.grad_norm(), tok_s, peak > 0 ? fmt::format("{:.1f}%", 100 * mfu) : "n/a",
                 peak_gb);
      json::Value r;
      r["step"] = state.step;
      r["loss"] = loss;
      r["lr"] = lr;
      r["grad_norm"] = optimizer.grad_norm();
      r["tokens_per_s"] = tok_s;
      r["mfu"] = mfu;
      r["peak_memory_gb"] = peak_gb;
      metrics.write(r);
      loss_sum.zero_();
      window_steps = 0;
      window_targets = 0;
      window_start = Clock::now();
    }
    const auto pause = Clock::now();  // evaluation and saving stay out of the throughput window
    if (eval_steps > 0 && state.step % eval_steps == 0 && state.step != max_steps) log_eval(state.step);
    if ((save_steps > 0 && state.step % save_steps == 0) || state.step == max_steps)
      fmt::print("saved {}\n", checkpoints.save(state, params, optimizer));
    window_start += Clock::now() - pause;
  }
  const double final_eval = log_eval(state.step);
  fmt::print("held-out loss {:.4f} → {:.4f}; run directory {}\n", initial_eval, final_eval, out_dir);
  if (cfg.get_bool("save_hf_model")) {
    layers::export_hf(out_dir, model_config, params, model_config.torch_dtype);
    if (cfg.has("model_name_or_path")) copy_model_files(cfg.get_string("model_name_or_path"), out_dir, false);
    fmt::print("wrote the Hugging Face model ({}, {}) to {}\n", model_name(model_config),
               dtype_name(model_config.torch_dtype), out_dir);
  }
  return 0;
}

}  // namespace primer::recipes
