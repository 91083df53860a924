#include "recipes/trainer.h"

#include <filesystem>
#include <optional>

#include "core/check.h"

#include "core/cuda_runtime.h"
#include "core/io/atomic_file.h"
#include "layers/hf_checkpoint.h"
#include "parallel/comm/launch.h"
#include "parallel/comm/world_communicator.h"
#include "recipes/model_files.h"
#include "recipes/run_directory.h"
#include "recipes/train_schema.h"

namespace primer::recipes {
namespace {

// Stage 1's memory against a separate teacher and student (Priming §9.1): the fused model holds the weights the two
// share once. Counts every parameter's f32 master plus its compute copy (bf16 under mixed precision), as both sides
// would hold them before frozen masters are released (the ranks line says what was).
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
  fmt::print(
      "stage 1 memory: the fused model holds {:.2f}M parameters ({:.2f} GB of masters and compute copies); a separate "
      "teacher and student would hold {:.2f}M ({:.2f} GB): {:.2f} GB saved by sharing {:.2f}M weights\n",
      fused / 1e6, fused * bytes / 1e9, separate / 1e6, separate * bytes / 1e9, double(shared) * bytes / 1e9,
      double(shared) / 1e6);
}

void print_header(const TrainSetup& s) {
  const ModelConfig& c = s.model_config;
  const int ranks = s.ranks.tensors->size();
  fmt::print("primer train {}: {} with {} layers, hidden {}, {:.2f}M parameters ({:.2f}M trainable), {} on {}\n",
             s.recipe, model_name(c), c.num_hidden_layers, c.hidden_size, double(s.params->count()) / 1e6,
             double(s.params->count(true)) / 1e6, dtype_name(s.compute), s.device.str());
  if (c.fused) report_fused_memory(c, *s.params, s.compute);
  const parallel::Fsdp::Footprint f = s.fsdp->footprint();
  fmt::print(
      "ranks: {} data-parallel ({}), ZeRO stage {}: {:.3f} GB of master weights, {:.3f} GB of compute shards and "
      "{:.3f} GB of kept gradients per rank{}\n",
      ranks, s.ranks.tensors->backend_name(), int(s.zero_stage), double(f.master_bytes) / 1e9,
      double(f.compute_bytes) / 1e9, double(f.grad_bytes) / 1e9,
      f.released_master_bytes == 0
          ? ""
          : fmt::format(" (frozen weights that {} holds exactly: {:.3f} GB of f32 masters not kept)",
                        dtype_name(s.compute), double(f.released_master_bytes) / 1e9));
  fmt::print("data: {}; {} x {} tokens x {} micro-steps per step and rank; {} steps\n", s.data->describe(), s.batch,
             s.seq, s.accumulation, s.max_steps);
  const layers::DecoderOptions& o = s.model->options();
  const std::string budget =
      o.selective_recompute_budget_bytes < 0
          ? ""
          : fmt::format(", at most {:.3g} GB of them at once", double(o.selective_recompute_budget_bytes) / 1e9);
  fmt::print("activations: {}\n",
             !o.recompute ? std::string("all kept (disable_gradient_checkpointing)")
             : o.selective_recompute
                 ? "each block recomputed in backward, keeping attention's, the SSM cores' and the output projections' "
                   "results (selective_gradient_checkpointing" +
                       budget + ")"
                 : std::string("each block recomputed whole in backward"));
}

// Every run ends with a Hugging Face export of its weights when the recipe asks (save_hf_model): the ranks gather
// the full weights, rank 0 writes them.
void export_final_model(TrainSetup& s) {
  s.fsdp->gather_full_masters();
  if (s.ranks.host->rank() != 0) return;
  layers::export_hf(s.out_dir, s.model_config, *s.params, s.model_config.torch_dtype);
  if (s.cfg.has("model_name_or_path")) copy_model_files(s.cfg.get_string("model_name_or_path"), s.out_dir, false);
  fmt::print("wrote the Hugging Face model ({}, {}) to {}\n", model_name(s.model_config),
             dtype_name(s.model_config.torch_dtype), s.out_dir);
}

}  // namespace

TrainResult train(const config::Config& cfg, const std::string& recipe, RunRanks ranks) {
  const std::string out_dir = cfg.get_string("output_dir");
  std::optional<RunDirectoryLock> lock;  // rank 0 holds it for the whole run (the ranks share output_dir)
  if (ranks.host->rank() == 0) {
    std::error_code ec;
    std::filesystem::create_directories(out_dir, ec);
    PRIMER_CHECK(!ec && std::filesystem::is_directory(out_dir),
                 "output_dir '{}' ({}): cannot create the run directory{}", out_dir, cfg.where("output_dir"),
                 ec ? ": " + ec.message() : " (a file of that name is in the way)");
    lock.emplace(out_dir);
  }
  TrainSetup setup = setup_training(cfg, recipe, ranks);
  // Only once the recipe, its data and a resume's continuity are accepted: a refused run leaves the old one whole.
  if (ranks.host->rank() == 0) io::write_file_atomic(out_dir + "/resolved_config.yaml", cfg.resolved_yaml());
  print_header(setup);
  TrainLoop loop(setup);
  const double loss = loop.run();
  if (loop.interrupted_by()) return {loss, loop.interrupted_by()};
  if (cfg.get_bool("save_hf_model")) export_final_model(setup);
  ranks.host->barrier("end of training");
  return {loss, 0};
}

int run_train(const std::string& recipe, const std::vector<std::string>& overrides) {
  const config::Config cfg = config::load_config(recipe, train_schema(), overrides);
  const parallel::CommOptions options{cfg.get_float("collective_timeout")};
  // One GPU per node-local rank; the tensor communicator is NCCL where every rank has its own GPU.
  if (cfg.get_string("device") != "cpu") parallel::select_local_gpu();
  const Device device = pick_device(cfg.get_string("device"));
  const auto host = parallel::make_world_communicator(Device::cpu(), options);
  const auto tensors = device.is_cpu() ? nullptr : parallel::make_world_communicator(device, options);
  const TrainResult result = train(cfg, recipe, {tensors ? tensors.get() : host.get(), host.get()});
  return result.interrupted_by ? 128 + result.interrupted_by : 0;
}

}  // namespace primer::recipes
