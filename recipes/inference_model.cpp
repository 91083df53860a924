#include "recipes/inference_model.h"

#include <unistd.h>

#include <filesystem>

#include "core/check.h"
#include "core/io/hdf5_file.h"
#include "layers/hf_checkpoint.h"
#include "recipes/checkpoint.h"
#include "recipes/checkpoint_layout.h"
#include "recipes/train_schema.h"
#include "recipes/train_setup.h"

namespace primer::recipes {
namespace {
namespace fs = std::filesystem;

bool is_hf_model(const fs::path& dir) {
  return fs::is_regular_file(dir / "config.json") &&
         (fs::is_regular_file(dir / "model.safetensors") || fs::is_regular_file(dir / "model.safetensors.index.json"));
}

// The recipe a checkpoint stores (rank 0's file).
std::string stored_recipe(const fs::path& checkpoint) {
  const Manifest m = checkpoint_layout::check_complete(checkpoint);
  return io::Hdf5File::open_read_only((checkpoint / m.files.front().name).string())
      .read_bytes(checkpoint_layout::kResolvedConfig);
}

void declare(InferenceModel& m) {
  m.params = std::make_unique<ParameterRegistry>();
  m.model = std::make_unique<layers::DecoderLM>(m.config, *m.params);
}

}  // namespace

config::Config recipe_from_yaml(const std::string& yaml, const std::string& where,
                                const std::vector<std::string>& overrides) {
  // load_config reads files: the text goes through a private temporary one.
  const fs::path file = fs::temp_directory_path() / ("primer-recipe-" + std::to_string(::getpid()) + ".yaml");
  {
    std::FILE* f = std::fopen(file.c_str(), "wb");
    const bool written = f && std::fwrite(yaml.data(), 1, yaml.size(), f) == yaml.size();
    PRIMER_CHECK(f && std::fclose(f) == 0 && written, "cannot write the recipe of {} to {}", where, file.string());
  }
  try {
    config::Config cfg = config::load_config(file.string(), train_schema(), overrides);
    fs::remove(file);
    return cfg;
  } catch (const Error& e) {
    fs::remove(file);
    throw Error(fmt::format("the recipe of {}: {}", where, e.what()));
  }
}

InferenceModel load_inference_model(const std::string& path, Device device, DType compute) {
  PRIMER_CHECK(fs::is_directory(path),
               "'{}' is not a directory; expected a run directory, a training checkpoint or a Hugging Face model",
               path);
  InferenceModel m;
  std::optional<std::string> checkpoint;
  if (fs::is_regular_file(fs::path(path) / "manifest.json")) {
    checkpoint = path;
  } else if (!checkpoint_layout::checkpoint_dirs(path).empty()) {
    checkpoint = CheckpointManager(path, 0).resolve("auto", "the model path");
    PRIMER_CHECK(checkpoint, "run directory '{}' has no complete checkpoint whose checksums match", path);
  }
  if (!checkpoint) {
    PRIMER_CHECK(is_hf_model(path),
                 "'{}' holds no checkpoint-<step>/ directories, no training checkpoint (manifest.json) and no Hugging "
                 "Face model (config.json + model.safetensors or model.safetensors.index.json)",
                 path);
    m.source = path;
    m.config = load_hf_config(path + "/config.json");
    declare(m);
    m.params->materialize_compute_copies(device, compute, layers::hf_weight_values(path, *m.params));
    if (fs::is_regular_file(fs::path(path) / "tokenizer.json")) m.tokenizer_dir = path;
    return m;
  }
  m.source = *checkpoint;
  m.recipe_yaml = stored_recipe(*checkpoint);
  const config::Config recipe = recipe_from_yaml(m.recipe_yaml, *checkpoint);
  m.config = model_config_from(recipe);
  declare(m);
  m.params->materialize(device, compute, 0);
  optim::AdamW moments(*m.params, {});  // the checkpoint's moments land here and are dropped
  CheckpointManager(fs::path(*checkpoint).parent_path().string(), 0).load(*checkpoint, *m.params, moments);
  m.params->sync_compute_copies();
  m.params->release_masters(MasterRelease::All);
  if (recipe.has("model_name_or_path")) {
    const std::string base = recipe.get_string("model_name_or_path");
    if (fs::is_regular_file(fs::path(base) / "tokenizer.json")) m.tokenizer_dir = base;
  }
  return m;
}

}  // namespace primer::recipes
