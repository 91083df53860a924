// A sequence mixer in one place: its pattern token, parameter module, options (config.json block and Stage-0 recipe
// section, read and written through one field table), config checks and factory. Each mixer defines its MixerSpec
// next to its implementation; layers/mixer_registry.cpp lists them, and every consumer (pattern parsing, config.json,
// the mixer factory, the Stage-0 recipe schema, the CLI help) loops over that list, so adding a mixer is its own
// files, its MixerKind and ModelConfig options member, and one registration line.
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "core/io/json.h"
#include "core/parameters.h"
#include "layers/mixer.h"
#include "layers/model_config.h"

namespace primer {

// One option's value, whose alternative is its type: a flag, a count, a real, a count that may stay unset, or one
// of a list of names.
using MixerOption = std::variant<bool, int64_t, double, std::optional<int64_t>, std::string>;

// One option of a mixer (the reference's key), bound to its member of ModelConfig.
struct MixerField {
  const char* key;
  const char* doc;
  std::function<MixerOption(const ModelConfig&)> get;
  std::function<void(ModelConfig&, const MixerOption&)> set;
  // Counts below this are rejected by the recipe schema. A count whose default (in ModelConfig) lies below it has
  // no usable default: config.json must give it, and in the recipe it is optional (checked when the mixer is used).
  int64_t minimum = 0;
  std::vector<std::string> choices = {};  // a name's allowed values
};

// The field `key` of options struct C (ModelConfig::*block), e.g. field(&ModelConfig::gdn, "use_gate",
// &GdnConfig::use_gate, "...").
template <class C, class T>
MixerField field(C ModelConfig::*block, const char* key, T C::*member, const char* doc, int64_t minimum = 0) {
  return MixerField{key, doc,
                    [=](const ModelConfig& c) { return MixerOption(std::in_place_type<T>, (c.*block).*member); },
                    [=](ModelConfig& c, const MixerOption& v) { (c.*block).*member = std::get<T>(v); }, minimum};
}

// A name option of C, one of `choices`.
template <class C> MixerField choice_field(C ModelConfig::*block, const char* key, std::string C::*member,
                                           const char* doc, std::vector<std::string> choices) {
  MixerField f = field(block, key, member, doc);
  f.choices = std::move(choices);
  return f;
}

struct MixerSpec {
  MixerKind kind;
  const char* token;    // hybrid pattern token: "GDN"
  const char* module;   // parameter module: model.layers.<i>.<module>
  bool is_ssm;          // a recurrent state-space / linear-attention mixer (not softmax attention)
  const char* summary;  // one line for help texts
  // config.json options block ("gdn_config") and Stage-0 recipe section ("gdn"); null: the mixer has no options.
  const char* json_block = nullptr;
  const char* recipe_section = nullptr;
  std::vector<MixerField> fields = {};
  // The mixers a layer of this kind holds inside it (B'MOJO-F's SSM): their config.json blocks are read and written
  // with this one's.
  std::function<std::vector<MixerKind>(const ModelConfig& c)> holds = {};
  // config.json entries beyond `fields` (shape checks, fixed keys of the reference), when the mixer is used.
  std::function<void(const json::Node& block, ModelConfig& c)> read_json_extra = {};
  std::function<void(const ModelConfig& c, json::Value& block)> write_json_extra = {};
  // Consistency of the options when the pattern uses the mixer; errors name `source`.
  std::function<void(const ModelConfig& c, const std::string& source)> validate = {};
  std::function<std::unique_ptr<layers::SequenceMixer>(const ModelConfig& c, const std::string& prefix,
                                                       ParameterRegistry& params)>
      make = {};
};

// Every mixer, attention first, in the order help texts and generated docs list them.
const std::vector<const MixerSpec*>& mixer_specs();
const MixerSpec& mixer_spec(MixerKind kind);
const MixerSpec* find_mixer_spec(const std::string& token);  // null when no mixer has this token
// The tokens of the mixers that satisfy `keep` (all: every mixer), ", "-separated: "*, GKA, GDN, M2, SWA".
std::string mixer_tokens(const std::function<bool(const MixerSpec&)>& keep = nullptr);

// True for a count whose default lies below its minimum: it must be given wherever the mixer is used.
bool lacks_default(const MixerField& field);

// The shape entries of the reference's gka_config / gdn_config blocks: they must describe the model they sit in.
void check_mixer_heads(const json::Node& block, const ModelConfig& c);
void write_mixer_heads(const ModelConfig& c, json::Value& block);
// A block's shape entry, when present, must equal `expected`.
void expect_block_value(const json::Node& block, const char* key, int64_t expected);

}  // namespace primer
