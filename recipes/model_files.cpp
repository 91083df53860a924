#include "recipes/model_files.h"

#include <algorithm>
#include <array>
#include <filesystem>

#include "core/check.h"
#include "recipes/checkpoint_layout.h"

namespace primer::recipes {
namespace {

namespace fs = std::filesystem;

constexpr std::array<const char*, 7> kTokenizerFiles = {
    "tokenizer.json",    "tokenizer_config.json", "vocab.json", "merges.txt", "special_tokens_map.json",
    "added_tokens.json", "generation_config.json"};

bool is_weights_or_model_card(const std::string& name) {
  for (const char* ext : {".bin", ".pt", ".pth", ".ckpt"})
    if (name.ends_with(ext)) return true;
  return name.find("safetensors") != std::string::npos || name == "config.json" || name == "README.md" ||
         name == "LICENSE" || name == ".gitattributes";
}

}  // namespace

int copy_model_files(const std::string& from, const std::string& to, bool all_auxiliary) {
  int copied = 0;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(from, ec)) {
    if (!e.is_regular_file()) continue;
    const std::string name = e.path().filename().string();
    const bool tokenizer = std::find_if(kTokenizerFiles.begin(), kTokenizerFiles.end(),
                                        [&](const char* f) { return name == f; }) != kTokenizerFiles.end();
    if (!tokenizer && !(all_auxiliary && !is_weights_or_model_card(name))) continue;
    fs::copy_file(e.path(), fs::path(to) / name, fs::copy_options::overwrite_existing, ec);
    PRIMER_CHECK(!ec, "cannot copy '{}' to '{}': {}", e.path().string(), to, ec.message());
    ++copied;
  }
  PRIMER_CHECK(!ec, "cannot list '{}': {}", from, ec.message());
  return copied;
}

void check_model_dir(const std::string& dir, const std::string& what) {
  if (fs::is_regular_file(fs::path(dir) / "config.json")) return;
  PRIMER_CHECK(fs::exists(dir), "{}: '{}' does not exist; expected a Hugging Face model directory", what, dir);
  PRIMER_CHECK(!fs::exists(fs::path(dir) / checkpoint_layout::kManifestName),
               "{}: '{}' is a training checkpoint, not a Hugging Face model directory: pass its run directory (the "
               "model is written there when training ends) or a directory written by `primer export <recipe> --out "
               "DIR`",
               what, dir);
  PRIMER_FAIL("{}: '{}' has no config.json; expected a Hugging Face model directory (config.json + model.safetensors)",
              what, dir);
}

}  // namespace primer::recipes
