#include "layers/hf_checkpoint.h"

#include <filesystem>
#include <memory>
#include <set>

#include "core/check.h"
#include "core/io/atomic_file.h"
#include "core/io/safetensors.h"

namespace primer::layers {

namespace {

// The registry's parameters `ckpt` lacks (an error naming them when require_all), once every tensor both have is
// checked for its shape (mis-shaped ones are an error naming each); the checkpoint's tensors the registry does not
// use are reported in one line.
std::vector<std::string> check_fit(const io::SafetensorsCheckpoint& ckpt, ParameterRegistry& params, bool require_all) {
  std::vector<std::string> missing, misshaped;
  std::set<std::string> used;
  for (Parameter* p : params.all()) {
    if (!ckpt.contains(p->name)) {
      missing.push_back(p->name);
      continue;
    }
    used.insert(p->name);
    if (ckpt.entry(p->name).shape != p->shape)
      misshaped.push_back(fmt::format("{} (checkpoint {}, model {})", p->name, shape_str(ckpt.entry(p->name).shape),
                                      shape_str(p->shape)));
  }
  PRIMER_CHECK(misshaped.empty() && (missing.empty() || !require_all),
               "checkpoint '{}' does not fit the model: missing [{}]; mis-shaped [{}]", ckpt.directory(),
               fmt::join(require_all ? missing : std::vector<std::string>{}, ", "), fmt::join(misshaped, ", "));
  std::vector<std::string> unused;
  for (const std::string& n : ckpt.names())
    if (!used.count(n)) unused.push_back(n);
  if (!unused.empty())
    fmt::print(stderr, "primer: {} tensors of '{}' are not used by the model: {}\n", unused.size(), ckpt.directory(),
               fmt::join(unused, ", "));
  return missing;
}

// Copies every tensor the registry and the checkpoint share; returns the registry's names the checkpoint lacks
// (an error when require_all).
std::vector<std::string> load_shared(const std::string& dir, ParameterRegistry& params, bool require_all) {
  const io::SafetensorsCheckpoint ckpt(dir);
  const std::vector<std::string> missing = check_fit(ckpt, params, require_all);
  for (Parameter* p : params.all()) {
    if (!ckpt.contains(p->name)) continue;
    PRIMER_CHECK(p->master.defined(), "loading '{}' from '{}': the parameter's master was released", p->name, dir);
    p->master.copy_from(ckpt.load(p->name, DType::F32, p->master.device()));
  }
  params.sync_compute_copies();
  return missing;
}

}  // namespace

void load_hf_weights(const std::string& dir, ParameterRegistry& params) { load_shared(dir, params, true); }

std::vector<std::string> load_hf_weights_present(const std::string& dir, ParameterRegistry& params) {
  return load_shared(dir, params, false);
}

ParameterValues hf_weight_values(const std::string& dir, ParameterRegistry& params) {
  auto ckpt = std::make_shared<const io::SafetensorsCheckpoint>(dir);
  check_fit(*ckpt, params, true);
  return [ckpt](const Parameter& p) { return ckpt->load(p.name, DType::F32, Device::cpu()); };
}

void export_hf(const std::string& dir, const ModelConfig& config, ParameterRegistry& params, DType dtype,
               uint64_t max_shard_bytes) {
  std::filesystem::create_directories(dir);
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (Parameter* p : params.all()) tensors.emplace_back(p->name, p->exact_value().to(Device::cpu()).to(dtype));
  io::write_safetensors(dir, tensors, max_shard_bytes, {});
  ModelConfig out = config;
  out.torch_dtype = dtype;
  io::write_file_atomic(dir + "/config.json", json::dump(to_hf_json(out), 2) + "\n");
}

}  // namespace primer::layers
