// `primer inspect` on a Hugging Face model directory: the model config.json describes and every tensor of its
// safetensors (name, shape, dtype). Safetensors carry no checksum: opening validates each file's header and data
// ranges; verified, every floating-point tensor is read and its NaN/inf values counted.
#include <filesystem>

#include "core/check.h"
#include "core/io/safetensors.h"
#include "layers/model_config.h"
#include "recipes/inspect_parts.h"
#include "recipes/train_setup.h"

namespace primer::recipes::inspect {
namespace fs = std::filesystem;
namespace {

bool is_floating(const std::string& safetensors_dtype) {
  return safetensors_dtype == "F32" || safetensors_dtype == "F16" || safetensors_dtype == "BF16" ||
         safetensors_dtype == "F64";
}

// What config.json says, or why primer cannot read it (the tensors are listed either way).
json::Value model_json(const fs::path& config) {
  json::Value m;
  try {
    const ModelConfig c = load_hf_config(config.string());
    m["name"] = model_name(c);
    m["vocab_size"] = c.vocab_size;
    m["hidden_size"] = c.hidden_size;
    m["num_hidden_layers"] = c.num_hidden_layers;
    m["torch_dtype"] = dtype_name(c.torch_dtype);
  } catch (const Error& e) {
    m["unreadable"] = e.what();
  }
  return m;
}

}  // namespace

json::Value describe_hf_model(const fs::path& dir, bool verify) {
  json::Value r;
  r["kind"] = "Hugging Face model";
  r["path"] = dir.string();
  r["model"] = model_json(dir / "config.json");
  const io::SafetensorsCheckpoint weights(dir.string());
  r["safetensors_files"] = int64_t(weights.num_files());
  int64_t total = 0;
  json::Array tensors;
  for (const std::string& name : weights.names()) {
    const io::SafetensorsEntry& e = weights.entry(name);
    total += shape_numel(e.shape);
    json::Value t;
    t["name"] = name;
    t["shape"] = json::Array(e.shape.begin(), e.shape.end());
    t["dtype"] = e.dtype;
    tensors.push_back(std::move(t));
  }
  json::Value parameters;
  parameters["count"] = total;
  parameters["tensors"] = std::move(tensors);
  r["parameters"] = std::move(parameters);
  if (!verify) return r;
  Verification v;
  v.count("safetensors files with valid headers and data ranges", int64_t(weights.num_files()));
  for (const std::string& name : weights.names())
    if (is_floating(weights.entry(name).dtype)) v.run([&] { v.count_nonfinite(name, weights.load(name, DType::F32)); });
  r["verify"] = v.to_json();
  return r;
}

}  // namespace primer::recipes::inspect
