// Stage 1 of Priming on one GPU: only the new mixers train, distilled against the teacher's final hidden states (MSE,
// the paper's end-to-end objective), with bf16 compute, fp32 masters, AdamW and block recomputation. The weights are
// bf16 values, as a Hugging Face checkpoint's are, so frozen ones need no f32 master (primer train releases them:
// ParameterRegistry::release_masters, parallel::Fsdp::release_frozen_masters). Three ways:
//   fused     primer's Stage 1 model: one registry, the shared weights (embeddings, MLPs, norms, attention layers)
//             stored once, the teacher stream run through them without recording (layers/decoder_lm.h); with the
//             frozen weights' f32 masters released, and kept (as before 2026-11-28);
//   separate  a teacher Transformer (bf16 weights only) run without recording, then a student hybrid with its own
//             copy of every shared weight (frozen masters released), as a teacher and a student side by side would.
// Prints step time, tokens/s and peak memory for each.
// Usage: bench_stage1 [--shape 0.6b|1.7b|4b|8b] [--pattern '*-GDN'] [--train gdn] [--batch B] [--seq T] [--steps S]
// --train names the trainable parameters as hybrid_learnable_params does (substrings: gdn, mamba, gka, ...).
#include <cstdio>

#include "core/autograd/functions.h"
#include "core/cuda_runtime.h"
#include "core/ops/gemm.h"
#include "core/rng.h"
#include "layers/decoder_lm.h"
#include "optim/adamw.h"
#include "tools/bench/common/bench_args.h"
#include "tools/bench/common/bench_util.h"

using namespace primer;

namespace {

struct Options {
  std::string shape = "0.6b", pattern = "*-GDN", train = "gdn";
  int64_t batch = 4, seq = 4096, steps = 6;
};

Options parse(int argc, char** argv) {
  Options o;
  CLI::App app{"bench_stage1: Stage 1 distillation steps, fused teacher-student model against separate models"};
  app.add_option("--shape", o.shape, "a Qwen3 shape: 0.6b, 1.7b, 4b, 8b")->capture_default_str();
  app.add_option("--pattern", o.pattern, "the student's hybrid_override_pattern")->capture_default_str();
  app.add_option("--train", o.train, "substring of the trainable parameters' names")->capture_default_str();
  app.add_option("--batch", o.batch, "sequences per step")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--seq", o.seq, "tokens per sequence")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--steps", o.steps, "steps (the first two untimed)")
      ->capture_default_str()
      ->check(CLI::Range(3, 1000));
  bench::parse_or_exit(app, argc, argv);
  return o;
}

Tensor random_tokens(const ModelConfig& c, int64_t B, int64_t T) {
  std::vector<int32_t> host(size_t(B * T));
  for (size_t i = 0; i < host.size(); ++i) host[i] = int32_t(uniform01(7, i) * double(c.vocab_size));
  return Tensor::from_vector(host, {B, T}, DType::I32, Device::cuda());
}

// Times `step` (the first runs pick the GEMM algorithms), then reads the peak memory of the timed steps.
bench::Row measure(const std::string& name, const Options& o, int64_t trainable, const std::function<void()>& step) {
  ops::set_gemm_autotune(true);
  step();
  ops::set_gemm_autotune(false);
  reset_peak_memory(Device::cuda());
  const double ms = bench::median_ms(step, 1, int(o.steps) - 2);
  const double tok_s = double(o.batch * o.seq) / (ms * 1e-3);
  return {{name, fmt::format("{}x{}", o.batch, o.seq), fmt::format("{:.2f}M", double(trainable) / 1e6),
           fmt::format("{:.1f}", ms), fmt::format("{:.1f}K", tok_s / 1e3),
           fmt::format("{:.2f} GB", double(memory_stats(Device::cuda()).peak) / 1e9)}};
}

// The registry on the GPU with bf16 values in its f32 masters, as loaded from a bf16 checkpoint.
void materialize_bf16_weights(ParameterRegistry& params) {
  params.materialize(Device::cuda(), DType::BF16, 0);
  for (Parameter* p : params.all())
    if (p->var->value.storage() != p->master.storage()) p->master.copy_from(p->var->value);
}

// A model on the GPU whose parameters named by `train` learn (AdamW), the others frozen.
struct Trained {
  ParameterRegistry params;
  layers::DecoderLM model;
  optim::AdamW adamw;

  Trained(const ModelConfig& c, const std::string& train, bool release_frozen)
      : model(c, params, {true}), adamw(ready(params, train), {}) {
    if (release_frozen) params.release_masters(MasterRelease::FrozenExact);
  }
  static ParameterRegistry& ready(ParameterRegistry& params, const std::string& train) {
    materialize_bf16_weights(params);
    params.set_trainable({train});
    return params;
  }
  void step(const std::function<ag::Var()>& loss) {
    params.zero_grads();
    ag::backward(loss());
    adamw.step(1e-4);
  }
};

bench::Row fused(const Options& o, bool release_frozen) {
  ModelConfig c = bench::qwen3_shape(o.shape);
  bench::apply_pattern(c, o.pattern);
  c.fused = true;
  Trained fused(c, o.train, release_frozen);
  const Tensor tokens = random_tokens(c, o.batch, o.seq);
  return measure(release_frozen ? "fused teacher-student" : "fused, frozen f32 masters kept", o,
                 fused.params.count(true),
                 [&] { fused.step([&] { return fused.model.distill_loss(tokens, layers::DistillOptions{}); }); });
}

bench::Row separate(const Options& o) {
  const ModelConfig teacher_config = bench::qwen3_shape(o.shape);
  ParameterRegistry teacher_params;
  layers::DecoderLM teacher(teacher_config, teacher_params, {true});
  materialize_bf16_weights(teacher_params);
  teacher_params.release_masters(MasterRelease::All);  // frozen: its bf16 weights are all it needs
  ModelConfig student_config = teacher_config;
  bench::apply_pattern(student_config, o.pattern);
  Trained student(student_config, o.train, true);
  const Tensor tokens = random_tokens(teacher_config, o.batch, o.seq);
  return measure("separate teacher and student", o, student.params.count(true), [&] {
    student.step([&] {
      Tensor target;
      {
        ag::NoGrad no_grad;
        target = teacher.hidden_states(tokens)->value;
      }
      return ag::mse_loss(student.model.hidden_states(tokens), target);
    });
  });
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  if (!cuda::available()) {
    std::puts("bench_stage1: no CUDA device");
    return 0;
  }
  std::printf(
      "# bench_stage1 — Qwen3-%s shape, student '%s' training '%s', bf16 compute, fp32 master + AdamW, "
      "recompute — %s, %s\n",
      o.shape.c_str(), o.pattern.c_str(), o.train.c_str(), bench::device_name().c_str(), bench::today().c_str());
  std::vector<bench::Row> rows;
  rows.push_back(fused(o, false));
  rows.push_back(fused(o, true));
  rows.push_back(separate(o));
  bench::print_table({"Stage 1 as", "B x T", "trainable", "step ms", "tokens/s", "peak memory"}, rows);
  return 0;
}
