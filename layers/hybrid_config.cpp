#include "layers/hybrid_config.h"

#include "core/check.h"

namespace primer {
namespace {

struct MixerName {
  MixerKind kind;
  const char* token;
  const char* module;
};
constexpr MixerName kMixers[] = {
    {MixerKind::Attention, "*", "self_attn"},   {MixerKind::SlidingWindow, "SWA", "swa"},
    {MixerKind::Mamba2, "M2", "mamba"},         {MixerKind::GatedDeltaNet, "GDN", "gdn"},
    {MixerKind::GatedKalmaNet, "GKA", "gka"},
};

const MixerName& entry(MixerKind kind) {
  for (const MixerName& m : kMixers)
    if (m.kind == kind) return m;
  PRIMER_FAIL("unknown mixer kind {}", int(kind));
}

}  // namespace

MixerKind parse_mixer_token(const std::string& token, const std::string& source) {
  for (const MixerName& m : kMixers)
    if (token == m.token) return m.kind;
  PRIMER_FAIL("{}: unknown hybrid pattern token '{}' (expected one of *, SWA, M2, GDN, GKA)", source, token);
}

const char* mixer_token(MixerKind kind) { return entry(kind).token; }
const char* mixer_module(MixerKind kind) { return entry(kind).module; }
bool is_ssm(MixerKind kind) {
  return kind == MixerKind::Mamba2 || kind == MixerKind::GatedDeltaNet || kind == MixerKind::GatedKalmaNet;
}

std::vector<MixerKind> parse_hybrid_pattern(const std::string& pattern, const std::string& source) {
  std::vector<MixerKind> layers;
  size_t start = 0;
  while (true) {
    const size_t dash = pattern.find('-', start);
    const std::string token = pattern.substr(start, dash == std::string::npos ? std::string::npos : dash - start);
    PRIMER_CHECK(!token.empty(), "{}: hybrid pattern '{}' has an empty token at character {} (tokens are separated by "
                 "single '-')", source, pattern, start);
    layers.push_back(parse_mixer_token(token, source + " (layer " + std::to_string(layers.size()) + ")"));
    if (dash == std::string::npos) break;
    start = dash + 1;
  }
  return layers;
}

std::string format_hybrid_pattern(const std::vector<MixerKind>& layers) {
  std::string out;
  for (size_t i = 0; i < layers.size(); ++i) {
    if (i) out += '-';
    out += mixer_token(layers[i]);
  }
  return out;
}

}  // namespace primer
