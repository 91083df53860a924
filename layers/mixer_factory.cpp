#include "layers/mixer_factory.h"

#include <string>

#include "core/check.h"
#include "layers/mixer_spec.h"

namespace primer::layers {

std::unique_ptr<SequenceMixer> make_mixer(const ModelConfig& c, int64_t layer, ParameterRegistry& params) {
  const MixerKind kind = c.mixer(layer);
  const std::string prefix = "model.layers." + std::to_string(layer) + "." + mixer_module(kind);
  return mixer_spec(kind).make(c, prefix, params);
}

}  // namespace primer::layers
