#include "layers/mixer_factory.h"

#include <string>

#include "core/check.h"
#include "layers/attention_mixer.h"
#include "layers/gdn_mixer.h"
#include "layers/gka_mixer.h"
#include "layers/mamba2_mixer.h"

namespace primer::layers {

std::unique_ptr<SequenceMixer> make_mixer(const ModelConfig& c, int64_t layer, ParameterRegistry& params) {
  const MixerKind kind = c.mixer(layer);
  const std::string prefix = "model.layers." + std::to_string(layer) + "." + mixer_module(kind);
  switch (kind) {
    case MixerKind::Attention: return std::make_unique<AttentionMixer>(c, prefix, params, c.sliding_window);
    case MixerKind::SlidingWindow: return std::make_unique<AttentionMixer>(c, prefix, params, c.swa.window_size);
    case MixerKind::Mamba2: return std::make_unique<Mamba2Mixer>(c, prefix, params);
    case MixerKind::GatedDeltaNet: return std::make_unique<GdnMixer>(c, prefix, params);
    case MixerKind::GatedKalmaNet: return std::make_unique<GkaMixer>(c, prefix, params);
  }
  PRIMER_FAIL("layer {}: unknown mixer kind {}", layer, int(kind));
}

}  // namespace primer::layers
