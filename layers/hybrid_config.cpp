#include "layers/hybrid_config.h"

#include <optional>

#include "core/check.h"
#include "layers/mixer_spec.h"

namespace primer {

MixerKind parse_mixer_token(const std::string& token, const std::string& source) {
  const MixerSpec* spec = find_mixer_spec(token);
  PRIMER_CHECK(spec, "{}: unknown hybrid pattern token '{}' (expected one of {})", source, token, mixer_tokens());
  return spec->kind;
}

const char* mixer_token(MixerKind kind) { return mixer_spec(kind).token; }
const char* mixer_module(MixerKind kind) { return mixer_spec(kind).module; }
bool is_ssm(MixerKind kind) { return mixer_spec(kind).is_ssm; }

namespace {

std::vector<std::string> split_tokens(const std::string& pattern, const std::string& source) {
  std::vector<std::string> tokens;
  size_t start = 0;
  while (true) {
    const size_t dash = pattern.find('-', start);
    std::string token = pattern.substr(start, dash == std::string::npos ? std::string::npos : dash - start);
    PRIMER_CHECK(!token.empty(),
                 "{}: hybrid pattern '{}' has an empty token at character {} (tokens are separated by "
                 "single '-')",
                 source, pattern, start);
    tokens.push_back(std::move(token));
    if (dash == std::string::npos) break;
    start = dash + 1;
  }
  return tokens;
}

std::string layer_source(const std::string& source, size_t layer) {
  return source + " (layer " + std::to_string(layer) + ")";
}

// "*DA" → Attention; "X*" → X (X not attention). nullopt for a plain token.
std::optional<MixerKind> parse_fused_token(const std::string& token, const std::string& source) {
  if (token == "*DA") return MixerKind::Attention;
  if (token.size() < 2 || token.back() != '*') return std::nullopt;
  const MixerKind kind = parse_mixer_token(token.substr(0, token.size() - 1), source);
  PRIMER_CHECK(kind != MixerKind::Attention, "{}: '**' is not a fused token (attention on both streams is '*DA')",
               source);
  return kind;
}

}  // namespace

std::vector<MixerKind> parse_hybrid_pattern(const std::string& pattern, const std::string& source) {
  std::vector<MixerKind> layers;
  for (const std::string& token : split_tokens(pattern, source))
    layers.push_back(parse_mixer_token(token, layer_source(source, layers.size())));
  return layers;
}

std::string format_hybrid_pattern(const std::vector<MixerKind>& layers) {
  return format_hybrid_pattern({layers, false});
}

HybridPattern parse_any_hybrid_pattern(const std::string& pattern, const std::string& source) {
  const std::vector<std::string> tokens = split_tokens(pattern, source);
  HybridPattern out;
  out.fused = tokens[0] == "*DA" || (tokens[0].size() > 1 && tokens[0].back() == '*');
  for (const std::string& token : tokens) {
    const std::string where = layer_source(source, out.layers.size());
    const std::optional<MixerKind> fused = parse_fused_token(token, where);
    PRIMER_CHECK(fused.has_value() == out.fused,
                 "{}: token '{}' mixes fused and plain tokens in '{}' (a Stage 0/1 pattern uses only '*DA' and 'X*' "
                 "tokens, a standard one only {})",
                 where, token, pattern, mixer_tokens());
    out.layers.push_back(fused ? *fused : parse_mixer_token(token, where));
  }
  return out;
}

std::string format_hybrid_pattern(const HybridPattern& pattern) {
  std::string out;
  for (size_t i = 0; i < pattern.layers.size(); ++i) {
    if (i) out += '-';
    const MixerKind kind = pattern.layers[i];
    if (!pattern.fused) {
      out += mixer_token(kind);
    } else {
      out += kind == MixerKind::Attention ? std::string("*DA") : std::string(mixer_token(kind)) + "*";
    }
  }
  return out;
}

}  // namespace primer
