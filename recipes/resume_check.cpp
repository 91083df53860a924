#include "recipes/resume_check.h"

#include <algorithm>
#include <set>

#include "core/check.h"

namespace primer::recipes {
namespace {

// Keys whose change makes the resumed run another run: the data stream, the sequences, the model and what trains.
const std::set<std::string> kContinuityKeys = {"dataset",
                                               "tokenized_path",
                                               "cutoff_len",
                                               "val_size",
                                               "stage",
                                               "packing",
                                               "packing_method",
                                               "neat_packing",
                                               "drop_exceed_length_data",
                                               "mix_strategy",
                                               "interleave_probs",
                                               "length_weighted_sampling",
                                               "model_name_or_path",
                                               "model_config",
                                               "config_overrides_json",
                                               "hybrid_learnable_params",
                                               "hybrid_distill_pre_lm_head",
                                               "hybrid_lw_distill_target"};
// Keys that say where and how to resume, not what the run is.
const std::set<std::string> kResumeKeys = {"resume_from_checkpoint", "resume_allow_changes", "output_dir",
                                           "overwrite_output_dir"};

// A key's value as text ("unset" for an unset optional key), for comparing and for messages.
std::string value_text(const config::Config& c, const config::Field& f) {
  if (!c.has(f.key)) return "unset";
  switch (f.type) {
    case config::FieldType::Int: return std::to_string(c.get_int(f.key));
    case config::FieldType::Float: return fmt::format("{}", c.get_float(f.key));
    case config::FieldType::Bool: return c.get_bool(f.key) ? "true" : "false";
    case config::FieldType::String:
    case config::FieldType::Enum: return c.get_string(f.key);
    case config::FieldType::StringList: return fmt::format("[{}]", fmt::join(c.get_list(f.key), ", "));
    case config::FieldType::Map: return c.get_map_json(f.key);
  }
  return "";
}

}  // namespace

void check_resume_continuity(const config::Config& now, const std::string& saved_yaml, const std::string& checkpoint) {
  std::optional<config::Config> saved;
  try {
    saved = config::load_config_mapping(saved_yaml, now.schema(), checkpoint + " (its resolved recipe)");
  } catch (const std::exception& e) {
    fmt::print("note: the recipe of {} could not be read for comparison ({}); resuming without checking it\n",
               checkpoint, e.what());
    return;
  }
  const std::vector<std::string> allowed =
      now.has("resume_allow_changes") ? now.get_list("resume_allow_changes") : std::vector<std::string>{};
  std::vector<std::string> breaking, reported;
  for (const config::Field& f : now.schema().fields()) {
    if (kResumeKeys.count(f.key)) continue;
    const std::string before = value_text(*saved, f), after = value_text(now, f);
    if (before == after) continue;
    const std::string change = fmt::format("{}: {} -> {}", f.key, before, after);
    const bool allowed_here = std::find(allowed.begin(), allowed.end(), f.key) != allowed.end();
    (kContinuityKeys.count(f.key) && !allowed_here ? breaking : reported).push_back(change);
  }
  PRIMER_CHECK(
      breaking.empty(),
      "{}: the recipe no longer describes the run this checkpoint continues:\n  {}\n(a different run belongs in "
      "another output_dir; to continue anyway, list the keys in resume_allow_changes)",
      checkpoint, fmt::join(breaking, "\n  "));
  if (!reported.empty()) fmt::print("resuming with changed recipe keys: {}\n", fmt::join(reported, "; "));
}

}  // namespace primer::recipes
