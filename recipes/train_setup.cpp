#include "recipes/train_setup.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "core/check.h"
#include "core/cuda_runtime.h"
#include "core/io/json.h"
#include "layers/hf_checkpoint.h"
#include "recipes/model_files.h"
#include "recipes/resume_check.h"
#include "recipes/run_directory.h"

namespace primer::recipes {
namespace {

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

// An inline model_config is written by hand: a key primer does not know is a typo (rope_scalling) that would
// otherwise train another model silently, not a transformers extra as in a released config.json.
void check_model_config_keys(const json::Value& doc, const std::string& where) {
  const std::vector<std::string>& known = hf_config_keys();
  for (const auto& [key, value] : doc.as_object()) {
    if (std::find(known.begin(), known.end(), key) != known.end()) continue;
    const std::string suggestion = config::closest_key(key, known);
    PRIMER_FAIL("{}: unknown key '{}' in model_config{}", where, key,
                suggestion.empty() ? " (it takes the keys of a Hugging Face config.json that primer reads)"
                                   : fmt::format("; did you mean '{}'?", suggestion));
  }
}

void check_supported(const config::Config& cfg) {
  PRIMER_CHECK(!cfg.get_bool("neat_packing"),
               "{}: neat_packing needs attention and mixers that reset at document starts; the loader provides "
               "positions and segments, the model does not consume them yet",
               cfg.where("neat_packing"));
}

// The recipe's sequence-parallel layout and modes.
parallel::SequenceParallelOptions sequence_parallel_options(const config::Config& cfg) {
  parallel::SequenceParallelOptions o;
  const std::string mode = cfg.get_string("sequence_parallel_mode");
  o.attention =
      mode == "zigzag-ring" ? parallel::AttentionSequenceMode::Ring : parallel::parse_attention_sequence_mode(mode);
  o.layout = cfg.has("sequence_parallel_layout") ? parse_sequence_layout(cfg.get_string("sequence_parallel_layout"))
             : mode == "ring"                    ? SequenceLayout::Contiguous
                                                 : SequenceLayout::ZigZag;
  PRIMER_CHECK(mode != "zigzag-ring" || o.layout == SequenceLayout::ZigZag,
               "{}: sequence_parallel_mode zigzag-ring runs on the zigzag layout, but sequence_parallel_layout is {} "
               "(use sequence_parallel_mode: ring)",
               cfg.where("sequence_parallel_layout"), sequence_layout_name(o.layout));
  o.recurrent = parallel::parse_recurrent_sequence_mode(cfg.get_string("sequence_parallel_ssm_mode"));
  o.state_passing = parallel::parse_state_passing(cfg.get_string("sequence_parallel_state_passing"));
  return o;
}

// The process grid (world = dp × sp) and, with sp > 1, the sequence exchange every mixer reaches through the model.
void setup_parallel_layout(TrainSetup& s) {
  const int world = s.ranks.tensors->size();
  const int64_t sp = s.cfg.get_int("sequence_parallel_size");
  PRIMER_CHECK(sp <= world && world % sp == 0,
               "{}: sequence_parallel_size {} does not divide the {} ranks of this job (world = data-parallel x "
               "sequence-parallel ranks)",
               s.cfg.where("sequence_parallel_size"), sp, world);
  s.sp_options = sequence_parallel_options(s.cfg);
  s.shard = {s.ranks.tensors->rank(), world, 0, 1, s.sp_options.layout};
  if (sp == 1) return;
  const int64_t chunks = sequence_chunks(sp, s.sp_options.layout);
  PRIMER_CHECK(s.seq % chunks == 0,
               "{}: cutoff_len {} does not split into {} equal chunks ({} layout over {} sequence-parallel ranks)",
               s.cfg.where("cutoff_len"), s.seq, chunks, sequence_layout_name(s.sp_options.layout), sp);
  s.grid = std::make_unique<parallel::ProcessGrid>(*s.ranks.tensors, int(sp));
  s.shard = {s.grid->dp_rank(), s.grid->dp_size(), s.grid->sp_rank(), s.grid->sp_size(), s.sp_options.layout};
  s.sequence = std::make_unique<parallel::SequenceParallel>(s.grid->sp(), s.sp_options);
}

optim::AdamWConfig adamw_config(const config::Config& cfg) {
  optim::AdamWConfig adam;
  adam.beta1 = cfg.get_float("adam_beta1");
  adam.beta2 = cfg.get_float("adam_beta2");
  adam.eps = cfg.get_float("adam_epsilon");
  adam.weight_decay = cfg.get_float("weight_decay");
  adam.max_grad_norm = cfg.get_float("max_grad_norm");
  return adam;
}

optim::Schedule schedule_of(const config::Config& cfg) {
  optim::Schedule schedule;
  const int64_t max_steps = cfg.get_int("max_steps");
  schedule.kind = optim::Schedule::parse(cfg.get_string("lr_scheduler_type"));
  schedule.peak_lr = cfg.get_float("learning_rate");
  schedule.total_steps = max_steps;
  schedule.warmup_steps = cfg.has("warmup_steps") ? cfg.get_int("warmup_steps")
                          : cfg.has("warmup_ratio")
                              ? int64_t(std::ceil(cfg.get_float("warmup_ratio") * double(max_steps)))
                              : 0;
  return schedule;
}

std::unique_ptr<Objective> objective_of(const config::Config& cfg, const ModelConfig& model_config) {
  if (cfg.get_string("stage") != "hkd") return make_cross_entropy_objective();
  PRIMER_CHECK(model_config.fused,
               "{}: stage hkd (Priming Stage 1) trains a fused teacher-student checkpoint (written by `primer "
               "prime-init`); this model's pattern is '{}'",
               cfg.where("stage"), format_hybrid_pattern(model_config.layer_types));
  return make_distillation_objective(
      {cfg.get_bool("hybrid_distill_pre_lm_head"), cfg.get_string("hybrid_lw_distill_target") == "decoder"});
}

// The model declared, trainable parameters marked, then laid out over the ranks with each parameter's value
// (loaded from model_name_or_path, or drawn by its init rule) going straight into this rank's buffers: no rank
// holds the whole model on its device at start-up. Every rank sees the same full values (initialisation is keyed by
// name and element index) before keeping its shards, so the weights do not depend on the layout.
void build_model(TrainSetup& s) {
  s.params = std::make_unique<ParameterRegistry>();
  s.model = std::make_unique<layers::DecoderLM>(
      s.model_config, *s.params,
      layers::DecoderOptions{.recompute = !s.cfg.get_bool("disable_gradient_checkpointing"),
                             .selective_recompute = s.cfg.get_bool("selective_gradient_checkpointing"),
                             .selective_recompute_budget_bytes =
                                 s.cfg.has("selective_gradient_checkpointing_budget_gb")
                                     ? int64_t(s.cfg.get_float("selective_gradient_checkpointing_budget_gb") * 1e9)
                                     : -1});
  s.params->set_compute_dtype(s.compute);
  s.params->set_trainable(s.cfg.has("hybrid_learnable_params") ? s.cfg.get_list("hybrid_learnable_params")
                                                               : std::vector<std::string>{});
  const ParameterValues values = s.cfg.has("model_name_or_path")
                                     ? layers::hf_weight_values(s.cfg.get_string("model_name_or_path"), *s.params)
                                     : initial_values(s.seed);
  s.fsdp =
      std::make_unique<parallel::Fsdp>(*s.params, s.model->units(), *s.ranks.tensors, s.zero_stage, s.device, values);
  s.model->set_unit_hooks(s.fsdp.get());
  s.model->set_sequence_exchange(s.sequence.get());
}

std::unique_ptr<optim::AdamW> make_optimizer(TrainSetup& s) {
  auto optimizer = std::make_unique<optim::AdamW>(s.fsdp->shards(), adamw_config(s.cfg));
  optimizer->init_state();
  if (s.zero_stage != parallel::ZeroStage::Replicated && s.ranks.tensors->size() > 1) {
    parallel::Communicator* comm = s.ranks.tensors;
    optimizer->set_grad_norm_reduction(
        [comm](const Tensor& sumsq) { comm->all_reduce(sumsq, parallel::ReduceOp::Sum, "grad-norm"); });
  }
  return optimizer;
}

// The checkpoint the run resumes from; for a fresh run, nothing, once its directory is prepared (another run's
// checkpoints refused, or removed under overwrite_output_dir). Needs no model: a refused run learns it at once.
std::optional<std::string> resume_point(TrainSetup& s) {
  const auto from = s.checkpoints->resolve(
      s.cfg.has("resume_from_checkpoint") ? s.cfg.get_string("resume_from_checkpoint") : "", "resume_from_checkpoint");
  if (!from)
    prepare_fresh_run(*s.checkpoints, s.cfg.get_bool("overwrite_output_dir"), s.cfg.where("overwrite_output_dir"),
                      *s.ranks.host);
  return from;
}

void resume(TrainSetup& s, const std::optional<std::string>& from) {
  s.state.seed = s.seed;
  s.state.resolved_config = s.cfg.resolved_yaml();
  if (!from) return;
  const std::string resolved_now = s.state.resolved_config;
  s.state = s.checkpoints->load(*from, checkpoint_content(s));
  check_resume_continuity(s.cfg, s.state.resolved_config, *from);
  s.state.resolved_config = resolved_now;  // later checkpoints record the recipe they were trained with
  s.fsdp->masters_changed();
  PRIMER_CHECK(s.state.seed == s.seed, "checkpoint '{}' was trained with seed {}, the recipe says {}", *from,
               s.state.seed, s.seed);
  s.data->restore(s.state.data_cursor, *from + " (data cursor)");
  fmt::print("resumed from {} at step {}\n", *from, s.state.step);
}

}  // namespace

parallel::ZeroStage zero_stage_of(const config::Config& cfg) {
  if (cfg.has("zero_stage")) return parallel::zero_stage_from_int(cfg.get_int("zero_stage"));
  if (!cfg.has("deepspeed")) return parallel::ZeroStage::Replicated;
  const std::string path = cfg.get_string("deepspeed");
  const json::Value doc = json::parse_file(path);
  const json::Node root(doc, path);
  PRIMER_CHECK(root.has("zero_optimization") && root.at("zero_optimization").has("stage"),
               "{}: the DeepSpeed config '{}' has no zero_optimization.stage (set zero_stage in the recipe instead)",
               cfg.where("deepspeed"), path);
  return parallel::zero_stage_from_int(root.at("zero_optimization").at("stage").as_int());
}

CheckpointContent checkpoint_content(TrainSetup& s) { return sharded_content(*s.params, *s.fsdp, *s.optimizer); }

CheckpointContent sharded_content(ParameterRegistry& params, parallel::Fsdp& fsdp, optim::AdamW& optimizer) {
  CheckpointContent content;
  content.parameters = params.all();
  content.optimizer = &optimizer;
  auto to_state = [&](const parallel::ParameterChunk& c) {
    StateChunk out{.param = c.param, .offset = c.offset, .master = c.master, .compute = c.compute};
    if (c.param->trainable) {
      out.m = optimizer.first_moment(c.group).slice(0, c.group_offset, c.group_offset + c.count);
      out.v = optimizer.second_moment(c.group).slice(0, c.group_offset, c.group_offset + c.count);
    }
    return out;
  };
  for (const auto& c : fsdp.chunks(true)) content.owned.push_back(to_state(c));
  for (const auto& c : fsdp.chunks(false)) content.held.push_back(to_state(c));
  return content;
}

ModelConfig model_config_from(const config::Config& cfg) {
  json::Value doc;
  std::string source;
  if (cfg.has("model_config")) {
    source = cfg.where("model_config") + " (model_config)";
    doc = json::parse(cfg.get_map_json("model_config"), source);
    check_model_config_keys(doc, cfg.where("model_config"));
  } else {
    const std::string dir = cfg.get_string("model_name_or_path");
    check_model_dir(dir, cfg.where("model_name_or_path") + " (model_name_or_path)");
    source = dir + "/config.json";
    doc = json::parse_file(source);
  }
  if (cfg.has("config_overrides_json")) {
    apply_overrides(doc, json::parse(cfg.get_map_json("config_overrides_json"), "config_overrides_json"));
    source += " with config_overrides_json";
  }
  return from_hf_json(doc, source);
}

Device pick_device(const std::string& name) {
  if (name == "cpu") return Device::cpu();
  if (name == "cuda") {
    PRIMER_CHECK(cuda::available(), "device: cuda requested but no CUDA device is usable");
    return Device::cuda(cuda::current_device());
  }
  PRIMER_CHECK(name == "auto", "device '{}': expected auto, cpu or cuda", name);
  return cuda::available() ? Device::cuda(cuda::current_device()) : Device::cpu();
}

std::string model_name(const ModelConfig& c) {
  if (c.layer_types.empty()) return c.model_type;
  return "hybrid " + c.model_type + " " + format_hybrid_pattern(HybridPattern{c.layer_types, c.fused});
}

TrainSetup setup_training(const config::Config& cfg, const std::string& recipe, RunRanks ranks) {
  check_supported(cfg);
  PRIMER_CHECK(ranks.tensors && ranks.host && ranks.tensors->size() == ranks.host->size() &&
                   ranks.tensors->rank() == ranks.host->rank(),
               "setup_training: the tensor and host communicators must span the same ranks");
  TrainSetup s{.cfg = cfg, .recipe = recipe, .out_dir = cfg.get_string("output_dir")};
  s.ranks = ranks;
  s.zero_stage = zero_stage_of(cfg);
  if (cfg.has("tokenized_path") && cfg.has("dataset"))
    fmt::print("note: {} sets both dataset and tokenized_path; training reads the tokenized data\n", recipe);
  s.device = pick_device(cfg.get_string("device"));
  if (s.device.is_cuda()) cuda::set_device(s.device.index);
  s.model_config = model_config_from(cfg);
  s.objective = objective_of(cfg, s.model_config);
  s.batch = cfg.get_int("per_device_train_batch_size");
  s.seq = cfg.get_int("cutoff_len");
  s.accumulation = cfg.get_int("gradient_accumulation_steps");
  s.max_steps = cfg.get_int("max_steps");
  setup_parallel_layout(s);
  s.data = make_train_data(cfg, s.batch, s.seq, s.shard);
  PRIMER_CHECK(s.model_config.vocab_size >= s.data->vocab_size(),
               "the model's vocab_size {} is smaller than the data's vocabulary {} ({})", s.model_config.vocab_size,
               s.data->vocab_size(), s.data->describe());
  s.compute = s.device.is_cuda() && cfg.get_bool("bf16") ? DType::BF16 : DType::F32;
  s.seed = uint64_t(cfg.get_int("seed"));
  s.checkpoints = std::make_unique<CheckpointManager>(
      s.out_dir, cfg.has("save_total_limit") ? int(cfg.get_int("save_total_limit")) : 0, ranks.host);
  const std::optional<std::string> from = resume_point(s);
  build_model(s);
  s.optimizer = make_optimizer(s);
  s.schedule = schedule_of(cfg);
  resume(s, from);
  // The weights are final: frozen ones that bf16 holds exactly (a Hugging Face bf16 teacher's) need no f32 master.
  s.fsdp->release_frozen_masters();
  return s;
}

}  // namespace primer::recipes
